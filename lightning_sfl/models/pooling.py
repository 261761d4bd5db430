"""Max pooling that is fast on a CPU: the same values and gradients as ``F.max_pool2d``, another kernel.

On a CPU, PyTorch's max pooling of a contiguous ``[B, C, H, W]`` (NCHW) batch is several times slower than the same
pooling of its channels-last copy, while its backward is fast in NCHW and slow in channels-last. So :func:`max_pool2d`
pools a channels-last copy with indices, returns the output in NCHW, and backpropagates with the NCHW backward kernel
and those indices. The indices are the same in both layouts (the flat position in the ``H x W`` plane, first maximum
of the window in row-major order, NaN wins), so output and gradient are bitwise the ones of ``F.max_pool2d`` (tested,
ties and NaN included).

Forward and backward, torch 2.14, one thread of an AVX-512 CPU (``F.max_pool2d`` against this, kernel 2):

==================  ==================
input               µs
==================  ==================
``[2, 64, 8, 8]``   46 against 73
``[8, 64, 8, 8]``   110 against 112
``[16, 64, 8, 8]``  343 against 165
``[64, 64, 8, 8]``  1673 against 436
==================  ==================

So it is used on a CPU for inputs of at least :data:`MIN_ELEMENTS` elements; smaller ones, other devices, and tensors
of ``torch.func`` transforms (``vmap``, ``grad``: the Function has no rule for them) go to ``F.max_pool2d``.
:class:`MaxPool2d` is ``nn.MaxPool2d`` with this forward; the model zoo builds it.

>>> x = torch.randn(16, 8, 8, 8, requires_grad=True)
>>> y = max_pool2d(x, 2)
>>> torch.equal(y, torch.nn.functional.max_pool2d(x, 2))
True
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.utils import _pair
from typing_extensions import override

__all__ = ["MIN_ELEMENTS", "MaxPool2d", "max_pool2d"]

#: Inputs with fewer elements than this are pooled by ``F.max_pool2d`` as they are.
MIN_ELEMENTS = 32768


class _ChannelsLastMaxPool(torch.autograd.Function):
    """Forward: channels-last kernel with indices, output in NCHW. Backward: NCHW kernel with those indices.
    (A ``forward(ctx, ...)`` Function: one with ``setup_context`` binds its arguments with ``inspect`` on every
    call, about 40 µs a call here.)"""

    @staticmethod
    @override
    def forward(ctx: Any, x: torch.Tensor, *args: Any) -> torch.Tensor:  # args: kernel, stride, padding, dilation, ceil
        y, idx = torch.ops.aten.max_pool2d_with_indices(x.contiguous(memory_format=torch.channels_last), *args)
        ctx.args = args
        ctx.save_for_backward(x, idx.contiguous())
        return y.contiguous()

    @staticmethod
    @override
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        x, idx = ctx.saved_tensors
        gx = torch.ops.aten.max_pool2d_with_indices_backward(grad.contiguous(), x, *ctx.args, idx)
        return (gx, *(None for _ in ctx.args))


#: Whether ``x`` is a tensor of a ``torch.func`` transform (``vmap``, ``grad``): the Function has no rule for them.
_transformed = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", lambda x: True)


def _fast(x: torch.Tensor) -> bool:
    return (
        not _transformed(x)  # first: a vmapped tensor cannot answer is_contiguous(channels_last)
        and x.device.type == "cpu"
        and x.dim() == 4
        and x.is_floating_point()
        and x.numel() >= MIN_ELEMENTS
        and x.is_contiguous()
        and not x.is_contiguous(memory_format=torch.channels_last)  # already channels-last: the fast kernel anyway
    )


def max_pool2d(
    x: torch.Tensor,
    kernel_size: int | tuple[int, int],
    stride: int | tuple[int, int] | None = None,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    ceil_mode: bool = False,
) -> torch.Tensor:
    """``F.max_pool2d(x, ...)`` (without ``return_indices``), through the channels-last kernel on a CPU.

    Args:
        x: ``[B, C, H, W]`` (any other input goes to ``F.max_pool2d`` unchanged).
        kernel_size, stride, padding, dilation, ceil_mode: as for ``F.max_pool2d`` (``stride`` defaults to the
            kernel size).

    Returns:
        ``[B, C, H_out, W_out]``, contiguous, equal to ``F.max_pool2d``'s output.
    """
    if not _fast(x):
        return F.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode)
    kernel = list(_pair(kernel_size))
    strides = kernel if stride is None or stride == [] else list(_pair(stride))
    return _ChannelsLastMaxPool.apply(x, kernel, strides, list(_pair(padding)), list(_pair(dilation)), ceil_mode)


class MaxPool2d(nn.MaxPool2d):
    """``nn.MaxPool2d`` whose forward is :func:`max_pool2d` (same arguments, same outputs, no state)."""

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.return_indices:
            return super().forward(x)
        return max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)
