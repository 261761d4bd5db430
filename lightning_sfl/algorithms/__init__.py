"""Split-FL and FL methods, each registered where it is defined (:mod:`lightning_sfl.algorithms.registry`).

Importing this package imports every module in it, so a method in a new file is found without an import line here;
every registered class is then exported from this package (``from lightning_sfl.algorithms import SCALA``) and usable
as ``--model <name>``, ``--model <ClassName>`` or ``class_path: lightning_sfl.algorithms.<ClassName>`` in a config.

* ``ALGORITHMS``: registered name -> class, by family (split, fl, async, semi, attack), then by name; live: a method
  registered later (a plugin's: :mod:`lightning_sfl.plugins`) is in it at once;
* ``ASYNC_METHODS``: the asynchronous family (a "round" is one aggregation of ``Q_c`` uploads; ``compare`` runs them
  only when named);
* ``SEMI_METHODS``: the semi-supervised family (labelled data on the server only; they need
  ``--data.labelled_per_class``; ``compare`` runs them only when named).
"""

import importlib
import pkgutil

from lightning_sfl.algorithms.async_base import AsyncMethod
from lightning_sfl.algorithms.base import ClientModule, ServerModule, SplitFedAlgorithm
from lightning_sfl.algorithms.registry import (
    REGISTRY,
    LiveMethods,
    methods,  # noqa: F401 (imported from here by callers)
    names,
    register,
)
from lightning_sfl.algorithms.semi_supervised import SemiSupervised
from lightning_sfl.algorithms.split_method import SplitMethod

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")  # every module registers the methods it defines

#: Registered name -> class of every method, by family (split, fl, async, semi, attack), then by name (read from the
#: registry at each use).
#:
#: :meta hide-value:
ALGORITHMS: LiveMethods = LiveMethods()
ASYNC_METHODS: tuple[str, ...] = names(family="async")
SEMI_METHODS: tuple[str, ...] = names(family="semi")
globals().update({cls.__name__: cls for cls in ALGORITHMS.values()})  # (the library's own methods)

__all__ = [
    "ALGORITHMS",
    "ASYNC_METHODS",
    "REGISTRY",
    "SEMI_METHODS",
    "AsyncMethod",
    "ClientModule",
    "SemiSupervised",
    "ServerModule",
    "SplitFedAlgorithm",
    "SplitMethod",
    "register",
    *sorted(cls.__name__ for cls in ALGORITHMS.values()),
]
