"""Per-client gradient-norm clipping (Semi-SFL family's ``grad_clip``; SemiFL's authors clip at 1): each slot of either
client bank is clipped on its own, as ``torch.nn.utils.clip_grad_norm_`` on that client's model alone."""

from __future__ import annotations

import copy

import pytest
import torch
from _helpers import flat_params
from test_semi_sfl import _fit
from torch import nn

from lightning_sfl.errors import ConfigError
from lightning_sfl.runtime.client_bank import SequentialBank, clip_gradients_
from lightning_sfl.runtime.stacked_bank import StackedBank


def _template():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 6 * 6, 4))


def _reference_norms(template, x, sizes, max_norm):
    """Each client's model alone: forward its rows, backward, clip_grad_norm_; returns (norms, clipped grads)."""
    norms, grads = [], []
    for chunk in x.split(sizes.tolist()):
        model = copy.deepcopy(template)
        (model(chunk) ** 2).sum().backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)))
        grads.append([p.grad.clone() for p in model.parameters()])
    return norms, grads


@pytest.mark.parametrize("bank_class", [SequentialBank, StackedBank])
def test_each_slot_is_clipped_like_its_own_model(bank_class):
    template = _template()
    bank = bank_class(template, 3)
    bank.reset(template)
    x = (
        torch.randn(9, 1, 8, 8, generator=torch.Generator().manual_seed(1))
        * torch.tensor([1.0, 5.0, 0.1]).repeat_interleave(3)[:, None, None, None]
    )
    sizes = torch.tensor([3, 3, 3])
    (bank(x, sizes) ** 2).sum().backward()
    norms = bank.clip_grad_norms_(1.0)
    expected_norms, expected_grads = _reference_norms(template, x, sizes, 1.0)
    assert norms.tolist() == pytest.approx(expected_norms, rel=1e-5)
    assert min(expected_norms) < 1.0 < max(expected_norms)  # one slot left as is, the others scaled down
    for k in range(3):
        if bank_class is SequentialBank:
            got = [p.grad for p in bank.slots[k].parameters()]
        else:  # slot k lives in row bank.rows[k] of every stacked gradient
            got = [p.grad[bank.rows[k]] for p in bank.stacked_params]
        for g, e in zip(got, expected_grads[k]):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-7)


def test_clip_gradients_matches_torch():
    a = [torch.randn(4, 3), torch.randn(5)]
    b = [t.clone() for t in a]
    params = [nn.Parameter(torch.zeros_like(t)) for t in b]
    for p, t in zip(params, b):
        p.grad = t
    assert float(clip_gradients_(a, 0.5)) == pytest.approx(float(torch.nn.utils.clip_grad_norm_(params, 0.5)))
    for t, p in zip(a, params):
        torch.testing.assert_close(t, p.grad)


def test_a_loose_clip_changes_nothing_and_a_tight_one_bounds_every_step():
    free, _ = _fit(1, momentum=0.0)
    loose, _ = _fit(1, momentum=0.0, grad_clip=1e9)
    assert torch.equal(flat_params(free), flat_params(loose))
    start, _ = _fit(0, momentum=0.0)
    lr, clip = 0.05, 1e-3
    tight, _ = _fit(1, momentum=0.0, grad_clip=clip)
    steps = 3 + 2  # K_s supervised steps and K_u cross-entity steps each move the server's classifier by <= lr·clip
    moved = (flat_params(tight.server) - flat_params(start.server)).norm()
    assert 0 < float(moved) <= steps * lr * clip * (1 + 1e-4)
    assert float((flat_params(free.server) - flat_params(start.server)).norm()) > 10 * steps * lr * clip


def test_bad_clip_is_a_one_line_error():
    from lightning_sfl.algorithms import SemiSFL

    with pytest.raises(ConfigError, match=r"grad_clip=0.0 must be > 0 \(or null: no clipping\)"):
        SemiSFL(grad_clip=0.0)
