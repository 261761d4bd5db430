"""Batch-wise compression by circular convolution (C3-SL, :class:`CircularConvolution`)."""

from __future__ import annotations

import math

import torch
from typing_extensions import override

from lightning_sfl.compression.base import Compressor
from lightning_sfl.compression.functional import circular_bind, circular_keys, circular_unbind
from lightning_sfl.errors import ConfigError

__all__ = ["CircularConvolution"]


class CircularConvolution(Compressor):
    """C3-SL (Hsieh, Chuang, Huang, Wu and Wang, MLSP 2022, "C3-SL: circular convolution-based batch-wise compression
    for communication-efficient split learning", §3): each client binds every group of ``R`` rows of its batch to
    ``R`` fixed random keys by circular convolution and sends their sum, ``s = Σ_r k_r ⊛ a_r`` (one row's bytes for
    ``R`` rows); the server reads each row back by circular correlation, ``â_r = k_r ⋆ s``, and trains on it. The
    gradient travels the same way: the server's ``∂L/∂s = Σ_r k_r ⊛ ∂L/∂â_r`` is one vector a group, from which each
    client gets ``∂L/∂a_r = k_r ⋆ ∂L/∂s`` (autograd through the bind and the unbind computes exactly that), so the
    gradients down are counted at the same ``1/R`` and this compressor takes the activations' crossing only (or, U-
    shaped, the body outputs'). Groups are formed within a client's rows, its last group zero-padded; the keys are
    drawn once from ``key_seed`` (agreed when the run starts; not counted in the rounds' bytes).

    Where the authors' code (``WesleyHsieh0806/C3-SL``) differs, followed here as an option or noted: it scales each
    key to unit norm (``unit_keys=True``; the paper's keys have variance ``1/d``), computes the convolutions as padded
    ``conv1d`` (the same numbers as the FFT used here) and drops the rows beyond a multiple of ``R`` (here padded).
    At evaluation the rows of an evaluated batch are grouped as they come.

    Args:
        group: ``R >= 2``, the rows bound into one vector (the compression ratio).
        key_seed: the seed of the keys.
        unit_keys: keys of unit norm (the authors' code) instead of variance ``1/d`` (the paper).
        crossing: ``activations`` or (U-shaped) ``body_outputs``.

    >>> decoded, sent = CircularConvolution(group=2).compress(torch.randn(4, 256))
    >>> decoded.shape, sent.tolist()  # 4 rows of 256 float32 entries sent as 2 vectors
    (torch.Size([4, 256]), [2048])
    """

    def __init__(
        self, group: int = 4, key_seed: int = 0, unit_keys: bool = False, crossing: str = "activations"
    ) -> None:
        super().__init__(crossing)
        if crossing not in ("activations", "body_outputs"):
            raise ConfigError(
                f"CircularConvolution: crossing={crossing!r} must be activations or body_outputs (its gradients "
                "travel bound the same way)"
            )
        if not isinstance(group, int) or isinstance(group, bool) or group < 2:
            raise ConfigError(f"CircularConvolution: group={group!r} must be an integer >= 2")
        self.group, self.key_seed, self.unit_keys = group, int(key_seed), bool(unit_keys)
        self._keys: dict[tuple, torch.Tensor] = {}

    @property
    @override
    def carries_gradients(self) -> bool:
        """The gradients down travel bound like the activations up (counted at the same ratio)."""
        return True

    def keys(self, width: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """The ``[R, width]`` keys (the same for every client and step)."""
        key = (width, dtype, device)
        if key not in self._keys:
            generator = torch.Generator().manual_seed(self.key_seed)
            self._keys[key] = circular_keys(self.group, width, generator, self.unit_keys).to(dtype).to(device)
        return self._keys[key]

    @override
    def block_bytes(self, sizes: list[int], width: int, value_bytes: int) -> torch.Tensor:
        """``[S]``: bytes each client block of ``sizes`` rows sends: one row a group of ``R``."""
        return torch.tensor([math.ceil(n / self.group) * width * value_bytes for n in sizes], dtype=torch.long)

    @override
    def compress(self, rows, generator=None, sizes=None):
        flat = rows.reshape(rows.shape[0], -1)
        width = flat.shape[1]
        blocks = [len(flat)] if sizes is None else [int(n) for n in sizes]
        keys = self.keys(width, flat.dtype, flat.device)
        decoded = []
        for block in flat.split(blocks):
            groups = math.ceil(len(block) / self.group)
            padded = torch.cat([block, block.new_zeros(groups * self.group - len(block), width)])
            bound = circular_bind(padded.view(groups, self.group, width), keys)
            decoded.append(circular_unbind(bound, keys).reshape(-1, width)[: len(block)])
        out = torch.cat(decoded) if decoded else flat
        return out.reshape(rows.shape), self.block_bytes(blocks, width, rows.element_size())
