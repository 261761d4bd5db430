"""Cutting a :class:`~lightning_sfl.models.zoo.SplittableModel` into a client half and a server half.

The client half is ``layers[:i]`` and the server half ``layers[i:]`` where ``i = model.cut_points[split_point]``,
so ``server(client(x))`` is exactly ``model(x)`` for ``x`` of shape ``[B, *model.input_shape]``. The halves share
the model's modules (no copy) and keep the layer names of the full model, so e.g. the server half's
``state_dict()`` keys are a subset of the model's keys.
"""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

from lightning_sfl.errors import ConfigError
from lightning_sfl.models.zoo import SplittableModel, _dry_forward

__all__ = ["activation_shape", "split_model"]


def _cut_index(model: SplittableModel, split_point: str) -> int:
    if not isinstance(model, SplittableModel):
        raise TypeError(f"expected a SplittableModel, got {type(model).__name__}")
    if split_point not in model.cut_points:
        label = f" of model {model.name!r}" if model.name else ""
        raise ConfigError(
            f"split_point={split_point!r} is not a cut point{label}; valid: {', '.join(model.cut_points)}"
        )
    return model.cut_points[split_point]


def split_model(model: SplittableModel, split_point: str) -> tuple[nn.Sequential, nn.Sequential]:
    """Return ``(client_half, server_half)``; ``server_half(client_half(x))`` equals ``model(x)``.

    ``client_half``: ``[B, *model.input_shape] -> [B, *activation_shape(model, split_point)]``;
    ``server_half``: that activation ``-> [B, model.num_classes]``. The halves SHARE the model's modules (no
    copy): training either half trains the model. Use ``copy.deepcopy`` on a half for per-client copies.
    """
    i = _cut_index(model, split_point)
    items = list(model._modules.items())
    return nn.Sequential(OrderedDict(items[:i])), nn.Sequential(OrderedDict(items[i:]))


def activation_shape(model: SplittableModel, split_point: str) -> tuple[int, ...]:
    """Shape of ONE sample's activation at the cut (no batch dim), e.g. ``(64, 8, 8)`` for alexnet_cifar/s2.

    Computed from a dry forward of a zeros input in eval mode (BatchNorm statistics are not touched).
    """
    client, _ = split_model(model, split_point)
    return tuple(_dry_forward(client, model.input_shape, like=model).shape[1:])
