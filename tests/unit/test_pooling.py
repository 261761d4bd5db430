"""The zoo's max pooling (:mod:`lightning_sfl.models.pooling`) against ``F.max_pool2d``: bitwise the same outputs
and gradients through its channels-last path, and the plain path wherever that path does not apply."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import lightning_sfl.models.pooling as pooling
from lightning_sfl.models import build_model
from lightning_sfl.models.pooling import MaxPool2d, max_pool2d

CASES = [  # kernel, stride, padding, dilation, ceil_mode, input [B, C, H, W]
    (2, None, 0, 1, False, (4, 3, 8, 8)),
    (3, 2, 0, 1, False, (2, 5, 9, 9)),  # AlexNet's overlapping pool
    (3, 2, 1, 1, True, (3, 2, 7, 6)),
    ((2, 3), (1, 2), (1, 0), (2, 1), False, (2, 3, 9, 11)),
]


def _took_fast_path(y: torch.Tensor) -> bool:
    return y.grad_fn is not None and "ChannelsLast" in type(y.grad_fn).__name__


def _pool_both(x: torch.Tensor, kernel, stride, padding, dilation, ceil_mode):
    """Output and input gradient of ``max_pool2d`` and of ``F.max_pool2d`` for one random output gradient."""
    results = []
    g = None
    for fn in (max_pool2d, F.max_pool2d):
        xi = x.clone().requires_grad_(True)
        y = fn(xi, kernel, stride, padding, dilation, ceil_mode)
        g = torch.randn_like(y) if g is None else g
        (gx,) = torch.autograd.grad(y, xi, g)
        results.append((y, gx))
    return results


@pytest.fixture
def always_fast(monkeypatch):
    monkeypatch.setattr(pooling, "MIN_ELEMENTS", 0)


@pytest.mark.parametrize(("kernel", "stride", "padding", "dilation", "ceil_mode", "shape"), CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_same_values_and_gradients_as_f_max_pool2d(always_fast, kernel, stride, padding, dilation, ceil_mode, shape,
                                                   dtype):  # fmt: skip
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype)
    assert _took_fast_path(max_pool2d(x.requires_grad_(True), kernel, stride, padding, dilation, ceil_mode))
    (y, gx), (y_ref, gx_ref) = _pool_both(x.detach(), kernel, stride, padding, dilation, ceil_mode)
    assert y.is_contiguous() and gx.is_contiguous()
    assert torch.equal(y, y_ref)
    assert torch.equal(gx, gx_ref)


def test_ties_nan_and_infinities_pick_the_same_element(always_fast):
    """Which element of a window gets the gradient: the first maximum in row-major order, a NaN over any number."""
    torch.manual_seed(1)
    x = torch.randint(0, 2, (3, 4, 6, 6)).double()  # many ties
    x[0, 0, 0, 1] = float("nan")
    x[1, 2, 3, 3] = float("inf")
    x[2, 1, :2, :2] = float("-inf")
    (y, gx), (y_ref, gx_ref) = _pool_both(x, 2, None, 0, 1, False)
    assert torch.equal(y.nan_to_num(), y_ref.nan_to_num()) and torch.equal(y.isnan(), y_ref.isnan())
    assert torch.equal(gx, gx_ref)
    assert int((gx != 0).sum()) == y.numel()  # one element per window got its gradient


def test_second_derivative(always_fast):
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda a: max_pool2d(a, 2), (x,))


def test_plain_path_where_the_fast_one_does_not_apply():
    big = torch.randn(8, 64, 8, 8, requires_grad=True)  # MIN_ELEMENTS elements
    assert big.numel() >= pooling.MIN_ELEMENTS and _took_fast_path(max_pool2d(big, 2))
    small = torch.randn(2, 64, 8, 8, requires_grad=True)
    assert not _took_fast_path(max_pool2d(small, 2))
    channels_last = big.detach().contiguous(memory_format=torch.channels_last).requires_grad_(True)
    assert not _took_fast_path(max_pool2d(channels_last, 2))
    unbatched = torch.randn(64, 64, 64, requires_grad=True)
    assert not _took_fast_path(max_pool2d(unbatched, 2))
    assert torch.equal(max_pool2d(unbatched, 2), F.max_pool2d(unbatched, 2))


def test_inside_torch_func_transforms(always_fast):
    x = torch.randn(3, 2, 4, 6, 6)
    assert torch.equal(torch.vmap(lambda a: max_pool2d(a, 2))(x), torch.vmap(lambda a: F.max_pool2d(a, 2))(x))
    g = torch.func.grad(lambda a: max_pool2d(a, 2).sum())(x[0])
    g_ref = torch.func.grad(lambda a: F.max_pool2d(a, 2).sum())(x[0])
    assert torch.equal(g, g_ref)


def test_module_is_nn_max_pool2d_with_the_fast_forward(always_fast):
    pool = MaxPool2d(3, 2, padding=1, ceil_mode=True)
    assert isinstance(pool, nn.MaxPool2d) and pool.state_dict() == {}
    x = torch.randn(2, 3, 9, 9, requires_grad=True)
    y = pool(x)
    assert _took_fast_path(y) and torch.equal(y, nn.MaxPool2d(3, 2, padding=1, ceil_mode=True)(x))
    with_indices = MaxPool2d(2, return_indices=True)(x)  # indices: nn.MaxPool2d's own forward
    ref = F.max_pool2d(x, 2, return_indices=True)
    assert torch.equal(with_indices[0], ref[0]) and torch.equal(with_indices[1], ref[1])


@pytest.mark.parametrize("arch", ["cnn_small", "alexnet_cifar", "vgg11", "cnn_svhn"])
def test_zoo_models_pool_with_it_and_load_plain_state_dicts(arch):
    model = build_model(arch, 10, (3, 32, 32) if arch != "cnn_small" else (1, 8, 8))
    pools = [m for m in model.modules() if isinstance(m, nn.MaxPool2d)]
    assert pools and all(type(m) is MaxPool2d for m in pools)
    plain = build_model(arch, 10, (3, 32, 32) if arch != "cnn_small" else (1, 8, 8))
    for i, m in enumerate(plain):
        if isinstance(m, nn.MaxPool2d):
            plain[i] = nn.MaxPool2d(m.kernel_size, m.stride, m.padding, m.dilation, ceil_mode=m.ceil_mode)
    plain.load_state_dict(model.state_dict())
    x = torch.randn(16, *model.input_shape)
    assert torch.equal(model.eval()(x), plain.eval()(x))
