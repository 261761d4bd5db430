"""What a file may name: a class path read from a checkpoint, a run folder, a sweep file or a compare file is looked up
among what the library knows, never imported on the file's word.

Only the user's command line (and what it imports: ``--model my_methods.Prox``, ``PYTHONPATH=.``) names code to import.
A class path read from a file is resolved by :func:`known_class` against

- the short names the library gives its components (``NoPeek``, ``fedcbs``, ``scala``);
- the modules of this process that are already imported: the library's own and those the command line named (no
  import runs, so nothing of a module's top level runs on a file's word);
- the library's own modules (``lightning_sfl.…``), which import only the library and its dependencies;

and the class must be a subclass of what the option takes (a defence for ``defences``, a policy for
``client_selection``, a method for the method): a file cannot make the tool build an arbitrary class either. An
unknown name is one line naming it and what is accepted (:class:`~lightning_sfl.errors.ConfigError`).

:func:`safe_hyperparameters` applies this to a checkpoint's hyperparameters, :func:`check_named_code` to the
arguments and configs a sweep file or a compare file gives a command.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lightning_sfl.errors import ConfigError

__all__ = [
    "COMPONENT_KINDS", "ComponentKind", "check_named_code", "component_kinds", "known_class", "register_component_kind",
    "safe_hyperparameters",
]  # fmt: skip

#: A dotted Python name (``a.b.C``): what could name a module to import.
DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
#: What ends a file's name rather than a class path (``--config test.yaml`` names no module ``test``).
FILE_SUFFIXES = (".yaml", ".yml", ".json", ".ckpt", ".pt", ".pth", ".csv", ".txt", ".md", ".npz", ".npy", ".gz")
#: Packages a file's dotted name may point into (the library and the dependencies whose classes a config names: a
#: logger, a callback, an optimiser); imported only through the library's own parsing of the command.
TRUSTED_PACKAGES = ("lightning_sfl", "lightning", "pytorch_lightning", "torch", "torchvision", "torchmetrics")


def _library_module(module: str) -> bool:
    """Whether ``module`` is a module of the library that may be imported to look a name up (no ``__main__`` or other
    dunder part: importing those runs a program)."""
    parts = module.split(".")
    return parts[0] == "lightning_sfl" and all(p.isidentifier() and not p.startswith("__") for p in parts)


def _in_packages(module: str, packages: tuple[str, ...]) -> bool:
    parts = module.split(".")
    return parts[0] in packages and all(p.isidentifier() and not p.startswith("__") for p in parts)


def known_class(
    path: str,
    base: type,
    names: Mapping[str, type] | None = None,
    moved: Mapping[str, str] | None = None,
    importable: tuple[str, ...] = (),
) -> type | None:
    """The subclass of ``base`` that ``path`` names, if the library knows it (see the module docstring), else ``None``.

    ``names``: short names (``{"NoPeek": NoPeek}``); ``moved``: modules that classes were defined in before
    (``{old: new}``); ``importable``: other packages whose modules may be imported to look a name up (``torchvision``
    for a model). A module that is neither imported nor the library's (nor of ``importable``) is never imported.

    >>> from lightning_sfl.loop.selection import ClientSelection, FedCBSSelection
    >>> known_class("lightning_sfl.loop.selection.FedCBSSelection", ClientSelection) is FedCBSSelection
    True
    >>> known_class("this.Zen", ClientSelection), "this" in sys.modules
    (None, False)
    >>> known_class("lightning_sfl.loop.selection.ConfigError", ClientSelection)  # not a policy
    """
    if not isinstance(path, str):
        return None
    found = (names or {}).get(path)
    if found is None:
        module, _, name = path.rpartition(".")
        module = (moved or {}).get(module, module)
        loaded = sys.modules.get(module)
        if loaded is None and (_library_module(module) or _in_packages(module, importable)):
            try:
                if importlib.util.find_spec(module) is not None:
                    loaded = importlib.import_module(module)
            except (ImportError, ValueError):
                loaded = None
        found = getattr(loaded, name, None) if loaded is not None and name.isidentifier() else None
    return found if isinstance(found, type) and issubclass(found, base) else None


def class_path_of(cls: type) -> str:
    """``module.Name`` of ``cls``: a path to a module already imported (parsing it again imports nothing)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def component_config(component, package: str) -> dict:
    """``{"class_path": ..., "init_args": {...}}``: a component (a defence, a compressor) as the config checkpoints
    record: its constructor's arguments read back from its attributes of the same names, its class path through
    ``package`` (where the library's classes of that kind are exported) for the library's own."""
    import inspect

    cls = type(component)
    names = [n for n in inspect.signature(cls.__init__).parameters if n != "self"]
    module = package if cls.__module__.startswith(package) else cls.__module__
    return {"class_path": f"{module}.{cls.__qualname__}", "init_args": {n: getattr(component, n) for n in names}}


@dataclass(frozen=True)
class ComponentKind:
    """What an option that takes components accepts: subclasses of ``base``, by a short name of ``names`` or a class
    path; ``moved``: modules its classes were defined in before (checkpoints keep the old path)."""

    base: type
    names: Mapping[str, type] = field(default_factory=dict)
    moved: Mapping[str, str] = field(default_factory=dict)
    importable: tuple[str, ...] = ()

    def resolve(self, path: str) -> type | None:
        return known_class(path, self.base, self.names, self.moved, self.importable)


#: Option name -> the components it takes, for every option of a method that a checkpoint records as class paths;
#: each registered where its components are defined (:func:`register_component_kind`: ``client_selection`` in
#: :mod:`lightning_sfl.loop.selection`, ``defences`` in :mod:`lightning_sfl.defences`).
#:
#: :meta hide-value:
COMPONENT_KINDS: dict[str, ComponentKind] = {}


def register_component_kind(
    option: str,
    base: type,
    names: Mapping[str, type] | None = None,
    moved: Mapping[str, str] | None = None,
    importable: tuple[str, ...] = (),
) -> None:
    """Say that the option ``option`` of a method takes subclasses of ``base`` (``names``: their short names;
    ``moved``: modules they were defined in before; ``importable``: packages besides the library whose modules may be
    imported to find one)."""
    COMPONENT_KINDS[option] = ComponentKind(base, dict(names or {}), dict(moved or {}), tuple(importable))


def component_kinds() -> dict[str, ComponentKind]:
    """:data:`COMPONENT_KINDS`, once the library's components are imported (they register themselves)."""
    importlib.import_module("lightning_sfl.algorithms")  # (imports every method, and so every component module)
    return COMPONENT_KINDS


def _accepted(kind: ComponentKind) -> str:
    return ", ".join(kind.names) or kind.base.__name__


def safe_hyperparameters(hparams: Mapping, where: str) -> dict:
    """A checkpoint's hyperparameters ``hparams`` with every ``{"class_path": ...}`` config of a component option
    (:func:`component_kinds`) pointing at the class the library knows (:func:`known_class`, its path in this process:
    parsing it imports nothing); a class path the library does not know, or one in an option that takes no class, is a
    one-line :class:`~lightning_sfl.errors.ConfigError` naming ``where`` (the checkpoint), the option and the name.

    >>> safe_hyperparameters({"lr": 0.1, "client_selection": {"class_path": "this.X"}}, "ckpt_path='a.ckpt'")
    Traceback (most recent call last):
    ...
    lightning_sfl.errors.ConfigError: ckpt_path='a.ckpt': client_selection names 'this.X', which the library does not \
know (not imported: a file names no code to run); one of: uniform, fedcbs, class_balanced, or a ClientSelection \
class imported by the command line (attack: --import its module)
    """
    kinds = component_kinds()
    safe = {}
    for option, value in hparams.items():
        kind = kinds.get(option)
        if kind is None:
            _no_class_path(value, f"{where}: {option}")
            safe[option] = value
            continue
        items = value if isinstance(value, list | tuple) else [value]
        resolved = [_resolved(item, kind, where, option) for item in items]
        safe[option] = resolved if isinstance(value, list | tuple) else resolved[0]
    return safe


def _resolved(item, kind: ComponentKind, where: str, option: str):
    if not (isinstance(item, Mapping) and "class_path" in item):
        _no_class_path(item, f"{where}: {option}")
        return item
    cls = kind.resolve(item["class_path"])
    if cls is None:
        raise ConfigError(
            f"{where}: {option} names {item['class_path']!r}, which the library does not know (not imported: a file "
            f"names no code to run); one of: {_accepted(kind)}, or a {kind.base.__name__} class imported by the "
            "command line (attack: --import its module)"
        )
    init_args = item.get("init_args") or {}
    _no_class_path(init_args, f"{where}: {option}")
    return {**item, "class_path": class_path_of(cls)}


def _no_class_path(value, where: str) -> None:
    """A one-line error if ``value`` holds a class path anywhere (where no option takes one)."""
    for text in _class_paths(value):
        raise ConfigError(f"{where} holds a class path ({text!r}) where the library takes none: refused")


def _class_paths(value) -> Iterator[str]:
    if isinstance(value, Mapping):
        if "class_path" in value:
            yield str(value["class_path"])
        for v in value.values():
            yield from _class_paths(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _class_paths(v)


# ---------------------------------------------------------------------- the arguments a file gives a command
def _names_foreign_code(text: str) -> bool:
    """Whether ``text`` is a dotted name of an importable module outside :data:`TRUSTED_PACKAGES` (found without
    importing it), or has a dunder part (``torch.utils.bottleneck.__main__`` runs a program when imported)."""
    if not DOTTED.fullmatch(text):
        return False
    parts = text.split(".")
    if any(p.startswith("__") for p in parts):
        return True
    if parts[0] in TRUSTED_PACKAGES:
        return False
    try:
        return importlib.util.find_spec(parts[0]) is not None  # (a top-level name: nothing is imported)
    except (ImportError, ValueError):
        return False


def _strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def check_named_code(tokens: Iterable[str], where: str, cwd: Path | None = None) -> None:
    """Refuse, in one line naming ``where`` (the file), arguments read from a file that name code outside the library
    and its trusted dependencies: a dotted name of another importable module (``--model.client_selection
    evilmod.X``), in a value, in a YAML/JSON value (``{"class_path": ...}``) or in a config file the arguments name
    (``--config other.yaml``, ``cwd``-relative). What the user's own command line adds is not checked here.

    >>> check_named_code(["fit", "--model.lr=0.1", "--model", "lightning_sfl.algorithms.SCALA"], "sweep='s.yaml'")
    >>> check_named_code(["fit", "--config", "test.yaml"], "sweep='s.yaml'")  # (a file, though ``test`` is a module)
    >>> check_named_code(["fit", "--model.client_selection", "this.X"], "sweep='s.yaml'")
    Traceback (most recent call last):
    ...
    lightning_sfl.errors.ConfigError: sweep='s.yaml': 'this.X' names 'this.X', code outside the library: a file names \
no code to import; give your own classes on the command line (after --)
    """
    import yaml

    for token in tokens:
        value = token.split("=", 1)[1] if token.startswith("--") and "=" in token else token
        found = [value]
        if value[:1] in "{[":
            try:
                found = list(_strings(yaml.safe_load(value)))
            except yaml.YAMLError:
                pass
        path = Path(value) if not value.startswith("-") else None
        if path is not None and cwd is not None and not path.is_absolute():
            path = cwd / path
        if path is not None and path.suffix in (".yaml", ".yml", ".json") and path.is_file():
            try:
                found += list(_strings(yaml.safe_load(path.read_text())))
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                pass  # (the command reports an unreadable config itself)
        for text in found:
            if Path(text.strip()).suffix in FILE_SUFFIXES:  # (a file's name, ``test.yaml``: not a module's)
                continue
            if _names_foreign_code(text.strip()):
                raise ConfigError(
                    f"{where}: {token!r} names {text.strip()!r}, code outside the library: a file names no code to "
                    "import; give your own classes on the command line (after --)"
                )
