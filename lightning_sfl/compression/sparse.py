"""Sparsifying compressors: top-k of each row (:class:`TopK`) and its randomised variant for split learning
(:class:`RandomTopK`)."""

from __future__ import annotations

import math

import torch
from typing_extensions import override

from lightning_sfl.compression.base import Compressor
from lightning_sfl.compression.functional import topk_decode, topk_encode, topk_row_bytes
from lightning_sfl.errors import ConfigError

__all__ = ["RANDOM_TOPK_SAMPLINGS", "RandomTopK", "TopK"]


def _kept(width: int, ratio: float) -> int:
    return min(width, math.ceil(ratio * width))


def _through_mask(flat: torch.Tensor, values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The decoded rows ``[B, d]`` (``values`` at ``indices``), with the gradient back through the mask."""
    decoded = topk_decode(values, indices, flat.shape[1])
    mask = torch.zeros_like(flat).scatter_(1, indices, 1.0)
    return decoded + (flat - flat.detach()) * mask


class TopK(Compressor):
    """Top-k sparsification of each row: the ``k = ⌈ratio·d⌉`` entries of largest magnitude (values and indices) are
    sent, the others are zero at the receiver; the gradient back through the sender is the receiver's masked
    (``∂Â/∂A = mask``).

    Args:
        ratio: ``r`` in ``(0, 1]``, the share of a row's ``d`` entries sent (``1``: the dense row).
        crossing, error_feedback: see :class:`~lightning_sfl.compression.base.Compressor`.

    >>> decoded, sent = TopK(ratio=0.5).compress(torch.tensor([[1.0, -4.0, 0.5, 2.0]]))
    >>> decoded.tolist(), sent  # 2 float32 values and 2 uint16 indices
    ([[0.0, -4.0, 0.0, 2.0]], 12)
    """

    def __init__(self, ratio: float = 0.1, crossing: str = "activations", error_feedback: bool = False) -> None:
        super().__init__(crossing, error_feedback)
        if not 0 < ratio <= 1:
            raise ConfigError(f"{type(self).__name__}: ratio={ratio} must be in (0, 1]")
        if error_feedback and ratio == 1:
            raise ConfigError(f"{type(self).__name__}: error_feedback=True changes nothing with ratio=1 (dense rows)")
        self.ratio = float(ratio)

    @override
    def identity(self, width: int) -> bool:
        return _kept(width, self.ratio) == width

    @override
    def compress(self, rows, generator=None, sizes=None):
        flat = rows.reshape(rows.shape[0], -1)
        width = flat.shape[1]
        k = _kept(width, self.ratio)
        if k == width:
            return rows, topk_row_bytes(width, k, rows.element_size())
        values, indices = topk_encode(flat.detach(), k)
        return _through_mask(flat, values, indices).reshape(rows.shape), topk_row_bytes(width, k, rows.element_size())


#: How :class:`RandomTopK` draws its ``k`` entries: ``groups`` (the paper's: each draw takes a top-k entry with
#: probability ``1 − α``) or ``weights`` (the authors' code: ``k`` draws without replacement from fixed weights).
RANDOM_TOPK_SAMPLINGS = ("groups", "weights")


class RandomTopK(TopK):
    """Randomised top-k sparsification (Zheng, Chen, Lyu and Yao, IJCAI 2023, "Reducing communication for split
    learning by randomized top-k sparsification", §4): in training each row sends ``k = ⌈ratio·d⌉`` entries drawn
    without replacement so that the top-k ones are preferred but every neuron is sometimes chosen — at each of the
    ``k`` draws an entry of the top-k still undrawn with probability ``(1 − α)/N₁`` each and one of the others with
    ``α/N₂`` each (``N₁``, ``N₂``: the undrawn entries of each group), so that a draw takes the top-k group with
    probability ``1 − α`` (``α = 0``: top-k; ``α = 1``: a uniform choice). Kept values are not rescaled; the gradient
    goes back through the mask; the bytes are top-k's (values and indices). At evaluation it is plain top-k, as in
    the paper. ``sampling="weights"`` is the authors' code instead (``split_learn/modifiers.py``): ``k`` draws of
    ``torch.multinomial`` from the fixed weights ``(1 − α)/k`` and ``α/(d − k)``, renormalised after each draw, so
    that the top group's share falls as it empties (more non-top entries than ``α·k`` on average).

    Args:
        ratio: ``r`` in ``(0, 1)``, the share of a row's entries sent.
        alpha: ``α`` in ``(0, 1]``, the probability a draw takes an entry outside the top-k (the paper uses 0.05-0.1).
        sampling: one of :data:`RANDOM_TOPK_SAMPLINGS`.
        crossing, error_feedback: see :class:`~lightning_sfl.compression.base.Compressor`.

    >>> rows = torch.tensor([[5.0, 4.0, 0.1, 0.2, 0.3, 0.4]])
    >>> decoded, sent = RandomTopK(ratio=1 / 3, alpha=0.5).compress(rows, torch.Generator().manual_seed(0))
    >>> int((decoded != 0).sum()), sent  # 2 of the 6 entries (values and uint16 indices)
    (2, 12)
    """

    def __init__(
        self,
        ratio: float = 0.1,
        alpha: float = 0.1,
        sampling: str = "groups",
        crossing: str = "activations",
        error_feedback: bool = False,
    ) -> None:
        super().__init__(ratio, crossing, error_feedback)
        if ratio == 1:
            raise ConfigError("RandomTopK: ratio=1 sends every entry: nothing is drawn (use TopK for dense rows)")
        if not 0 < alpha <= 1:
            raise ConfigError(f"RandomTopK: alpha={alpha} must be in (0, 1] (alpha=0 is TopK)")
        if sampling not in RANDOM_TOPK_SAMPLINGS:
            raise ConfigError(f"RandomTopK: sampling={sampling!r} must be one of: {', '.join(RANDOM_TOPK_SAMPLINGS)}")
        self.alpha, self.sampling = float(alpha), sampling

    @property
    @override
    def draws(self) -> bool:
        return True

    @override
    def compress(self, rows, generator=None, sizes=None):
        if generator is None:  # evaluation: plain top-k
            return super().compress(rows)
        flat = rows.reshape(rows.shape[0], -1)
        width = flat.shape[1]
        k = _kept(width, self.ratio)
        if k == width:
            return rows, topk_row_bytes(width, k, rows.element_size())
        indices = random_topk_indices(flat.detach(), k, self.alpha, self.sampling, generator)
        values = flat.detach().gather(1, indices)
        return _through_mask(flat, values, indices).reshape(rows.shape), topk_row_bytes(width, k, rows.element_size())


def random_topk_indices(
    rows: torch.Tensor, k: int, alpha: float, sampling: str, generator: torch.Generator
) -> torch.Tensor:
    """The ``[B, k]`` indices :class:`RandomTopK` sends of each row of ``rows`` ``[B, d]`` (``0 < k < d``)."""
    batch, width = rows.shape
    top = torch.zeros(batch, width, dtype=torch.bool, device=rows.device)
    top.scatter_(1, rows.abs().topk(k, dim=1).indices, True)
    if sampling == "weights":
        weights = torch.where(top, (1 - alpha) / k, alpha / (width - k)).to(torch.float64).cpu()
        return torch.multinomial(weights, k, generator=generator).to(rows.device)
    # groups: the number of draws that take a non-top entry is Binomial(k, α) (capped by the d − k there are; once
    # a group is empty every draw takes the other), and within a group the drawn entries are uniform
    others = (torch.rand(batch, k, generator=generator, dtype=torch.float64) < alpha).sum(dim=1, keepdim=True)
    others = others.clamp(max=width - k).to(rows.device)
    keys = torch.rand(batch, width, generator=generator, dtype=torch.float64).to(rows.device) + (~top) * 2.0
    order = keys.argsort(dim=1)  # the top group first, each group in a random order
    position = torch.arange(width, device=rows.device).expand(batch, width)
    chosen = (position < k - others) | ((position >= k) & (position < k + others))
    return order.masked_select(chosen).view(batch, k)
