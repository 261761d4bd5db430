"""The losses and the teacher of Semi-SFL (Sun, Xu et al., "Efficient Semi-Supervised Federated Learning for
Heterogeneous Participants"), as pure functions.

Equation numbers are the paper's. Shapes: ``B`` anchors, ``R`` reference samples (a batch
of keys and/or a memory queue), ``d`` projection dimension, ``N`` classes.

* :func:`contrastive_loss` — the one form behind eq. 3 (supervised contrastive loss on the labelled set) and eq. 5
  (clustering regularisation on unlabelled data): for anchor ``j`` with positives ``P(j)`` among the references
  ``A(j)``, ``−1/|P(j)| Σ_{p∈P(j)} log softmax_{a∈A(j)}(z_j·z_a/κ)_p``; an anchor without positives contributes 0.
* :func:`pseudo_label_loss` — eq. 1: the teacher's confident pseudo-labels on the weak view train the student on the
  strong view; masked rows count in the mean.
* :func:`ema_decay`, :func:`ema_update` — the teacher ``w̃ ← γ·w̃ + (1 − γ)·w`` with the warm-up
  ``γ_t = min(1 − 1/(t + 1), γ)``.

>>> z = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]]), dim=1)
>>> same = torch.tensor([[False, True, False], [True, False, False], [False, False, False]])
>>> contrastive_loss(z, z, same, ~torch.eye(3, dtype=torch.bool), 0.5)[2].item()  # no positive: 0
0.0
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = [
    "contrastive_loss",
    "ema_decay",
    "ema_update",
    "pseudo_label_loss",
    "pseudo_labels",
    "queue_positives",
    "same_label_positives",
]


def contrastive_loss(
    anchors: torch.Tensor, references: torch.Tensor, positive: torch.Tensor, valid: torch.Tensor, kappa: float
) -> torch.Tensor:
    """Per-anchor contrastive loss ``[B]`` (eqs. 3 and 5).

    Args:
        anchors: ``[B, d]`` L2-normalised projections ``z_j`` (gradients flow through them).
        references: ``[R, d]`` L2-normalised projections ``z_a`` (keys; detach them for eq. 5 and the MoCo form).
        positive: ``[B, R]`` bool, ``p ∈ P(j)``; must be a subset of ``valid``.
        valid: ``[B, R]`` bool, ``a ∈ A(j)``: the references in the denominator (e.g. not ``j`` itself, not an empty
            queue slot).
        kappa: temperature ``κ > 0``.
    """
    logits = anchors @ references.T / kappa  # [B, R]
    logits = logits.masked_fill(~valid, float("-inf"))
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    positive = positive & valid
    count = positive.sum(dim=1)
    total = torch.where(positive, log_prob, torch.zeros_like(log_prob)).sum(dim=1)
    return torch.where(count > 0, -total / count.clamp(min=1), torch.zeros_like(total))


def same_label_positives(labels: torch.Tensor, exclude_self: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``(positive, valid)`` ``[B, B]`` of eq. 3 over one batch with ``labels`` ``[B]``: ``A(j)`` = every sample but
    ``j`` (``exclude_self``), ``P(j)`` = those with ``y_p = y_j``."""
    n = len(labels)
    valid = ~torch.eye(n, dtype=torch.bool, device=labels.device) if exclude_self else labels.new_ones(n, n).bool()
    return (labels[:, None] == labels[None, :]) & valid, valid


def queue_positives(
    anchor_labels: torch.Tensor, queue_labels: torch.Tensor, queue_confident: torch.Tensor, queue_filled: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(positive, valid)`` ``[B, Q]`` of eq. 5: ``A(j)`` = the queue's filled slots, ``P̂(j)`` = the filled,
    confident slots whose pseudo-label equals the anchor's (anchors are not filtered by their own confidence)."""
    valid = queue_filled[None, :].expand(len(anchor_labels), -1)
    positive = valid & queue_confident[None, :] & (anchor_labels[:, None] == queue_labels[None, :])
    return positive, valid


def pseudo_label_loss(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, threshold: float, strict: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq. 1: ``mean_j 1(max q̃_j > τ)·CE(student_j, ŷ_j)`` with ``q̃ = softmax(teacher)``, ``ŷ = argmax q̃``.

    Returns ``(loss, pseudo_labels [B], mask [B] bool)``; ``strict=False`` uses ``≥ τ`` (the authors' code). The
    teacher's logits are detached.
    """
    labels, mask = pseudo_labels(teacher_logits, threshold, strict)
    rows = nn.functional.cross_entropy(student_logits, labels, reduction="none")
    return (rows * mask.to(rows.dtype)).mean(), labels, mask


def pseudo_labels(teacher_logits: torch.Tensor, threshold: float, strict: bool = True):
    """``(ŷ, mask)`` ``[B]`` each: the teacher's argmax and whether its softmax confidence exceeds ``τ`` (``≥`` if not
    ``strict``); the logits are detached."""
    confidence, labels = teacher_logits.detach().softmax(dim=1).max(dim=1)
    return labels, confidence > threshold if strict else confidence >= threshold


def ema_decay(step: int, gamma: float) -> float:
    """The teacher's decay after ``step`` teacher updates: ``γ_t = min(1 − 1/(t + 1), γ)`` (0 at the first update,
    so the teacher starts as a copy of the student)."""
    return min(1.0 - 1.0 / (step + 1), gamma)


@torch.no_grad()
def ema_update(teacher: nn.Module, student: nn.Module, decay: float) -> None:
    """``w̃ ← decay·w̃ + (1 − decay)·w`` for every parameter and floating-point buffer (BatchNorm statistics are
    averaged too); integer buffers (``num_batches_tracked``) are copied."""
    for t, s in zip(teacher.parameters(), student.parameters()):
        t.mul_(decay).add_(s.detach(), alpha=1.0 - decay)
    for t, s in zip(teacher.buffers(), student.buffers()):
        if t.is_floating_point():
            t.mul_(decay).add_(s, alpha=1.0 - decay)
        else:
            t.copy_(s)
