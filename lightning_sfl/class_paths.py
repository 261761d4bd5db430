"""Components given as a class path with init args (``{"class_path": ..., "init_args": {...}}``): a model
(``--model.arch``) or a dataset (``--data.dataset``), recorded so, and built again from the record.

A record may come from a file (a checkpoint's hyperparameters): its class is looked up, never imported on its word,
among the modules this process has imported (the library's and those the command line named) and those of
:data:`IMPORTABLE`; a dotted name in its arguments must point into the same (:func:`check_names`). The arguments are
converted as the command line's are (a class path given as text becomes the class), by jsonargparse.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Mapping
from typing import Any

from lightning_sfl.errors import ConfigError

__all__ = [
    "IMPORTABLE", "NAMED", "build", "check_names", "class_of", "dataset_name", "label_of", "plain", "record_of",
    "recorded", "register_named", "resolve",
]  # fmt: skip

#: Components registered by name (``kind`` -> name -> class): models (``arch``) and datasets (``dataset``) that
#: installed packages publish (:mod:`~lightning_sfl.plugins`), live: ``--model.arch NAME``, ``--data.dataset NAME``.
NAMED: dict[str, dict[str, type]] = {"arch": {}, "dataset": {}}

#: Packages whose modules a recorded class path may be imported from (a checkpoint of a torchvision model is opened in
#: a process that has not imported torchvision's models yet); anything else must already be imported.
IMPORTABLE = ("lightning_sfl", "torch", "torchvision")


def label_of(value: object) -> str:
    """How a component is named in messages and records: the name, the class path, or the class of an object."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return str(value.get("class_path"))
    return f"{type(value).__module__}.{type(value).__qualname__}"


def dataset_name(value: object) -> str:
    """The short name of the data option ``dataset``: a built-in's name, a class path's class in lower case.

    >>> dataset_name("digits"), dataset_name({"class_path": "torchvision.datasets.ImageFolder", "init_args": {}})
    ('digits', 'imagefolder')
    """
    path = value.get("class_path") if isinstance(value, dict) else getattr(value, "class_path", None)
    if isinstance(path, str):
        return path.rpartition(".")[2].lower()
    return str(value)


def importable(module: str) -> bool:
    """Whether ``module`` may be imported to look a recorded name up (a module of :data:`IMPORTABLE`)."""
    parts = module.split(".")
    return parts[0] in IMPORTABLE and all(p.isidentifier() and not p.startswith("__") for p in parts)


def register_named(kind: str, name: str, cls: type) -> None:
    """Register ``cls`` as the ``kind`` (``arch`` or ``dataset``) called ``name`` (:data:`NAMED`)."""
    NAMED[kind][name] = cls


def resolve(path: str, what: str, hint: str) -> object:
    """The object ``path`` (``module.Name``, or a name registered for ``what`` in :data:`NAMED`) names, from a module
    already imported or one of :data:`IMPORTABLE`; else one line: ``what`` names it, ``hint`` says what else it could
    be."""
    if path in NAMED.get(what, {}):
        return NAMED[what][path]
    module, _, name = path.rpartition(".")
    loaded = sys.modules.get(module)
    if loaded is None and module and importable(module):
        try:
            loaded = importlib.import_module(module)
        except ImportError:
            loaded = None
    found = getattr(loaded, name, None) if loaded is not None and name.isidentifier() else None
    if found is None:
        raise ConfigError(
            f"{what} names {path!r}, which is not {hint} nor a class of a module this process has imported (give its "
            "module on the command line, e.g. PYTHONPATH=. with mymodule.MyClass, or install it)"
        )
    return found


def check_names(value: object, what: str) -> None:
    """Refuse a dotted name in init args whose module is neither imported nor importable (:func:`resolve`)."""
    if isinstance(value, str) and "." in value and value.replace(".", "").replace("_", "").isalnum():
        module = value.rpartition(".")[0]
        if module not in sys.modules and not importable(module) and not value[0].isdigit():
            raise ConfigError(f"{what} names {value!r}, whose module is not imported: nothing is imported on its word")
    elif isinstance(value, Mapping):
        for v in value.values():
            check_names(v, what)
    elif isinstance(value, list | tuple):
        for v in value:
            check_names(v, what)


def plain(value: object) -> object:
    """``value`` as data for a record: classes and functions by their path, containers item by item."""
    if isinstance(value, type) or inspect.isfunction(value):
        return f"{value.__module__}.{value.__qualname__}"
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def record_of(value: object, what: str) -> tuple[type, dict[str, Any]]:
    """The class and init args of the class path ``value`` (a record or a dotted name), checked (see the module
    docstring); a record of an object given in Python (``instance``) cannot be built again: one line."""
    if isinstance(value, str):
        value = {"class_path": value}
    if not isinstance(value, Mapping) or not isinstance(value.get("class_path"), str):
        raise ConfigError(f"{what}={value!r} must be a name or a class path with init args, not {type(value).__name__}")
    if value.get("instance"):
        raise ConfigError(
            f"{what}: {value['class_path']} was given as an object in Python, its arguments not recorded: give it "
            "again (e.g. Method.load_from_checkpoint(path, arch=MyNet(...)))"
        )
    unknown = set(value) - {"class_path", "init_args", "dict_kwargs"}
    if unknown:
        raise ConfigError(f"{what} has keys {sorted(unknown)}: a class path takes class_path and init_args only")
    init_args = dict(value.get("init_args") or {})
    check_names(init_args, f"{what}={value['class_path']!r}")
    return value["class_path"], init_args


def build(cls: type, init_args: Mapping[str, Any], base: type, what: str) -> object:
    """``cls(**init_args)``, the arguments converted by jsonargparse as the command line's (``base``: what ``cls``
    must subclass); the class's own refusal of its arguments is one line naming ``what``."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--value", type=base)
    path = f"{cls.__module__}.{cls.__qualname__}"
    try:
        config = parser.parse_object({"value": {"class_path": path, "init_args": dict(init_args)}})
        return parser.instantiate(config).value
    except Exception as exc:  # (the class's own refusal of its arguments, or jsonargparse's)
        reason = " ".join(str(exc).split())[:240]
        raise ConfigError(f"{what}={path!r} could not be built with {dict(init_args)}: {reason}") from None


def class_of(value: object, what: str, base: type, hint: str) -> tuple[type, dict[str, Any]]:
    """The class (a subclass of ``base``) and init args of the class path ``value`` (:func:`record_of`,
    :func:`resolve`; ``hint``: what else ``what`` could name); one line if it names something else."""
    path, init_args = record_of(value, what)
    cls = resolve(path, what, hint)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"{what}={path!r} is not a {base.__qualname__} class")
    return cls, init_args


def recorded(value: object, record: object, base: type) -> object:
    """What a component option is built from: ``value``, or — for an object (a ``base``) the command line's parser
    built from a class path, whose class path and arguments the recorded hyperparameters ``record`` hold — that
    record, so that the component is built (with what the data gives it) and recorded as its class path."""
    if isinstance(value, base) and isinstance(record, Mapping) and isinstance(record.get("class_path"), str):
        module, _, name = record["class_path"].rpartition(".")
        if getattr(sys.modules.get(module), name, None) is type(value):
            return {"class_path": record["class_path"], "init_args": record.get("init_args") or {}}
    return value
