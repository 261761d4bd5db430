"""GAS's per-label activation statistics (eqs. 11-12) against the one-activation-at-a-time recursion written here."""

from __future__ import annotations

import pytest
import torch

from lightning_sfl.errors import ConfigError
from lightning_sfl.models.label_gaussians import LabelGaussians, generation_counts


def recursion(x: torch.Tensor, w: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
    """Eqs. 11-12 as printed, one activation at a time, starting from S = 0."""
    s, mu, cov = 0.0, torch.zeros(x.shape[1], dtype=x.dtype), torch.zeros(x.shape[1], x.shape[1], dtype=x.dtype)
    for a, wi in zip(x, w):
        wi = float(wi)
        mu_new = (s * mu + wi * a) / (s + wi)
        d_old, d_new = mu_new - mu, mu_new - a
        cov = (s * (cov + torch.outer(d_old, d_old)) + wi * torch.outer(d_new, d_new)) / (s + wi)
        s, mu = s + wi, mu_new
    return s, mu, cov


def batches(seed=0, n=40, dim=6, labels=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g, dtype=torch.float64) * torch.linspace(0.5, 3, dim, dtype=torch.float64)
    y = torch.randint(0, labels, (n,), generator=g)
    w = torch.arange(1, n + 1, dtype=torch.float64)  # progress weights s(n) = n
    return x, y, w


@pytest.mark.parametrize("sizes", [[40], [1] * 40, [7, 13, 1, 19]])
def test_batched_merges_equal_the_recursion(sizes):
    x, y, w = batches()
    g = LabelGaussians(3, 6, covariance="full", dtype=torch.float64)
    start = 0
    for n in sizes:
        g.update(x[start : start + n], y[start : start + n], w[start : start + n])
        start += n
    for label in range(3):
        s, mu, cov = recursion(x[y == label], w[y == label])
        assert g.weight[label].item() == pytest.approx(s)
        torch.testing.assert_close(g.mean[label], mu, rtol=0, atol=1e-12)
        torch.testing.assert_close(g.second[label], cov, rtol=0, atol=1e-12)


def test_diag_is_the_diagonal_of_full_and_lowrank_is_exact_when_its_rank_suffices():
    x, y, w = batches(seed=1, n=24)
    full = LabelGaussians(3, 6, covariance="full", dtype=torch.float64)
    diag = LabelGaussians(3, 6, covariance="diag", dtype=torch.float64)
    low = LabelGaussians(3, 6, covariance="lowrank", rank=6, dtype=torch.float64)
    small = LabelGaussians(3, 6, covariance="lowrank", rank=2, dtype=torch.float64)
    for start in range(0, 24, 5):
        for g in (full, diag, low, small):
            g.update(x[start : start + 5], y[start : start + 5], w[start : start + 5])
    for label in range(3):
        torch.testing.assert_close(diag.second[label], full.second[label].diagonal(), rtol=0, atol=1e-12)
        u = low.factor[label]
        torch.testing.assert_close(u @ u.T, full.second[label], rtol=0, atol=1e-10)
        # rank 2, merged batch by batch: U·Uᵀ never exceeds Σ (Σ − U·Uᵀ is PSD), and the exact variances are kept
        u2 = small.factor[label]
        assert torch.linalg.eigvalsh(full.second[label] - u2 @ u2.T).min() > -1e-10
        torch.testing.assert_close(small.second[label], full.second[label].diagonal(), rtol=0, atol=1e-12)
    # all at once, rank 2 is the best rank-2 approximation of Σ (Eckart-Young)
    once = LabelGaussians(3, 6, covariance="lowrank", rank=2, dtype=torch.float64)
    once.update(x, y, w)
    for label in range(3):
        vals, vecs = torch.linalg.eigh(full.second[label])
        best = (vecs[:, -2:] * vals[-2:]) @ vecs[:, -2:].T
        torch.testing.assert_close(once.factor[label] @ once.factor[label].T, best, rtol=0, atol=1e-10)


@pytest.mark.parametrize("covariance", ["full", "diag", "lowrank"])
def test_samples_have_the_tracked_moments(covariance):
    g = LabelGaussians(2, 3, covariance=covariance, rank=3, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(500, 3, generator=gen, dtype=torch.float64) @ torch.tensor(
        [[2.0, 0, 0], [1.0, 1, 0], [0, 0.5, 0.3]], dtype=torch.float64
    ) + torch.tensor([1.0, -2, 3], dtype=torch.float64)
    g.update(x, torch.zeros(500, dtype=torch.long), torch.ones(500, dtype=torch.float64))
    assert not g.ready()  # label 1 has no statistics yet
    a, labels = g.sample(torch.tensor([20000, 0]), torch.Generator().manual_seed(1))
    assert a.shape == (20000, 3) and labels.eq(0).all()
    torch.testing.assert_close(a.mean(0), g.mean[0], rtol=0, atol=0.05)
    want = {"full": g.second[0], "diag": torch.diag(g.second[0])}.get(covariance)
    want = g.factor[0] @ g.factor[0].T if want is None else want
    torch.testing.assert_close(torch.cov(a.T, correction=0), want, rtol=0, atol=0.1)


def test_sampling_is_seeded_nonnegative_on_request_and_survives_singular_covariances():
    g = LabelGaussians(2, 4, covariance="full", nonnegative=True)
    g.update(torch.randn(3, 4), torch.tensor([0, 1, 1]), torch.ones(3))  # rank 0 and 1 of 4: singular
    assert g.ready()
    a1, y1 = g.sample(torch.tensor([5, 3]), torch.Generator().manual_seed(3))
    a2, y2 = g.sample(torch.tensor([5, 3]), torch.Generator().manual_seed(3))
    assert torch.equal(a1, a2) and y1.tolist() == [0] * 5 + [1] * 3
    assert a1.isfinite().all() and (a1 >= 0).all()
    torch.testing.assert_close(a1[:5], g.mean[0].clamp_min(0).expand(5, 4))  # one activation: Σ = 0


def test_generation_counts_follow_the_rule_by_hand():
    labels = torch.tensor([1, 1, 1, 1, 1, 2, 2, 0])
    assert generation_counts(labels, num_classes=4, batch_size=4).tolist() == [3, 0, 2, 4]


@pytest.mark.parametrize(
    "kwargs,match",
    [({"covariance": "dense"}, "covariance='dense' must be one of full, diag, lowrank"), ({"rank": 0}, "rank=0")],
)
def test_bad_settings_fail_at_construction(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        LabelGaussians(2, 3, **kwargs)
