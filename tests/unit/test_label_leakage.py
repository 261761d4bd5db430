"""The label-leakage attacks' pure functions (:mod:`lightning_sfl.privacy.label_leakage`) against independent
computations: scikit-learn's ROC AUC, gradients taken by autograd through a known linear tail, cosines by hand."""

from __future__ import annotations

import pytest
import torch
from sklearn.metrics import roc_auc_score

from lightning_sfl.privacy.label_leakage import (
    cluster_labels,
    direction_scores,
    histogram_l1,
    known_tail_labels,
    mean_batch_auc,
    norm_scores,
    roc_auc,
)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_roc_auc_is_scikit_learns_with_ties(seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 6, (200,), generator=g).double()  # many ties
    positives = torch.rand(200, generator=g) < 0.2
    assert roc_auc(scores, positives) == pytest.approx(roc_auc_score(positives.numpy(), scores.numpy()), abs=1e-12)
    assert roc_auc(scores, torch.zeros(200, dtype=torch.bool)) != roc_auc(scores, torch.zeros(200, dtype=torch.bool))


def test_mean_batch_auc_averages_the_batches_with_both_classes():
    scores = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    positives = torch.tensor([True, False, False, False, True, True])  # batches of 2: AUC 1, (none), 0.5
    assert mean_batch_auc(scores, positives, 2) == pytest.approx((1.0 + 1.0) / 2)
    assert mean_batch_auc(scores, positives, 3) == pytest.approx((0.5 + 0.5) / 2)


def _linear_tail_gradients(seed: int, rows: int = 64, dim: int = 32, classes: int = 10):
    """``∂L/∂h`` of a linear tail's mean cross-entropy over ``rows`` rows (what a U-shaped client uploads)."""
    g = torch.Generator().manual_seed(seed)
    tail = torch.nn.Linear(dim, classes).double()
    with torch.no_grad():
        tail.weight.copy_(torch.randn(classes, dim, generator=g, dtype=torch.float64))
        tail.bias.copy_(torch.randn(classes, generator=g, dtype=torch.float64))
    h = torch.randn(rows, dim, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, classes, (rows,), generator=g)
    (grad,) = torch.autograd.grad(torch.nn.functional.cross_entropy(tail(h), y), h)
    return grad, y, tail.weight


@pytest.mark.parametrize("seed", [0, 1])
def test_a_known_linear_tail_gives_every_label(seed):
    grad, y, weight = _linear_tail_gradients(seed)
    assert torch.equal(known_tail_labels(grad, weight), y)
    # a server with another tail's weights recovers about a tenth
    other = torch.randn(weight.shape, generator=torch.Generator().manual_seed(99), dtype=torch.float64)
    assert (known_tail_labels(grad, other) == y).double().mean() < 0.5


def test_norm_and_direction_scores_by_hand():
    g = torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
    assert norm_scores(g).tolist() == [5.0, 0.0, 1.0]
    cos = direction_scores(g, torch.tensor([1.0, 0.0, 0.0]))
    assert cos.tolist() == pytest.approx([0.6, 0.0, -1.0])


def test_clusters_named_by_a_few_known_rows_recover_separable_labels():
    g = torch.Generator().manual_seed(0)
    directions = torch.nn.functional.normalize(torch.randn(4, 16, generator=g), dim=1)
    y = torch.randint(0, 4, (120,), generator=g)
    rows = directions[y] * torch.rand(120, 1, generator=g).add(0.5) + 0.05 * torch.randn(120, 16, generator=g)
    known = torch.tensor([int((y == c).nonzero()[0]) for c in range(4)])  # one known row a class
    assert torch.equal(cluster_labels(rows, known, y[known], 4), y)
    noise = torch.randn(120, 16, generator=g)  # no structure: about chance
    assert (cluster_labels(noise, known, y[known], 4) == y).double().mean() < 0.6


def test_histogram_l1():
    assert histogram_l1(torch.tensor([3, 1, 0]), torch.tensor([1, 1, 2])) == pytest.approx(
        abs(0.75 - 0.25) + 0 + abs(0 - 0.5)
    )
