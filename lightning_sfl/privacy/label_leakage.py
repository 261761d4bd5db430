"""What the per-row gradients a U-shaped server receives reveal of the labels (:mod:`~lightning_sfl.runtime.u_shape`:
each client uploads ``g_i = ∂L_k/∂h_i``, ``[B, *h]``): pure functions, scored against the true labels.

* :func:`norm_scores` and :func:`direction_scores`, Li et al., "Label Leakage and Protection in Two-party Split
  Learning" (ICLR 2022, §3): on an imbalanced binary task the rows of the rare class have the larger gradient norms,
  and rows of one class point the same way; each score is an attack, read as the AUC of separating the positive class
  (:func:`roc_auc`; per batch and averaged, as the authors' code does: :func:`mean_batch_auc`).
* :func:`cluster_labels`, our extension to ``N`` classes of the direction attack: k-means on the rows' directions,
  each cluster named by the few rows whose labels the attacker knows.
* :func:`known_tail_labels`: a server that knows a linear tail ``logits = W·h + b`` (it averages the tails) solves
  ``Wᵀ·u_i = g_i`` for ``u_i ∝ p_i − e_{y_i}``, whose one negative entry is at the label: exact when ``N <= D`` and
  ``W`` has full rank.
* :func:`histogram_l1`: the L1 distance between a recovered and the true label histogram (both normalised).

>>> g = torch.tensor([[3.0, 4.0], [0.0, 2.0], [0.0, 1.0]])
>>> norm_scores(g).tolist()
[5.0, 2.0, 1.0]
>>> roc_auc(norm_scores(g), torch.tensor([True, False, False]))
1.0
"""

from __future__ import annotations

import torch

__all__ = [
    "cluster_labels",
    "direction_scores",
    "histogram_l1",
    "known_tail_labels",
    "mean_batch_auc",
    "norm_scores",
    "roc_auc",
]


def norm_scores(gradients: torch.Tensor) -> torch.Tensor:
    """``‖g_i‖₂`` of each row of ``gradients`` ``[B, *h]`` (flattened), ``[B]`` float64: Li et al.'s norm attack."""
    return gradients.detach().reshape(len(gradients), -1).double().norm(dim=1)


def direction_scores(gradients: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``cos(g_i, g_ref)`` of each row of ``gradients`` ``[B, *h]`` with ``reference`` ``[*h]`` (a row whose label the
    attacker knows, here a positive one), ``[B]`` float64 in ``[-1, 1]`` (a zero row scores 0): Li et al.'s direction
    attack."""
    rows = gradients.detach().reshape(len(gradients), -1).double()
    ref = reference.detach().reshape(-1).double()
    norms = rows.norm(dim=1) * ref.norm()
    cosines = rows @ ref / norms.clamp_min(torch.finfo(torch.float64).tiny)
    return torch.where(norms > 0, cosines, torch.zeros_like(norms))


def roc_auc(scores: torch.Tensor, positives: torch.Tensor) -> float:
    """The area under the ROC curve of ``scores`` ``[n]`` (higher: more likely positive) against ``positives`` ``[n]``
    bool: the probability that a positive row outscores a negative one, ties counting half (Mann-Whitney's U over
    ``n₊·n₋``); ``nan`` without both classes.

    >>> roc_auc(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([False, False, True, True]))
    0.75
    """
    scores, positives = scores.detach().double().reshape(-1), positives.reshape(-1).bool()
    n_pos, n_neg = int(positives.sum()), int((~positives).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = torch.argsort(scores)
    _, group, counts = torch.unique_consecutive(scores[order], return_inverse=True, return_counts=True)
    mean_rank = counts.cumsum(0).double() - (counts.double() - 1) / 2  # ranks 1..n, ties at their mean
    ranks = torch.empty_like(scores)
    ranks[order] = mean_rank[group]
    u = float(ranks[positives].sum()) - n_pos * (n_pos + 1) / 2
    return u / (n_pos * n_neg)


def mean_batch_auc(scores: torch.Tensor, positives: torch.Tensor, batch_size: int) -> float:
    """:func:`roc_auc` of each batch of ``batch_size`` consecutive rows, averaged over the batches that hold both
    classes (the authors' protocol: the server scores the gradients of one batch at a time); ``nan`` if none does."""
    aucs = [roc_auc(s, p) for s, p in zip(scores.split(batch_size), positives.split(batch_size))]
    aucs = [a for a in aucs if a == a]
    return sum(aucs) / len(aucs) if aucs else float("nan")


def known_tail_labels(gradients: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The labels of rows whose gradient ``g_i`` ``[B, D]`` w.r.t. the input of a known linear tail with weight
    ``W`` ``[N, D]`` (``logits = W·h + b``, softmax cross-entropy, each row's loss scaled by a positive ``1/B_k``)
    was sent: ``g_i = Wᵀ·u_i`` with ``u_i = (p_i − e_{y_i})/B_k``, whose only negative entry is ``y_i``; ``u_i`` by
    least squares, the label its smallest entry. ``[B]`` int64.

    >>> w = torch.eye(3)
    >>> known_tail_labels(torch.tensor([[0.2, -0.5, 0.3], [-0.9, 0.4, 0.5]]), w).tolist()
    [1, 0]
    """
    g = gradients.detach().reshape(len(gradients), -1).double()
    w = weight.detach().double()
    u = torch.linalg.lstsq(w.T, g.T).solution.T  # [B, N]: Wᵀ u_i = g_i
    return u.argmin(dim=1)


def cluster_labels(
    gradients: torch.Tensor,
    known: torch.Tensor,
    known_labels: torch.Tensor,
    num_classes: int,
    iterations: int = 50,
    seed: int = 0,
) -> torch.Tensor:
    """Our extension of the direction attack to ``N = num_classes`` labels: spherical k-means (cosine) of the rows of
    ``gradients`` ``[B, *h]`` into ``N`` clusters, started from the known rows (``known`` ``[m]`` row indices with
    labels ``known_labels`` ``[m]``; the mean direction of each known class, other centres drawn with ``seed``); each
    cluster takes the label most of its known rows have (a cluster with none: the label of its centre's start, or
    ``-1``). Returns ``[B]`` int64 labels.

    >>> g = torch.tensor([[1.0, 0.1], [0.9, -0.1], [-0.1, 1.0], [0.1, 0.8]])
    >>> cluster_labels(g, torch.tensor([0, 2]), torch.tensor([1, 0]), 2).tolist()
    [1, 1, 0, 0]
    """
    x = gradients.detach().reshape(len(gradients), -1).double()
    x = x / x.norm(dim=1, keepdim=True).clamp_min(1e-300)
    known, known_labels = known.reshape(-1).long(), known_labels.reshape(-1).long()
    centres = torch.zeros(num_classes, x.shape[1], dtype=torch.float64)
    named = torch.full((num_classes,), -1, dtype=torch.long)
    for c in known_labels.unique().tolist():
        centres[c] = x[known[known_labels == c]].mean(0)
        named[c] = c
    free = (named < 0).nonzero().flatten()
    if len(free):
        g = torch.Generator().manual_seed(seed)
        centres[free] = x[torch.randperm(len(x), generator=g)[: len(free)]]
    centres = centres / centres.norm(dim=1, keepdim=True).clamp_min(1e-300)
    assign = (x @ centres.T).argmax(1)
    for _ in range(iterations):
        sums = torch.zeros_like(centres).index_add_(0, assign, x)
        moved = torch.where(sums.norm(dim=1, keepdim=True) > 0, sums, centres)
        centres = moved / moved.norm(dim=1, keepdim=True).clamp_min(1e-300)
        new = (x @ centres.T).argmax(1)
        if torch.equal(new, assign):
            break
        assign = new
    names = named.clone()
    for cluster in range(num_classes):  # the majority label of the known rows the cluster holds
        mine = known_labels[assign[known] == cluster]
        if len(mine):
            names[cluster] = torch.bincount(mine, minlength=num_classes).argmax()
    return names[assign]


def histogram_l1(recovered: torch.Tensor, true: torch.Tensor) -> float:
    """``Σ_y |r_y − t_y|`` of two label histograms ``[N]`` (counts), each normalised to sum to one: 0 for the same
    distribution, 2 for disjoint supports.

    >>> histogram_l1(torch.tensor([2, 2, 0]), torch.tensor([1, 1, 0]))
    0.0
    >>> histogram_l1(torch.tensor([1, 0]), torch.tensor([0, 3]))
    2.0
    """
    r, t = recovered.double(), true.double()
    return float((r / r.sum() - t / t.sum()).abs().sum())
