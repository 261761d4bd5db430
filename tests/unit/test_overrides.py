"""Every method of the library's classes that overrides a base's carries ``@override`` (``typing_extensions``), and
every ``@override`` names a method a base has: a misspelt hook (``on_train_epoch_edn``) fails here instead of doing
nothing. A mixin (a class of ours with no base but ``object``) overrides the hooks of Lightning's classes and torch's
``nn.Module`` that it is mixed into."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import lightning as L
import pytest
import torch
from typing_extensions import override

import lightning_sfl
import lightning_sfl.callbacks

#: What a mixin of ours is mixed into.
FRAMEWORK = (L.LightningModule, L.Callback, L.LightningDataModule, torch.nn.Module)
OURS = ("lightning_sfl",)


def _modules() -> list[str]:
    names = []
    for package in (lightning_sfl, lightning_sfl.callbacks):
        names.append(package.__name__)
        for found in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not found.name.endswith("__main__"):  # a module that runs a command when imported
                names.append(found.name)
    return names


def _classes() -> list[type]:
    classes = []
    for name in _modules():
        module = importlib.import_module(name)
        classes += [c for c in vars(module).values() if inspect.isclass(c) and c.__module__ == name]
    return classes


def _function(value):
    """The function behind a class attribute (a property's getter, a static or class method's function)."""
    if isinstance(value, property):
        return value.fget
    if isinstance(value, staticmethod | classmethod):
        return value.__func__
    return value if inspect.isfunction(value) else None


def overrides(cls: type, name: str) -> bool:
    """Whether ``cls.<name>`` replaces a base's attribute (for a mixin: a framework class's)."""
    if any(name in vars(base) for base in cls.__mro__[1:] if base is not object):
        return True
    mixin = all(base.__module__.startswith(OURS) for base in cls.__mro__[:-1])
    return mixin and any(hasattr(framework, name) for framework in FRAMEWORK)


def unmarked_and_misnamed(classes: list[type]) -> tuple[list[str], list[str]]:
    """The overrides without ``@override``, and the ``@override`` methods that override nothing."""
    unmarked, misnamed = [], []
    for cls in classes:
        for name, value in vars(cls).items():
            function = _function(value)
            if function is None or name.startswith("__"):
                continue
            marked = getattr(function, "__override__", False)
            if overrides(cls, name) and not marked:
                unmarked.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
            elif marked and not overrides(cls, name):
                misnamed.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
    return unmarked, misnamed


def test_every_override_is_marked_and_every_mark_overrides_a_base_method():
    classes = _classes()
    assert len(classes) > 100
    unmarked, misnamed = unmarked_and_misnamed(classes)
    assert not unmarked, f"{len(unmarked)} overrides without @override: {unmarked}"
    assert not misnamed, f"@override on methods no base has: {misnamed}"


def test_the_check_finds_a_misspelt_hook_and_an_unmarked_override():
    class Method(L.LightningModule):
        @override
        def on_train_epoch_edn(self):  # misspelt: Lightning never calls it
            pass

        def on_train_start(self):  # a hook override without its mark
            pass

    unmarked, misnamed = unmarked_and_misnamed([Method])
    assert [n.rsplit(".", 1)[-1] for n in unmarked] == ["on_train_start"]
    assert [n.rsplit(".", 1)[-1] for n in misnamed] == ["on_train_epoch_edn"]


@pytest.mark.parametrize("kind", [property, staticmethod, classmethod])
def test_a_marked_property_or_static_method_is_seen(kind):
    class Base:
        def value(self):
            return 1

    def value(*_):
        return 2

    Child = type("Child", (Base,), {"value": kind(override(value))})
    assert unmarked_and_misnamed([Child]) == ([], [])
