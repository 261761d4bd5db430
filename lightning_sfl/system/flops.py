"""Training FLOPs of a module, counted by PyTorch's ``FlopCounterMode``.

``FlopCounterMode`` counts the FLOPs of matrix products and convolutions (``mm``, ``addmm``, ``bmm``,
``convolution`` and their backward, attention kernels), each multiply-add as 2 FLOPs; it does *not* count
bias additions, activations, pooling, normalisation or the loss. A training step of one layer costs its forward
product plus, in the backward pass, one product of the same size per gradient actually computed: the weight
gradient, and the input gradient only where the input requires one — so the first layer of a client half (its
input is data) costs 2× its forward and every later layer 3×.

>>> training_flops_per_sample(torch.nn.Linear(10, 5), (10,))  # forward 2·10·5, weight gradient 2·10·5
200.0
>>> forward_flops_per_sample(torch.nn.Linear(10, 5), (10,))
100.0
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def training_flops_per_sample(module: nn.Module, input_shape: Sequence[int], batch_size: int = 2) -> float:
    """FLOPs of one forward and backward pass per sample of ``module`` (in training mode) on inputs of shape
    ``input_shape`` (one sample, no batch dimension).

    Runs a zero batch of ``batch_size`` rows (2: batch norm needs more than one in training mode) through a
    CPU deep copy of ``module``, then back-propagates a gradient of ones from the output into every parameter
    that requires a gradient (as the activations' gradient does in split learning), and divides the total by
    ``batch_size``. The input does not require a gradient. The module's parameters, gradients, buffers, mode
    and the global CPU random state are left untouched.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    with torch.random.fork_rng(devices=[]):  # dropout of the copy must not shift the run's random stream
        model = copy.deepcopy(module).cpu().train()
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.get_default_dtype())
        x = torch.zeros(batch_size, *input_shape, dtype=dtype)
        params = [p for p in model.parameters() if p.requires_grad]
        with FlopCounterMode(display=False) as counter:
            out = model(x)
            if not isinstance(out, torch.Tensor):
                raise TypeError(f"module must return one tensor, got {type(out).__name__}")
            if params and out.requires_grad:
                torch.autograd.grad(out, params, grad_outputs=torch.ones_like(out), allow_unused=True)
    return counter.get_total_flops() / batch_size


def forward_flops_per_sample(module: nn.Module, input_shape: Sequence[int], batch_size: int = 2) -> float:
    """FLOPs of one forward pass per sample of ``module`` (training mode, counted as in
    :func:`training_flops_per_sample`; the backward pass costs the difference of the two)."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        model = copy.deepcopy(module).cpu().train()
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.get_default_dtype())
        with FlopCounterMode(display=False) as counter:
            model(torch.zeros(batch_size, *input_shape, dtype=dtype))
    return counter.get_total_flops() / batch_size


@dataclass(frozen=True)
class CutCost:
    """What one client pays per sample at one cut point of a model (see :func:`cut_costs`).

    Attributes:
        forward: FLOPs of the client half's forward pass per sample.
        backward: FLOPs of its backward pass per sample (weight gradients, and input gradients past the first layer).
        activation_bytes: bytes of one sample's activations at the cut (float32: ``4·∏shape``).
        model_bytes: bytes of the client half as sent (its state dict).
    """

    forward: float
    backward: float
    activation_bytes: int
    model_bytes: int


def cut_costs(model: nn.Module, cuts: Sequence[str] | None = None) -> dict[str, CutCost]:
    """Cost of the client half at each of ``cuts`` (default: every cut point) of a
    :class:`~lightning_sfl.models.zoo.SplittableModel`: cut name -> :class:`CutCost`.

    >>> from lightning_sfl.models import build_model
    >>> costs = cut_costs(build_model("cnn_small", 10, (1, 8, 8)))
    >>> list(costs) == list(build_model("cnn_small", 10, (1, 8, 8)).cut_points)
    True
    """
    from lightning_sfl.models import activation_shape, split_model
    from lightning_sfl.system.comm import module_bytes

    out = {}
    for name in model.cut_points if cuts is None else cuts:
        client, _ = split_model(model, name)
        forward = forward_flops_per_sample(client, model.input_shape)
        shape = activation_shape(model, name)
        value_bytes = next(model.parameters()).element_size()  # the activations' dtype (a client half may hold none)
        out[name] = CutCost(
            forward=forward,
            backward=training_flops_per_sample(client, model.input_shape) - forward,
            activation_bytes=math.prod(shape) * value_bytes,
            model_bytes=module_bytes(client),
        )
    return out
