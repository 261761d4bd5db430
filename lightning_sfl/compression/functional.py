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
    "index_bytes",
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
    scaled = (rows - low) / step
    if generator is None:
        q = scaled.round()
    else:
        floor = scaled.floor()
        draw = torch.rand(scaled.shape, generator=generator, dtype=scaled.dtype).to(scaled.device)
        q = floor + (draw < scaled - floor).to(scaled.dtype)
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
