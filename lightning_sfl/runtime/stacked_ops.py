"""Per-client layers on stacked parameters: the batched client path of :class:`StackedBank`, without ``vmap``.

A group of ``G`` client slots runs its rows as ONE tensor ``x`` of shape ``[R, G, *sample]``: row ``r`` of slot ``g``
is ``x[r, g]`` (rows outermost, slots inside), and slot ``g``'s parameters are row ``g`` of the stacked ones
(``[G, *p.shape]``). In this layout a per-client convolution is one grouped convolution whose input and output are
free views (``[R, G·C, H, W]`` ↔ ``[R, G, C, H, W]``): no transposes before or after, which is what makes the
batched path pay off on a CPU (the ``vmap`` rule for ``conv2d`` builds the same grouped convolution but moves the
slot dimension in and out around it). Each layer type has its own rule:

============================  =========================================================================================
layer                         rule (``x``: ``[R, G, ...]``)
============================  =========================================================================================
``Conv2d`` (zero padding)     ``conv2d(x.view(R, G·C, H, W), w.view(G·O, C/g, k, k), groups=G·g)`` viewed back
``Linear``                    ``baddbmm(b, x_g, w_gᵀ)`` for every slot at once (``[G, R, I] @ [G, I, O]``)
``BatchNorm1d/2d``            ``batch_norm`` over ``G·C`` channels: per-client statistics, per-client running stats
activations, ``Dropout``      applied to ``x`` as it is (elementwise; dropout masks are independent per slot)
pooling, ``Flatten``          applied to ``x.flatten(0, 1)`` (one sample after another), viewed back to ``[R, G, ...]``
anything else                 ``vmap`` of ``functional_call`` over the slot dimension (e.g. ResNet's ``BasicBlock``)
============================  =========================================================================================

:class:`StackedProgram` compiles a module into that list of rules once; calling it runs the rules in order.

>>> from torch import nn
>>> net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3))
>>> program = StackedProgram(net)
>>> [step.rule for step in program.steps]
['conv2d', 'as_is', 'per_sample', 'linear']
>>> params = {n: p.detach().expand(2, *p.shape) for n, p in net.named_parameters()}  # 2 slots, same weights
>>> x = torch.randn(5, 2, 1, 4, 4)  # 5 rows for each of the 2 slots
>>> y = program(params, {}, x)
>>> y.shape, torch.allclose(y[:, 1], net(x[:, 1]), atol=1e-6)
(torch.Size([5, 2, 3]), True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap
from torch.nn.modules.batchnorm import _BatchNorm

from lightning_sfl.models.pooling import MaxPool2d

__all__ = ["StackedProgram"]

Tensors = dict[str, torch.Tensor]

#: Layers without parameters that act on each element alone: applied to ``[R, G, ...]`` as it is.
AS_IS = (nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Softplus, nn.Identity, nn.Dropout)
#: Layers without parameters that act on each sample alone: applied to ``[R·G, ...]`` (one sample after another).
PER_SAMPLE = (
    nn.MaxPool1d,
    nn.MaxPool2d,
    MaxPool2d,  # the zoo's: nn.MaxPool2d through the channels-last kernel on a CPU
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveMaxPool2d,
    nn.Flatten,
    nn.Dropout2d,
    nn.Upsample,
)


@dataclass(frozen=True)
class _Step:
    """One layer of a :class:`StackedProgram`: its rule, the module, and the full names of its tensors."""

    rule: str
    module: nn.Module
    prefix: str
    params: tuple[str, ...]
    buffers: tuple[str, ...]


def _rule(module: nn.Module) -> str:
    if isinstance(module, nn.Conv2d) and type(module) is nn.Conv2d and module.padding_mode == "zeros":
        return "conv2d"
    if type(module) is nn.Linear:
        return "linear"
    if isinstance(module, nn.BatchNorm1d | nn.BatchNorm2d) and module.momentum is not None:
        return "batch_norm"
    if type(module) in AS_IS:
        return "as_is"
    if type(module) in PER_SAMPLE:
        return "per_sample"
    return "vmap"


class StackedProgram:
    """``module`` as a list of per-layer rules over stacked parameters (see the module docstring).

    Args:
        module: the template (an ``nn.Sequential`` is unrolled, nested ones too; any other module is one step).
        prefix: prepended to the module's tensor names to find them in the dicts the program is called with
            (e.g. ``"5."`` for the last layer of a ``Sequential`` whose names start at its parent).

    Calling it with ``params``/``buffers`` (full name -> ``[G, ...]``) and ``x`` ``[R, G, ...]`` returns the output
    ``[R, G, ...]``; in-place buffer updates (BatchNorm running statistics) are written into the given tensors.
    """

    def __init__(self, module: nn.Module, prefix: str = "") -> None:
        self.steps: list[_Step] = []
        self._compile(module, prefix)

    def _compile(self, module: nn.Module, prefix: str) -> None:
        if type(module) is nn.Sequential:
            for name, child in module.named_children():
                self._compile(child, f"{prefix}{name}.")
            return
        params = tuple(prefix + n for n, _ in module.named_parameters())
        buffers = tuple(prefix + n for n, _ in module.named_buffers())
        self.steps.append(_Step(_rule(module), module, prefix, params, buffers))

    def __call__(self, params: Tensors, buffers: Tensors, x: torch.Tensor) -> torch.Tensor:
        for step in self.steps:
            x = _RULES[step.rule](step, params, buffers, x)
        return x


def _conv2d(step: _Step, params: Tensors, buffers: Tensors, x: torch.Tensor) -> torch.Tensor:
    m: nn.Conv2d = step.module  # type: ignore[assignment]
    w = params[step.prefix + "weight"]  # [G, O, C / groups, kh, kw]
    b = params.get(step.prefix + "bias")  # [G, O] or None
    r, g = x.shape[:2]
    y = F.conv2d(
        x.reshape(r, g * x.shape[2], *x.shape[3:]),
        w.reshape(g * w.shape[1], *w.shape[2:]),
        None if b is None else b.reshape(-1),
        m.stride,
        m.padding,
        m.dilation,
        g * m.groups,
    )
    return y.view(r, g, w.shape[1], *y.shape[2:])


def _linear(step: _Step, params: Tensors, buffers: Tensors, x: torch.Tensor) -> torch.Tensor:
    if x.dim() != 3:  # Linear over a trailing dimension of a larger sample: per slot
        return _vmapped(step, params, buffers, x)
    w = params[step.prefix + "weight"]  # [G, O, I]
    b = params.get(step.prefix + "bias")  # [G, O]
    xg = x.transpose(0, 1)  # [G, R, I]
    y = torch.bmm(xg, w.transpose(1, 2)) if b is None else torch.baddbmm(b.unsqueeze(1), xg, w.transpose(1, 2))
    return y.transpose(0, 1)  # [R, G, O]


def _batch_norm(step: _Step, params: Tensors, buffers: Tensors, x: torch.Tensor) -> torch.Tensor:
    """``nn.BatchNorm`` for every slot: the ``G·C`` channels of ``[R, G·C, ...]`` are the slots' channels, so batch
    statistics are per slot over its ``R`` rows, as are the running statistics (views into ``buffers``)."""
    m: _BatchNorm = step.module  # type: ignore[assignment]
    r, g, c = x.shape[:3]
    mean, var = buffers.get(step.prefix + "running_mean"), buffers.get(step.prefix + "running_var")
    tracked = buffers.get(step.prefix + "num_batches_tracked")
    if m.training and m.track_running_stats and tracked is not None:
        tracked.add_(1)
    w, b = params.get(step.prefix + "weight"), params.get(step.prefix + "bias")
    y = F.batch_norm(
        x.reshape(r, g * c, *x.shape[3:]),
        None if mean is None or (m.training and not m.track_running_stats) else mean.view(-1),
        None if var is None or (m.training and not m.track_running_stats) else var.view(-1),
        None if w is None else w.reshape(-1),
        None if b is None else b.reshape(-1),
        m.training or mean is None,
        m.momentum,
        m.eps,
    )
    return y.view(x.shape)


def _as_is(step: _Step, params: Tensors, buffers: Tensors, x: torch.Tensor) -> torch.Tensor:
    return step.module(x)


def _per_sample(step: _Step, params: Tensors, buffers: Tensors, x: torch.Tensor) -> torch.Tensor:
    y = step.module(x.reshape(-1, *x.shape[2:]))
    return y.view(x.shape[0], x.shape[1], *y.shape[1:])


def _vmapped(step: _Step, params: Tensors, buffers: Tensors, x: torch.Tensor) -> torch.Tensor:
    """Fallback: ``functional_call`` of the layer, ``vmap``-ed over the slot dimension (dimension 1 of ``x``)."""
    cut = len(step.prefix)
    p = {n[cut:]: params[n] for n in step.params}
    b = {n[cut:]: buffers[n] for n in step.buffers}

    def one(p: Tensors, b: Tensors, xk: torch.Tensor) -> torch.Tensor:
        return functional_call(step.module, (p, b), (xk,))

    return vmap(one, in_dims=(0, 0, 1), out_dims=1, randomness="different")(p, b, x)


_RULES: dict[str, Callable[[_Step, Tensors, Tensors, torch.Tensor], torch.Tensor]] = {
    "conv2d": _conv2d,
    "linear": _linear,
    "batch_norm": _batch_norm,
    "as_is": _as_is,
    "per_sample": _per_sample,
    "vmap": _vmapped,
}
