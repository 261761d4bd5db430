"""FedNova's normalised averaging against hand-derived values and the identity with FedAvg for equal step counts."""

from __future__ import annotations

import pytest
import torch

from lightning_sfl.algorithms.fednova import fednova_average, momentum_norm


def test_equal_step_counts_give_fedavgs_weighted_average():
    x = torch.randn(5, dtype=torch.float64)
    ys = torch.randn(3, 5, dtype=torch.float64)
    w = torch.tensor([10.0, 30.0, 60.0])
    for rho in (0.0, 0.9):
        got = fednova_average(x, ys, torch.tensor([4, 4, 4]), w, rho)
        torch.testing.assert_close(got, (w[:, None].double() * ys).sum(0) / w.sum(), rtol=0, atol=1e-12)


def test_unequal_step_counts_by_hand():
    # x = 2, y_1 = 0 after 1 step, y_2 = 1 after 3 steps, p = (1/4, 3/4):
    # d = (2/1, 1/3), τ_eff = 1/4 + 9/4 = 2.5, x' = 2 − 2.5·(1/4·2 + 3/4·1/3) = 2 − 2.5·0.75 = 0.125
    got = fednova_average(torch.tensor([2.0]), torch.tensor([[0.0], [1.0]]), torch.tensor([1, 3]), torch.tensor([1, 3]))
    assert got.item() == pytest.approx(0.125)


def test_momentum_norm_is_the_sum_of_the_momentum_coefficients():
    """``‖a‖₁ = Σ_{t=0}^{τ−1} (1 − ρ^{t+1})/(1 − ρ)``: step t applies the gradient of step s with weight ρ^{t−s}."""
    for tau in (1, 2, 5):
        for rho in (0.0, 0.5, 0.9):
            want = sum(sum(rho**j for j in range(t + 1)) for t in range(tau))
            assert momentum_norm(torch.tensor([tau]), rho).item() == pytest.approx(want, rel=1e-12)
