"""The model a method is built on (``--model.arch``): a zoo name, a class path with init args, or a module.

:class:`ModelSource` is the one place a method's model is made, and the one every consumer asks for it (the halves,
the bytes and FLOPs of each cut, U-shaped tails, S²FL's sliding cut, ``lightning-sfl cuts``): no part rebuilds a
model by its name. It takes

- a zoo name (``cnn_small``, see :data:`~lightning_sfl.models.zoo.MODELS`): the zoo's :class:`SplittableModel`, cut
  at ``s1``…``s5``;
- a class path with init args of any ``nn.Module`` (``{"class_path": "torchvision.models.ResNet", "init_args":
  {...}}``, or a dotted name alone for a class whose arguments all have defaults), built with the data's class
  count as its ``num_classes`` argument when it has one;
- the name of a model an installed package publishes (entry point group ``lightning_sfl.models``,
  :mod:`~lightning_sfl.plugins`), built as its class path;
- an ``nn.Module`` instance (from Python), used as it is.

A module that is not a :class:`SplittableModel` is traced and cut at its modules' names
(:mod:`~lightning_sfl.models.graph_cut`). Its record (:meth:`ModelSource.config`, what the run's hyperparameters,
``config.yaml``, W&B and checkpoints hold) is the zoo name or the class path with the arguments it was built with.

>>> source = ModelSource("cnn_small", 10, (1, 8, 8))
>>> source.config(), list(source.model.cut_points)
('cnn_small', ['s1', 's2', 's3', 's4', 's5'])
>>> source = ModelSource({"class_path": "torch.nn.Flatten"}, 10, (1, 8, 8))
Traceback (most recent call last):
...
lightning_sfl.errors.ConfigError: arch='torch.nn.Flatten' maps one input of shape (1, 8, 8) to an output of shape \
[1, 64], not logits [1, 10] for the data's 10 classes
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from typing import Any

from torch import nn

from lightning_sfl.class_paths import IMPORTABLE, NAMED, build, class_of, label_of, plain
from lightning_sfl.errors import ConfigError
from lightning_sfl.known import register_component_kind
from lightning_sfl.models.zoo import MODELS, SplittableModel, _dry_forward, build_model

__all__ = ["ModelSource", "arch_label"]

def arch_label(arch: object) -> str:
    """How ``arch`` is named in messages and run records: the zoo name or the class path."""
    return label_of(arch)


class ModelSource:
    """Where a method's model comes from, and the model (see the module docstring).

    Args:
        arch: a zoo name, a class path (``{"class_path": ..., "init_args": {...}}`` or a dotted name), or an
            ``nn.Module``.
        num_classes: ``N``, the data's classes: the logits the model must give, and its ``num_classes`` argument.
        input_shape: ``(C, H, W)`` of one sample.

    Attributes:
        model: the model, a :class:`SplittableModel` (built once, on construction).
    """

    def __init__(self, arch: object, num_classes: int, input_shape: Sequence[int]) -> None:
        self.num_classes, self.input_shape = int(num_classes), tuple(int(s) for s in input_shape)
        self.label = arch_label(arch)
        self.zoo: str | None = arch if isinstance(arch, str) and arch in MODELS else None
        self._instance: nn.Module | None = None
        self._class: type | None = None
        self._init_args: dict[str, Any] | None = None
        if self.zoo is not None:
            self.model = self.build()
            return
        if isinstance(arch, nn.Module):
            self._instance = arch
            module = arch
        else:
            self._class, self._init_args = self._recipe(arch)
            module = self._construct()
        self.model = self._splittable(module)
        self._pristine = copy.deepcopy(self.model) if self._instance is not None else None

    def _recipe(self, arch: object) -> tuple[type, dict[str, Any]]:
        if isinstance(arch, str) and "." not in arch and arch not in NAMED["arch"]:
            names = ", ".join([*MODELS, *NAMED["arch"]])
            raise ConfigError(f"arch={arch!r} is not one of: {names}, nor a class path (module.Class)")
        return class_of(arch, "arch", nn.Module, f"a model of the zoo ({', '.join(MODELS)})")

    def _takes_num_classes(self) -> bool:
        try:
            return "num_classes" in inspect.signature(self._class).parameters
        except (TypeError, ValueError):
            return False

    def _construct(self) -> nn.Module:
        """A new model of the recorded class, with the data's ``num_classes`` (init args converted by jsonargparse, as
        the command line's: a class path given as text becomes the class)."""
        init_args = dict(self._init_args)
        if self._takes_num_classes():
            given = init_args.get("num_classes")
            default = inspect.signature(self._class).parameters["num_classes"].default
            if given not in (None, default, self.num_classes):
                raise ConfigError(
                    f"arch={self.label!r} with num_classes={given}: the data has {self.num_classes} classes (leave "
                    "num_classes out: it is set from the data)"
                )
            init_args["num_classes"] = self.num_classes
        self._init_args = init_args
        return build(self._class, init_args, nn.Module, "arch")

    def _splittable(self, module: nn.Module) -> SplittableModel:
        from lightning_sfl.models.graph_cut import traced_splittable

        try:
            out = _dry_forward(module, self.input_shape)
        except Exception as exc:
            reason = " ".join(str(exc).split())[:200]
            raise ConfigError(
                f"arch={self.label!r} does not take one input of shape {self.input_shape} (the data's): {reason}"
            ) from None
        if not hasattr(out, "shape") or tuple(out.shape) != (1, self.num_classes):
            shape = list(out.shape) if hasattr(out, "shape") else type(out).__name__
            raise ConfigError(
                f"arch={self.label!r} maps one input of shape {self.input_shape} to an output of shape {shape}, not "
                f"logits [1, {self.num_classes}] for the data's {self.num_classes} classes"
            )
        if isinstance(module, SplittableModel):
            return module
        return traced_splittable(module, self.input_shape, self.num_classes, self.label)

    def config(self) -> str | dict[str, Any]:
        """The record of the model: the zoo name, or ``{"class_path", "init_args"}`` (for a module given as an
        instance, ``init_args`` ``None`` and ``instance`` true: its arguments are not known, it cannot be rebuilt)."""
        if self.zoo is not None:
            return self.zoo
        if self._instance is not None:
            return {"class_path": self.label, "init_args": None, "instance": True}
        path = f"{self._class.__module__}.{self._class.__qualname__}" if self.label in NAMED["arch"] else self.label
        return {"class_path": path, "init_args": plain(self._init_args)}

    def build(self) -> SplittableModel:
        """A new model like ``model`` (its weights fresh for a zoo model or a class, copied for an instance): to
        measure what another cut costs."""
        if self.zoo is not None:
            return build_model(self.zoo, self.num_classes, self.input_shape)
        if self._pristine is not None:
            return copy.deepcopy(self._pristine)
        return self._splittable(self._construct())

    @property
    def cut_points(self) -> dict[str, int]:
        """The model's cut points (name -> layers before it), shallow to deep."""
        return self.model.cut_points

    def canonical_cut(self, name: str, option: str = "split_point") -> str:
        """The name in :attr:`cut_points` of the cut ``name`` (a module's name may be an alias); one line if none."""
        found = self.model.canonical_cut(name)
        if found is None:
            raise ConfigError(
                f"{option}={name!r} is not a cut point of model {self.label!r}; valid: {', '.join(self.cut_points)}"
            )
        return found


#: A checkpoint's ``arch`` names an ``nn.Module`` class the library knows: imported already, or of the library, torch
#: or torchvision (:mod:`~lightning_sfl.known`).
register_component_kind("arch", nn.Module, importable=IMPORTABLE)
