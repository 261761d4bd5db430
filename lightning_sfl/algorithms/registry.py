"""The method registry: a method registers itself where it is defined, and every list of methods derives from it.

>>> from lightning_sfl.algorithms import SCALA
>>> entry = REGISTRY["scala"]
>>> entry.cls is SCALA, entry.family
(True, 'split')
>>> "scala" in names(family="split") and "fedavg" in names(family="fl")
True

``@register("name", family=...)`` above a class is all it takes: ``lightning_sfl.algorithms`` imports every
module of its package (a new file is found without an import line), and from this registry come the CLI's names
(``--model scala``), ``ALGORITHMS``, the lazy top-level exports (``lightning_sfl.SCALA``), ``compare``'s default
methods (the synchronous families), the documentation's table of methods and the tests' method lists.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

__all__ = ["FAMILIES", "REGISTRY", "LiveMethods", "MethodEntry", "algorithm_path", "methods", "names", "register"]

#: Family -> what its methods share. The order is the order of every listing (then the names, alphabetically).
#:
#: :meta hide-value:
FAMILIES: dict[str, str] = {
    "split": "synchronous split federated learning: client halves, one or several server halves",
    "fl": "synchronous federated learning on the unsplit model (no server half)",
    "async": "asynchronous methods on a simulated event clock (a round is one aggregation)",
    "semi": "semi-supervised methods: labelled data on the server, unlabelled clients (--data.labelled_per_class)",
    "attack": "a malicious server: the clients' training serves an attack on their data, not the task",
}
#: Families ``compare`` runs when no ``--methods`` are named (the others count rounds differently or need other data).
SYNCHRONOUS: tuple[str, ...] = ("split", "fl")


@dataclass(frozen=True)
class MethodEntry:
    """One registered method.

    Attributes:
        name: the registry name (``--model <name>``, ``compare --methods <name>``, ``configs/<dataset>/<name>.yaml``).
        cls: the method's class.
        family: one of :data:`FAMILIES`.
    """

    name: str
    cls: type
    family: str


#: Registered name -> :class:`MethodEntry` of every method, filled by :func:`register` (and by plugins).
#:
#: :meta hide-value:
REGISTRY: dict[str, MethodEntry] = {}
_NAME = re.compile(r"[a-z][a-z0-9_]*")


def register(name: str, *, family: str) -> Callable[[type], type]:
    """Class decorator: register the method under ``name`` in ``family`` (see the module docstring).

    >>> @register("toy_doctest", family="nope")
    ... class Toy: ...
    Traceback (most recent call last):
    ...
    ValueError: family='nope' of method 'toy_doctest' is not one of: split, fl, async, semi, attack
    """
    if not _NAME.fullmatch(name):
        raise ValueError(f"method name {name!r} must be lower case letters, digits and '_', starting with a letter")
    if family not in FAMILIES:
        raise ValueError(f"family={family!r} of method {name!r} is not one of: {', '.join(FAMILIES)}")

    def decorate(cls: type) -> type:
        known = REGISTRY.get(name)
        if known is not None and f"{known.cls.__module__}.{known.cls.__qualname__}" != (
            f"{cls.__module__}.{cls.__qualname__}"
        ):  # the same class defined again (a module reloaded) replaces itself; another class may not take the name
            raise ValueError(f"method name {name!r} is taken by {known.cls.__module__}.{known.cls.__qualname__}")
        REGISTRY[name] = MethodEntry(name, cls, family)
        return cls

    return decorate


def _ordered() -> list[MethodEntry]:
    rank = {family: i for i, family in enumerate(FAMILIES)}
    return sorted(REGISTRY.values(), key=lambda e: (rank[e.family], e.name))


def methods(family: str | tuple[str, ...] | None = None) -> dict[str, type]:
    """Registered name -> class, by family (in :data:`FAMILIES`' order), then by name; ``family``: only those."""
    wanted = (family,) if isinstance(family, str) else family
    return {e.name: e.cls for e in _ordered() if wanted is None or e.family in wanted}


def names(family: str | tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Registered names (in :func:`methods`' order), of ``family`` where given."""
    return tuple(methods(family))


class LiveMethods(Mapping):
    """Registered name -> class, read from :data:`REGISTRY` at each use (:func:`methods`' order): a method registered
    after the library was imported (a plugin's, a user's ``@register``) is in it at once.

    >>> live = LiveMethods()
    >>> "scala" in live and live["scala"] is REGISTRY["scala"].cls
    True
    >>> list(live) == list(methods())
    True
    """

    def __getitem__(self, name: str) -> type:
        return REGISTRY[name].cls

    def __iter__(self) -> Iterator[str]:
        return iter(methods())

    def __len__(self) -> int:
        return len(REGISTRY)

    def __repr__(self) -> str:
        return f"LiveMethods({', '.join(self)})"


def algorithm_path(cls: type) -> str:
    """The name a checkpoint records for a method's class: ``lightning_sfl.algorithms.<Name>`` for the library's
    methods (however they were imported or spelled in a config), ``module.Name`` for methods defined elsewhere."""
    library = sys.modules.get("lightning_sfl.algorithms")  # (imported with this module: it exports the methods)
    if library is not None and getattr(library, cls.__name__, None) is cls:
        return f"lightning_sfl.algorithms.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"
