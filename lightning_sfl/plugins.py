"""Plugins: methods, models and datasets from installed packages, by name.

A package publishes a method with a Python entry point in the group ``lightning_sfl.methods`` (name: the registry
name, value: ``module:Class``), a model in ``lightning_sfl.models`` (an ``nn.Module`` class: ``--model.arch NAME``,
built with the data's ``num_classes`` when it takes one, cut at its modules' names) and a dataset in
``lightning_sfl.datasets`` (a torch ``Dataset`` class of ``(x, y)``: ``--data.dataset NAME``, built with the data
root as ``root`` when it takes one, and ``train=True``/``False`` for its two splits when it takes ``train``), in its
``pyproject.toml``::

    [project.entry-points."lightning_sfl.methods"]
    prox_scala = "my_methods:ProxSCALA"

    [project.entry-points."lightning_sfl.models"]
    tiny_resnet = "my_methods:TinyResNet"

Once the package is installed, ``--model prox_scala``, ``--model.help prox_scala``, ``compare --methods prox_scala``
and ``attack`` on its checkpoints work as for the library's own methods: every command loads the installed entry
points (:func:`load_plugins`) before it reads its arguments. The class must be a
:class:`~lightning_sfl.algorithms.SplitFedAlgorithm`; where its module does not ``@register`` it under the entry point's
name, it is registered there, in the family of the nearest registered class it derives from (a subclass of SCALA is a
split method).

Only installed entry points (and the user's own command line) name code to import: a class path read from a file is
never imported on the file's word (:mod:`lightning_sfl.known`), but a plugin's class, imported here, is known.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from lightning_sfl.errors import ConfigError

__all__ = ["DATASETS_GROUP", "METHODS_GROUP", "MODELS_GROUP", "load_plugins"]

#: The entry point group of methods.
METHODS_GROUP = "lightning_sfl.methods"
#: The entry point group of models (``--model.arch NAME``).
MODELS_GROUP = "lightning_sfl.models"
#: The entry point group of datasets (``--data.dataset NAME``).
DATASETS_GROUP = "lightning_sfl.datasets"

_loaded = False


def _where(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    name = f" of {dist.name} {dist.version}" if dist is not None else ""
    return f"plugin {ep.name!r} ({getattr(ep, 'group', None) or METHODS_GROUP} entry point{name}: {ep.value})"


def _family_of(cls: type) -> str | None:
    from lightning_sfl.algorithms.registry import REGISTRY

    families = {entry.cls: entry.family for entry in REGISTRY.values()}
    return next((families[base] for base in cls.__mro__[1:] if base in families), None)


def _object(ep: EntryPoint) -> object:
    try:
        return ep.load()
    except Exception as exc:  # a broken plugin: the user can fix or uninstall it, not the library
        raise ConfigError(f"{_where(ep)} does not load: {type(exc).__name__}: {exc}") from None


def _load_component(ep: EntryPoint, kind: str) -> None:
    """A model (``kind`` ``arch``) or dataset (``dataset``) plugin: its class, registered under its name."""
    import torch
    from torch import nn

    from lightning_sfl.class_paths import NAMED, register_named
    from lightning_sfl.data.datasets import DATASETS
    from lightning_sfl.models.zoo import MODELS

    base, built_in = (nn.Module, MODELS) if kind == "arch" else (torch.utils.data.Dataset, DATASETS)
    obj = _object(ep)
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise ConfigError(f"{_where(ep)} names {obj!r}, which is not a {base.__module__}.{base.__qualname__} class")
    taken = NAMED[kind].get(ep.name)
    if ep.name in built_in or (taken is not None and taken is not obj):
        raise ConfigError(f"{_where(ep)}: the name {ep.name!r} is taken (by the library's or another plugin's)")
    register_named(kind, ep.name, obj)


def _load(ep: EntryPoint) -> None:
    from lightning_sfl.algorithms import REGISTRY, SplitFedAlgorithm, register

    obj = _object(ep)
    if not (isinstance(obj, type) and issubclass(obj, SplitFedAlgorithm)):
        raise ConfigError(f"{_where(ep)} names {obj!r}, which is not a SplitFedAlgorithm class")
    known = REGISTRY.get(ep.name)
    if known is not None:
        if known.cls is not obj:
            where = f"{known.cls.__module__}.{known.cls.__qualname__}"
            raise ConfigError(f"{_where(ep)}: the name {ep.name!r} is taken by {where}")
        return
    family = _family_of(obj)
    if family is None:
        raise ConfigError(f"{_where(ep)}: {obj.__qualname__} derives from no registered method (@register it)")
    try:
        register(ep.name, family=family)(obj)
    except ValueError as exc:
        raise ConfigError(f"{_where(ep)}: {exc}") from None


def load_plugins() -> None:
    """Import every installed method, model and dataset plugin and register it (once per process); a broken one is one
    line (:class:`~lightning_sfl.errors.ConfigError`) naming its distribution and entry point."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for ep in sorted(entry_points(group=METHODS_GROUP), key=lambda ep: ep.name):
        _load(ep)
    for group, kind in ((MODELS_GROUP, "arch"), (DATASETS_GROUP, "dataset")):
        for ep in sorted(entry_points(group=group), key=lambda ep: ep.name):
            _load_component(ep, kind)
