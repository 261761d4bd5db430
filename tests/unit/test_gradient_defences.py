"""The label defences of U-shaped split learning (:mod:`lightning_sfl.defences.gradients`) against their definitions:
the noise's scale relative to each client's largest gradient, max-norm's expected norms and kept directions, their
seeding, and one-line errors."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lightning_sfl.algorithms import SCALA
from lightning_sfl.defences import GradientNoise, MaxNorm
from lightning_sfl.errors import ConfigError


def _step(sizes, round_idx=0, index=0):
    return SimpleNamespace(local_sizes=torch.tensor(sizes), round=round_idx, index=index)


def test_gradient_noise_has_the_expected_norm_of_scale_times_each_clients_largest_gradient():
    torch.manual_seed(0)
    g = torch.cat([torch.randn(50, 64) * 0.01, torch.randn(30, 64) * 1.0])  # two clients, norms ~0.08 and ~8
    defence = GradientNoise(scale=2.0)
    noises = []
    for index in range(200):
        noises.append(defence.gradient_upload(g, _step([50, 30], index=index)) - g)
    noise = torch.stack(noises)  # [draws, 80, 64]
    for block, rows in ((slice(0, 50), g[:50]), (slice(50, 80), g[50:])):
        expected = 2.0 * rows.norm(dim=1).max()
        measured = noise[:, block].norm(dim=2).pow(2).mean().sqrt()  # E‖n‖² = t²·max²
        assert float(measured) == pytest.approx(float(expected), rel=0.02)
    assert torch.equal(defence.gradient_upload(g, _step([50, 30], index=3)), g + noises[3])  # seeded by the step
    assert torch.equal(GradientNoise(scale=0.0).gradient_upload(g, _step([50, 30])), g)


def test_max_norm_raises_every_rows_expected_norm_to_the_batchs_largest_and_keeps_its_line():
    torch.manual_seed(0)
    g = torch.randn(20, 16) * torch.linspace(0.1, 3.0, 20)[:, None]
    defence = MaxNorm()
    draws = torch.stack([defence.gradient_upload(g, _step([20], index=i)) for i in range(4000)])  # [draws, 20, 16]
    largest = g.norm(dim=1).max()
    squared = draws.norm(dim=2).pow(2).mean(0)  # E‖g_i (1 + σ_i z)‖² = ‖g_i‖² (1 + σ_i²) = max²
    torch.testing.assert_close(squared, torch.full((20,), float(largest) ** 2), rtol=0.08, atol=0)
    cos = torch.nn.functional.cosine_similarity(draws[0], g, dim=1).abs()
    torch.testing.assert_close(cos, torch.ones(20), rtol=0, atol=1e-5)  # along the row, up to its sign
    top = int(g.norm(dim=1).argmax())
    assert torch.equal(draws[:, top], g[top].expand(len(draws), -1))  # the largest row: σ = 0


def test_gradient_defences_need_a_tail_and_a_sound_scale():
    with pytest.raises(ConfigError, match="defences: MaxNorm defends what U-shaped clients send up: give tail_point"):
        SCALA(defences=[MaxNorm()])
    with pytest.raises(ConfigError, match="GradientNoise: scale=-1 must be a number >= 0"):
        GradientNoise(scale=-1)
    assert SCALA(defences=[GradientNoise(scale=0.5)], tail_point="s4").u_shaped
