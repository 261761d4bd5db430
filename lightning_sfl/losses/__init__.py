"""Loss functions of the papers (pure functions).

>>> logits = torch.tensor([[1.0, 2.0, 0.0]])
>>> prior = torch.tensor([0.5, 0.25, 0.25])
>>> float(logit_adjusted_cross_entropy(logits, torch.tensor([0]), prior))  # = CE(logits + log prior)
0.93337...
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from lightning_sfl.loop import Step


def label_distribution(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Empirical label distribution of ``labels`` ``[B]`` as ``[num_classes]`` float (sums to one)."""
    return distribution_from_counts(torch.bincount(labels, minlength=num_classes))


def distribution_from_counts(counts: torch.Tensor) -> torch.Tensor:
    """Label counts ``[N]`` → distribution ``[N]`` (default float dtype, sums to one)."""
    counts = counts.to(torch.get_default_dtype())
    return counts / counts.sum()


def log_prior(prior: torch.Tensor, floor: float = 0.0) -> torch.Tensor:
    """``log P(y)`` with ``log 0 = -inf``: a class of zero probability gets zero softmax mass, exactly as in
    eqs. (14)-(15). Targets always have ``P(y) > 0`` (they come from the distribution), so the loss is finite.

    ``floor > 0`` gives the finite version of public code instead, ``log(P(y) + floor)`` for every class (the
    SCALA authors' GAS code adds ``1e-12``): a missing class keeps a tiny softmax mass and a non-zero gradient.

    >>> log_prior(torch.tensor([0.5, 0.0])).tolist()
    [-0.6931471824645996, -inf]
    >>> [round(v, 2) for v in log_prior(torch.tensor([0.5, 0.0]), floor=1e-12).tolist()]
    [-0.69, -27.63]
    """
    if floor < 0:
        raise ValueError(f"floor={floor} must be >= 0")
    if floor > 0:
        return (prior + floor).log()
    return prior.log()  # IEEE: log(0) = -inf exactly (one kernel; the loss's hot path calls this every step)


def logit_adjusted_cross_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    prior: torch.Tensor | None,
    reduction: str = "mean",
    floor: float = 0.0,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Eq. (14)/(15): ``-log softmax(s(x) + log P(y))_y``.

    Args:
        logits: ``[B, N]`` server outputs ``s(x)``.
        targets: ``[B]`` labels.
        prior: ``[N]`` (one distribution for all rows, eq. 14) or ``[B, N]`` (one per row, eq. 15), or
            ``None`` for plain cross-entropy.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        floor: ``0``: classes with ``P(y) = 0`` leave the softmax (``log 0 = −∞``); ``> 0``: ``log(P + floor)``
            (see :func:`log_prior`).
        label_smoothing: ``ε`` of label smoothing (Szegedy et al., 2016) on the adjusted logits: the target puts
            ``1 − ε`` on the label and ``ε / N`` on every class (``torch.nn.functional.cross_entropy``'s).
    """
    if prior is not None:
        logits = logits + log_prior(prior.to(logits.dtype), floor)
    if label_smoothing:
        return F.cross_entropy(logits, targets, reduction=reduction, label_smoothing=label_smoothing)
    return F.cross_entropy(logits, targets, reduction=reduction)


def sum_of_client_means(row_losses: torch.Tensor, slot: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """``Σ_k mean_{i ∈ k} ℓ_i``: the sum over clients of each client's mean loss over its own ``B_k`` rows.

    Its gradient w.r.t. the rows of client ``k`` is the gradient of client ``k``'s own mean loss, so one
    backward pass gives every client its ``G_k`` (eq. 8), as long as the server half treats rows independently
    (no BatchNorm in training mode: there the batch statistics also carry the other clients' losses into ``G_k``,
    which eq. 8 leaves out; exact ``G_k`` would need a backward pass per client). ``row_losses``, ``slot``:
    ``[B]``; ``sizes``: ``[S]``.
    """
    return (row_losses / sizes.to(row_losses.dtype).index_select(0, slot)).sum()


def row_label_distribution(label_distribution: torch.Tensor, step: Step) -> torch.Tensor:
    """``P_k(y)`` of each row's client, ``[B, N]``, from every client's ``label_distribution`` ``[K, N]`` (eq. 15's
    prior; ``step.owner`` ``[B]`` picks the row's client among ``step.clients``).

    >>> from types import SimpleNamespace
    >>> step = SimpleNamespace(clients=torch.tensor([2, 0]), owner=torch.tensor([1, 0, 0]))
    >>> row_label_distribution(torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]), step).tolist()
    [[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]
    """
    return label_distribution.index_select(0, step.clients).index_select(0, step.owner)
