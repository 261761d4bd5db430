"""The compressors' pure core: encode and decode of a batch of rows ``[B, d]`` (a row: one sample's activation or
gradient, flattened), and the bytes each encoding sends. The stateful classes (:mod:`lightning_sfl.compression`) are
thin wrappers around these functions.

>>> a = torch.tensor([[0.1, -3.0, 2.0, 0.5]])
>>> values, indices = topk_encode(a, 2)
>>> topk_decode(values, indices, 4).tolist()
[[0.0, -3.0, 2.0, 0.0]]
>>> q, low, step = quantise_encode(torch.tensor([[0.0, 1.0, 3.0]]), bits=2)
>>> q.tolist(), quantise_decode(q, low, step).tolist()
([[0, 1, 3]], [[0.0, 1.0, 3.0]])
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "circular_bind",
    "circular_keys",
    "circular_unbind",
    "index_bytes",
    "qsgd_decode",
    "qsgd_encode",
    "qsgd_row_bytes",
    "quantise_decode",
    "quantise_encode",
    "quantised_row_bytes",
    "topk_decode",
    "topk_encode",
    "topk_row_bytes",
]


def topk_encode(rows: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` entries of largest magnitude of each row of ``rows`` ``[B, d]``: their values ``[B, k]`` and their
    indices ``[B, k]`` (ascending magnitude order is not kept: ``torch.topk``'s order)."""
    indices = rows.abs().topk(k, dim=1).indices
    return rows.gather(1, indices), indices


def topk_decode(values: torch.Tensor, indices: torch.Tensor, width: int) -> torch.Tensor:
    """Rows ``[B, width]`` with ``values`` ``[B, k]`` at ``indices`` and zeros elsewhere."""
    out = values.new_zeros(values.shape[0], width)
    return out.scatter(1, indices, values)


def index_bytes(width: int) -> int:
    """Bytes of one index into a row of ``width`` entries as sent: ``uint16`` up to 65,536 entries, else ``int32``.

    >>> index_bytes(65536), index_bytes(65537)
    (2, 4)
    """
    return 2 if width <= 2**16 else 4


def topk_row_bytes(width: int, k: int, value_bytes: int) -> int:
    """Bytes one row sends under top-``k``: ``k`` values at ``value_bytes`` and ``k`` indices (:func:`index_bytes`);
    with ``k = width`` the dense row (no index is sent).

    >>> topk_row_bytes(1024, 103, 4)  # 10 % of a float32 row of 1,024 entries
    618
    """
    return width * value_bytes if k == width else k * (value_bytes + index_bytes(width))


def rounded(scaled: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """``scaled`` rounded to nearest, or (``generator``) stochastically, ``⌊x⌋ + Bernoulli(x − ⌊x⌋)`` (unbiased)."""
    if generator is None:
        return scaled.round()
    floor = scaled.floor()
    draw = torch.rand(scaled.shape, generator=generator, dtype=scaled.dtype).to(scaled.device)
    return floor + (draw < scaled - floor).to(scaled.dtype)


def quantise_encode(
    rows: torch.Tensor, bits: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Uniform quantisation of each row of ``rows`` ``[B, d]`` to ``bits`` bits: with ``m`` the row's minimum and
    ``s = (max − m)/(2^b − 1)`` its step (``s = 1`` for a constant row), ``q = round((a − m)/s)`` ``[B, d]`` in
    ``[0, 2^b − 1]`` (``uint8``); ``generator``: stochastic rounding, ``⌊·⌋ + Bernoulli(frac)`` (unbiased). Returns
    ``(q, m [B, 1], s [B, 1])``."""
    levels = 2**bits - 1
    low = rows.amin(dim=1, keepdim=True)
    span = rows.amax(dim=1, keepdim=True) - low
    step = torch.where(span > 0, span / levels, torch.ones_like(span))
    q = rounded((rows - low) / step, generator)
    return q.clamp_(0, levels).to(torch.uint8), low, step


def quantise_decode(q: torch.Tensor, low: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """``m + s·q``: the rows ``[B, d]`` the receiver decodes, in the dtype of ``m``."""
    return low + step * q.to(low.dtype)


def quantised_row_bytes(width: int, bits: int, value_bytes: int) -> int:
    """Bytes one row sends quantised to ``bits`` bits: its ``width`` codes packed (``⌈width·bits/8⌉``) and its minimum
    and step at ``value_bytes`` each.

    >>> quantised_row_bytes(1024, 8, 4)  # a quarter of the float32 row, plus the two scales
    1032
    """
    return math.ceil(width * bits / 8) + 2 * value_bytes


def qsgd_encode(
    rows: torch.Tensor, levels: int, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """QSGD (Alistarh et al., NeurIPS 2017, §3.1) of each row ``v`` of ``rows`` ``[B, d]`` with ``s = levels``: its norm
    ``‖v‖₂`` ``[B, 1]``, the signs ``[B, d]`` and the levels ``l_i ∈ {0, …, s}`` ``[B, d]``, ``l_i = ⌊s|v_i|/‖v‖⌋`` plus
    one with probability the remainder (``generator``'s draws; ``None``: rounded to nearest, biased), so that
    ``E[l_i/s] = |v_i|/‖v‖`` (their eq. 2's ``ξ_i``)."""
    norm = rows.norm(dim=1, keepdim=True)
    level = rounded(rows.abs() / torch.where(norm > 0, norm, torch.ones_like(norm)) * levels, generator)
    return norm, torch.sign(rows), level.clamp_(0, levels)


def qsgd_decode(norm: torch.Tensor, signs: torch.Tensor, level: torch.Tensor, levels: int) -> torch.Tensor:
    """``Q_s(v_i) = ‖v‖·sign(v_i)·l_i/s`` (eq. 2): the rows ``[B, d]`` the receiver decodes."""
    return norm * signs * (level / levels)


def qsgd_row_bytes(width: int, levels: int, value_bytes: int) -> int:
    """Bytes one row sends under QSGD with ``levels`` levels, in the paper's plain (not Elias-coded) form: the norm at
    ``value_bytes`` and, for each of the ``width`` entries, a sign bit and its level in ``⌈log2(s + 1)⌉`` bits, packed.

    >>> qsgd_row_bytes(1000, 1, 4)  # s = 1: two bits an entry (ternary), plus the norm
    254
    """
    return value_bytes + math.ceil(width * (1 + math.ceil(math.log2(levels + 1))) / 8)


def circular_keys(group: int, width: int, generator: torch.Generator, unit: bool = False) -> torch.Tensor:
    """C3-SL's keys (Hsieh et al., MLSP 2022, §3.1): ``group`` random vectors ``k_r ~ N(0, I/d)`` ``[R, d]``, fixed for
    the run (holographic reduced representations, Plate 1995); ``unit``: each scaled to unit norm, as the authors'
    code does."""
    keys = torch.randn(group, width, generator=generator, dtype=torch.float64) / math.sqrt(width)
    return keys / keys.norm(dim=1, keepdim=True) if unit else keys


def circular_bind(groups: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``s = Σ_r k_r ⊛ a_r``: each group of ``R`` rows ``[G, R, d]`` bound to the keys ``[R, d]`` by circular
    convolution and summed, one vector ``[G, d]`` a group (through the FFT: ``⊛`` is a product of spectra)."""
    width = groups.shape[-1]
    spectra = torch.fft.rfft(groups, dim=-1) * torch.fft.rfft(keys, dim=-1)
    return torch.fft.irfft(spectra.sum(dim=1), n=width, dim=-1)


def circular_unbind(bound: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``â_r = k_r ⋆ s``: the rows ``[G, R, d]`` the receiver reads back of the bound vectors ``[G, d]`` by circular
    correlation with each key (the conjugate spectrum)."""
    width = bound.shape[-1]
    spectra = torch.fft.rfft(bound, dim=-1).unsqueeze(1) * torch.fft.rfft(keys, dim=-1).conj()
    return torch.fft.irfft(spectra, n=width, dim=-1)
