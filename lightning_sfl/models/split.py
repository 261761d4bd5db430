"""Cutting a :class:`~lightning_sfl.models.zoo.SplittableModel` into a client half and a server half.

The client half is ``layers[:i]`` and the server half ``layers[i:]`` where ``i = model.cut_points[split_point]``,
so ``server(client(x))`` is exactly ``model(x)`` for ``x`` of shape ``[B, *model.input_shape]``. The halves share
the model's modules (no copy) and keep the layer names of the full model, so e.g. the server half's
``state_dict()`` keys are a subset of the model's keys.

:func:`add_bottleneck` narrows the cut (SCALA journal §5.7, after ResSFL): the client half ends with a convolution to
a few channels and the server half starts with one back, so that fewer values cross the cut.
"""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

from lightning_sfl.errors import ConfigError
from lightning_sfl.models.zoo import SplittableModel, _dry_forward

__all__ = ["activation_shape", "add_bottleneck", "cut_tail", "split_model", "tail_points"]


def _cut_index(model: SplittableModel, split_point: str) -> int:
    if not isinstance(model, SplittableModel):
        raise TypeError(f"expected a SplittableModel, got {type(model).__name__}")
    canonical = model.canonical_cut(split_point)
    if canonical is None:
        label = f" of model {model.name!r}" if model.name else ""
        raise ConfigError(
            f"split_point={split_point!r} is not a cut point{label}; valid: {', '.join(model.cut_points)}"
        )
    return model.cut_points[canonical]


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


def add_bottleneck(
    client: nn.Sequential, server: nn.Sequential, channels: int, input_shape: tuple[int, ...]
) -> tuple[nn.Sequential, nn.Sequential]:
    """The halves with a bottleneck at the cut (SCALA journal §5.7: "a pair of Conv2D layers, with a channel size of 8
    and a stride of 1"; ResSFL's ``norelu_C8S1``): the client half ends with ``Conv2d(C → b, 3, stride 1, padding 1)``
    (no ReLU) and the server half starts with ``Conv2d(b → C, 3, stride 1, padding 1)``. Activations
    ``[B, C, H, W]`` become ``[B, b, H, W]``; the layers are appended as ``bottleneck`` (client) and prepended as
    ``unbottleneck`` (server), both with Glorot-uniform weights and zero biases (ResSFL initialises its client-side
    layer so and leaves the server-side one at PyTorch's default).

    Raises :class:`~lightning_sfl.errors.ConfigError` when the cut's activation (for one input of ``input_shape``)
    is not a ``[C, H, W]`` feature map, or ``channels`` is not a whole number >= 1.
    """
    if isinstance(channels, bool) or int(channels) != channels or channels < 1:
        raise ConfigError(f"channels={channels!r} (the bottleneck's) must be a whole number >= 1")
    shape = tuple(_dry_forward(client, input_shape).shape[1:])
    if len(shape) != 3:
        raise ConfigError(
            f"channels={channels} (the bottleneck's) needs a convolutional cut ([C, H, W] activations); this split "
            f"point gives activations of shape {list(shape)}"
        )
    c, b = shape[0], int(channels)
    down = nn.Conv2d(c, b, kernel_size=3, stride=1, padding=1)
    up = nn.Conv2d(b, c, kernel_size=3, stride=1, padding=1)
    for conv in (down, up):
        nn.init.xavier_uniform_(conv.weight)
        nn.init.zeros_(conv.bias)
    client_items = [*client._modules.items(), ("bottleneck", down)]
    server_items = [("unbottleneck", up), *server._modules.items()]
    return nn.Sequential(OrderedDict(client_items)), nn.Sequential(OrderedDict(server_items))


def tail_points(cut_points: dict[str, int], split_point: str, server: nn.Sequential) -> list[str]:
    """The cut points that can end the body of a model cut at ``split_point`` (``cut_points``: name → layer index of
    the whole model; ``server``: its layers from the cut on): deeper than ``split_point``, leaving weights on both
    sides (the server trains the body; the tail holds the classifier)."""
    start = cut_points[split_point]
    layers = list(server.children())
    out = []
    for name, index in cut_points.items():
        j = index - start
        if j <= 0 or j >= len(layers):
            continue
        if _has_weights(layers[:j]) and _has_weights(layers[j:]):
            out.append(name)
    return out


def _has_weights(layers: list[nn.Module]) -> bool:
    return any(p.numel() for m in layers for p in m.parameters())


def cut_tail(
    server: nn.Sequential, cut_points: dict[str, int], split_point: str, tail_point: str
) -> tuple[nn.Sequential, nn.Sequential]:
    """``(body, tail)``: the server half ``server`` (the whole model's layers from ``split_point`` on, their names
    kept) cut again at ``tail_point``; ``tail(body(a)) == server(a)``, the modules shared (no copy). A tail point that
    is not deeper than ``split_point``, or leaves the body or the tail without weights, is one
    :class:`~lightning_sfl.errors.ConfigError` naming the valid ones."""
    valid = tail_points(cut_points, split_point, server)
    if tail_point not in valid:
        listed = ", ".join(valid) if valid else "none: cut the client half at a shallower split_point"
        raise ConfigError(
            f"tail_point={tail_point!r} must be a cut point deeper than split_point={split_point!r} that leaves "
            f"weights in the server's body and in the clients' tail; valid: {listed}"
        )
    j = cut_points[tail_point] - cut_points[split_point]
    items = list(server._modules.items())
    return nn.Sequential(OrderedDict(items[:j])), nn.Sequential(OrderedDict(items[j:]))
