"""Aggregation of client (or server) copies: pure functions on state dicts.

>>> a = {"w": torch.tensor([0.0, 2.0])}
>>> b = {"w": torch.tensor([4.0, 6.0])}
>>> weighted_average([a, b], torch.tensor([1.0, 3.0]))["w"].tolist()
[3.0, 5.0]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def normalized_weights(weights: torch.Tensor) -> torch.Tensor:
    """``|D_k| / Σ_j |D_j|`` as float64 ``[S]``."""
    w = torch.as_tensor(weights, dtype=torch.float64)
    if (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"aggregation weights must be >= 0 with a positive sum, got {w.tolist()}")
    return w / w.sum()


def weighted_average(states: Sequence[dict[str, torch.Tensor]], weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """Eq. (10): ``w = Σ_k |D_k| w_k / Σ_k |D_k|`` for every floating-point entry.

    Integer entries (e.g. BatchNorm's ``num_batches_tracked``) are not averaged: the first state's value is
    kept. The sum is taken in float64 and cast back to each entry's dtype.
    """
    p = normalized_weights(weights)
    out: dict[str, torch.Tensor] = {}
    for name, first in states[0].items():
        if first.is_floating_point():
            acc = sum(p[k].item() * s[name].to(torch.float64) for k, s in enumerate(states))
            out[name] = acc.to(first.dtype)
        else:
            out[name] = first.clone()
    return out
