"""Quantising compressors: uniform ``b``-bit quantisation of each row (:class:`Quantise`) and QSGD's stochastic
levels of each row over its norm (:class:`QSGD`)."""

from __future__ import annotations

from typing import ClassVar

from typing_extensions import override

from lightning_sfl.compression.base import Compressor
from lightning_sfl.compression.functional import (
    qsgd_decode,
    qsgd_encode,
    qsgd_row_bytes,
    quantise_decode,
    quantise_encode,
    quantised_row_bytes,
)
from lightning_sfl.errors import ConfigError

__all__ = ["QSGD", "Quantise"]


class Quantise(Compressor):
    """Uniform quantisation of each row to ``bits`` bits with its own minimum and step (sent with it); the gradient
    back through the sender is the receiver's (straight-through).

    Args:
        bits: ``b`` in ``{2, 4, 8, 16}``, or ``32``: the dense row.
        stochastic: stochastic rounding (unbiased; drawn from the step's generator) instead of rounding to nearest.
        crossing, error_feedback: see :class:`~lightning_sfl.compression.base.Compressor`.

    >>> import torch
    >>> decoded, sent = Quantise(bits=8).compress(torch.tensor([[0.0, 0.5, 1.0, 2.0]]))
    >>> sent  # 4 one-byte codes and two float32 scales
    12
    """

    BITS: ClassVar[tuple[int, ...]] = (2, 4, 8, 16, 32)

    def __init__(
        self, bits: int = 8, stochastic: bool = False, crossing: str = "activations", error_feedback: bool = False
    ) -> None:
        super().__init__(crossing, error_feedback)
        if bits not in self.BITS:
            raise ConfigError(f"Quantise: bits={bits!r} must be one of: {', '.join(map(str, self.BITS))}")
        if stochastic and bits == 32:
            raise ConfigError("Quantise: stochastic=True changes nothing with bits=32 (the dense row is sent)")
        if error_feedback and bits == 32:
            raise ConfigError("Quantise: error_feedback=True changes nothing with bits=32 (the dense row is sent)")
        self.bits, self.stochastic = int(bits), bool(stochastic)

    @property
    @override
    def draws(self) -> bool:
        return self.stochastic

    @override
    def identity(self, width: int) -> bool:
        return self.bits == 32

    @override
    def compress(self, rows, generator=None, sizes=None):
        flat = rows.reshape(rows.shape[0], -1)
        width = flat.shape[1]
        if self.bits == 32:
            return rows, width * rows.element_size()
        q, low, step = quantise_encode(flat.detach(), self.bits, generator if self.stochastic else None)
        decoded = quantise_decode(q, low, step)
        through = decoded + (flat - flat.detach())  # straight-through
        return through.reshape(rows.shape), quantised_row_bytes(width, self.bits, rows.element_size())


class QSGD(Compressor):
    """QSGD (Alistarh et al., NeurIPS 2017, eq. 2): each row ``v`` is sent as its norm ``‖v‖₂`` and, per entry, its
    sign and a level ``l_i ∈ {0, …, s}`` drawn so that ``‖v‖·sign(v_i)·l_i/s`` is unbiased (variance at most
    ``min(d/s², √d/s)·‖v‖²``, their Lemma 3.1); the paper's plain encoding is counted (a sign bit and
    ``⌈log2(s+1)⌉`` bits a level, packed, plus the norm), not its Elias code. Meant for the ``model`` crossing (the
    clients' updates, the paper's setting); on a row crossing the gradient back is straight-through. At evaluation
    the levels are rounded to nearest.

    Args:
        levels: ``s >= 1``, the quantisation levels (``s = 1``: ternary ``{−‖v‖, 0, ‖v‖}``).
        crossing, error_feedback: see :class:`~lightning_sfl.compression.base.Compressor`.

    >>> import torch
    >>> decoded, sent = QSGD(levels=4, crossing="model").compress(torch.tensor([[3.0, -4.0]]), torch.Generator())
    >>> (decoded.abs() / 5 * 4).tolist() in ([[2.0, 3.0]], [[2.0, 4.0]], [[3.0, 3.0]], [[3.0, 4.0]])  # levels 2-3, 3-4
    True
    >>> sent  # the norm (4 B) and 2 entries × (1 sign bit + 3 level bits), packed into 1 B
    5
    """

    def __init__(self, levels: int = 4, crossing: str = "activations", error_feedback: bool = False) -> None:
        super().__init__(crossing, error_feedback)
        if not isinstance(levels, int) or isinstance(levels, bool) or not 1 <= levels <= 2**15:
            raise ConfigError(f"QSGD: levels={levels!r} must be an integer from 1 to 32768")
        self.levels = levels

    @property
    @override
    def draws(self) -> bool:
        return True

    @override
    def compress(self, rows, generator=None, sizes=None):
        flat = rows.reshape(rows.shape[0], -1)
        norm, signs, level = qsgd_encode(flat.detach(), self.levels, generator)
        decoded = qsgd_decode(norm, signs, level, self.levels)
        through = decoded + (flat - flat.detach())  # straight-through (unbiased)
        return through.reshape(rows.shape), qsgd_row_bytes(flat.shape[1], self.levels, rows.element_size())
