"""Compressors of what crosses the cut, as components a split method is given (``--model.compression``, a list, like
the defences: ``--model.compression+=TopK --model.compression.ratio 0.1``). Each compresses one crossing
(``crossing``): the clients' activations up (``activations``) or the server's gradients down (``gradients``); the
receiver trains on what it decodes, the clients backpropagate what they decode, and the ledger counts the encoded
bytes (:mod:`~lightning_sfl.system.comm`). Order: the defences first, then the compression (what leaves a client is
defended, then encoded).

=====================  =====================================================================================
compressor             what a row sends
=====================  =====================================================================================
:class:`TopK`          the ``k = ⌈r·d⌉`` entries of largest magnitude and their indices (``uint16`` up to
                       65,536 entries a row, else ``int32``); gradient through the mask
:class:`Quantise`      ``b``-bit codes of ``(a − m)/s`` packed, and the row's ``m`` and ``s`` (uniform
                       quantisation, optional stochastic rounding); straight-through gradient
=====================  =====================================================================================

The pure encode/decode functions are in :mod:`lightning_sfl.compression.functional`. Identity settings (``ratio=1``,
``bits=32``) send the dense rows and give runs bitwise equal to uncompressed ones.
"""

from __future__ import annotations

import copy
import inspect
import math
from typing import ClassVar

import torch
from torch import nn
from typing_extensions import override

from lightning_sfl.compression.functional import (
    quantise_decode,
    quantise_encode,
    quantised_row_bytes,
    topk_decode,
    topk_encode,
    topk_row_bytes,
)
from lightning_sfl.errors import ConfigError
from lightning_sfl.known import known_class, register_component_kind

__all__ = ["COMPRESSORS", "CROSSINGS", "Compression", "Compressor", "Quantise", "TopK", "resolve_compression"]

#: The crossings a compressor may take: the activations up, the gradients down.
CROSSINGS = ("activations", "gradients")


class Compressor(nn.Module):
    """A compressor of one crossing (see the module docstring): :meth:`compress` gives what the receiver decodes
    (``[B, ...]``, with the gradient the scheme defines) and the bytes one row sends.

    Args:
        crossing: ``activations`` (up) or ``gradients`` (down).
    """

    def __init__(self, crossing: str = "activations") -> None:
        super().__init__()
        if crossing not in CROSSINGS:
            raise ConfigError(f"{type(self).__name__}: crossing={crossing!r} must be one of: {', '.join(CROSSINGS)}")
        self.crossing = crossing

    def config(self) -> dict:
        """``{"class_path": ..., "init_args": {...}}``: this compressor as a config (what checkpoints record)."""
        names = [n for n in inspect.signature(type(self).__init__).parameters if n != "self"]
        cls = type(self)
        ours = cls.__module__.startswith("lightning_sfl.compression")
        module = "lightning_sfl.compression" if ours else cls.__module__
        return {"class_path": f"{module}.{cls.__qualname__}", "init_args": {n: getattr(self, n) for n in names}}

    def compress(self, rows: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, int]:
        """``(decoded [B, ...], bytes a row sends)`` for ``rows`` ``[B, ...]``; ``generator``: the step's draws."""
        raise NotImplementedError


class TopK(Compressor):
    """Top-k sparsification of each row: the ``k = ⌈ratio·d⌉`` entries of largest magnitude (values and indices) are
    sent, the others are zero at the receiver; the gradient back through the sender is the receiver's masked
    (``∂Â/∂A = mask``).

    Args:
        ratio: ``r`` in ``(0, 1]``, the share of a row's ``d`` entries sent (``1``: the dense row).
        crossing: see :class:`Compressor`.

    >>> decoded, sent = TopK(ratio=0.5).compress(torch.tensor([[1.0, -4.0, 0.5, 2.0]]))
    >>> decoded.tolist(), sent  # 2 float32 values and 2 uint16 indices
    ([[0.0, -4.0, 0.0, 2.0]], 12)
    """

    def __init__(self, ratio: float = 0.1, crossing: str = "activations") -> None:
        super().__init__(crossing)
        if not 0 < ratio <= 1:
            raise ConfigError(f"TopK: ratio={ratio} must be in (0, 1]")
        self.ratio = float(ratio)

    @override
    def compress(self, rows, generator=None):
        flat = rows.reshape(rows.shape[0], -1)
        width = flat.shape[1]
        k = min(width, math.ceil(self.ratio * width))
        if k == width:
            return rows, topk_row_bytes(width, k, rows.element_size())
        values, indices = topk_encode(flat.detach(), k)
        decoded = topk_decode(values, indices, width)
        mask = torch.zeros_like(flat).scatter_(1, indices, 1.0)
        through = decoded + (flat - flat.detach()) * mask  # the decoded rows, the gradient through the mask
        return through.reshape(rows.shape), topk_row_bytes(width, k, rows.element_size())


class Quantise(Compressor):
    """Uniform quantisation of each row to ``bits`` bits with its own minimum and step (sent with it); the gradient
    back through the sender is the receiver's (straight-through).

    Args:
        bits: ``b`` in ``{2, 4, 8, 16}``, or ``32``: the dense row.
        stochastic: stochastic rounding (unbiased; drawn from the step's generator) instead of rounding to nearest.
        crossing: see :class:`Compressor`.

    >>> decoded, sent = Quantise(bits=8).compress(torch.tensor([[0.0, 0.5, 1.0, 2.0]]))
    >>> sent  # 4 one-byte codes and two float32 scales
    12
    """

    BITS: ClassVar[tuple[int, ...]] = (2, 4, 8, 16, 32)

    def __init__(self, bits: int = 8, stochastic: bool = False, crossing: str = "activations") -> None:
        super().__init__(crossing)
        if bits not in self.BITS:
            raise ConfigError(f"Quantise: bits={bits!r} must be one of: {', '.join(map(str, self.BITS))}")
        if stochastic and bits == 32:
            raise ConfigError("Quantise: stochastic=True changes nothing with bits=32 (the dense row is sent)")
        self.bits, self.stochastic = int(bits), bool(stochastic)

    @override
    def compress(self, rows, generator=None):
        flat = rows.reshape(rows.shape[0], -1)
        width = flat.shape[1]
        if self.bits == 32:
            return rows, width * rows.element_size()
        q, low, step = quantise_encode(flat.detach(), self.bits, generator if self.stochastic else None)
        decoded = quantise_decode(q, low, step)
        through = decoded + (flat - flat.detach())  # straight-through
        return through.reshape(rows.shape), quantised_row_bytes(width, self.bits, rows.element_size())


#: Short name -> class of every compressor of the library.
#:
#: :meta hide-value:
COMPRESSORS: dict[str, type[Compressor]] = {cls.__name__: cls for cls in (TopK, Quantise)}
register_component_kind("compression", Compressor, COMPRESSORS)  # what a checkpoint may name


def resolve_compression(value) -> list[Compressor]:
    """The one place a ``compression`` setting becomes compressors: a list of :class:`Compressor` objects (copied) or
    configs ``{"class_path": ..., "init_args": {...}}`` (how checkpoints record them; never imported on a file's
    word)."""
    if not isinstance(value, list | tuple):
        raise ConfigError(f"compression={value!r} must be a list of compressors (e.g. --model.compression+=TopK)")
    out = []
    for item in value:
        if isinstance(item, Compressor):
            out.append(copy.deepcopy(item))
            continue
        cls = known_class(str(item["class_path"]), Compressor, names=COMPRESSORS) if isinstance(item, dict) else None
        if cls is None:
            raise ConfigError(f"compression: {item!r} is not a compressor; one of: {', '.join(COMPRESSORS)}")
        out.append(cls(**(item.get("init_args") or {})))
    return out


class Compression(nn.ModuleDict):
    """A method's compressors, one per crossing at most (``method.compression``); a crossing without one sends its
    rows dense."""

    def __init__(self, compressors: list[Compressor] = ()) -> None:
        super().__init__()
        for compressor in compressors:
            if compressor.crossing in self:
                raise ConfigError(f"compression: two compressors of the {compressor.crossing} crossing")
            self[compressor.crossing] = compressor

    def configs(self) -> list[dict]:
        """The compressors as configs (the hyperparameters)."""
        return [c.config() for c in self.values()]

    def compress(self, crossing: str, rows: torch.Tensor, seed: int = 0) -> tuple[torch.Tensor, int | None]:
        """``(what the receiver decodes, bytes a row sends)`` on ``crossing``; ``(rows, None)`` without a compressor
        there (the ledger then counts the dense rows). ``seed``: the step's, for a compressor that draws (stochastic
        rounding), each crossing its own stream."""
        if crossing not in self:
            return rows, None
        compressor = self[crossing]
        generator = None
        if getattr(compressor, "stochastic", False):
            generator = torch.Generator().manual_seed(seed * len(CROSSINGS) + CROSSINGS.index(crossing))
        return compressor.compress(rows, generator)
