"""Aggregation of client (or server) copies: pure functions on state dicts, and models as flat parameter vectors (what
the FL server optimisers, FedDyn, SCAFFOLD, FedNova and FedBuff compute with).

>>> a = {"w": torch.tensor([0.0, 2.0])}
>>> b = {"w": torch.tensor([4.0, 6.0])}
>>> weighted_average([a, b], torch.tensor([1.0, 3.0]))["w"].tolist()
[3.0, 5.0]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from lightning_sfl.errors import ConfigError

#: How a server averages the round's clients: ``uniform`` (``1/|S|``) or ``size`` (``|D_k|``-weighted, FedAvg's).
AVERAGES = ("uniform", "size")


def check_average(average: str) -> str:
    """``average`` if it is one of :data:`AVERAGES`; else a one-line :class:`~lightning_sfl.errors.ConfigError`."""
    if average not in AVERAGES:
        raise ConfigError(f"average={average!r} is not one of: {', '.join(AVERAGES)}")
    return average


def averaging_weights(average: str, sizes: torch.Tensor) -> torch.Tensor:
    """The round's clients' weights ``[S]``: their ``sizes`` (``|D_k|``) for ``size``, ones for ``uniform``.

    >>> averaging_weights("uniform", torch.tensor([3.0, 5.0])).tolist()
    [1.0, 1.0]
    """
    return torch.ones(len(sizes)) if average == "uniform" else sizes


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


def flat_parameters(module: nn.Module) -> torch.Tensor:
    """All parameters of ``module`` as one vector ``[P]`` (order of ``module.parameters()``), differentiable.

    >>> flat_parameters(nn.Linear(2, 1)).shape
    torch.Size([3])
    """
    return torch.cat([p.reshape(-1) for p in module.parameters()])


def slot_flat_parameters(bank, slots: list[int]) -> torch.Tensor:
    """The flattened parameters of a client bank's ``slots``, detached, ``[len(slots), P]``."""
    return torch.stack([flat_parameters(bank.slots[k]).detach() for k in slots])


@torch.no_grad()
def load_flat_parameters(module: nn.Module, vector: torch.Tensor) -> None:
    """Write ``vector`` ``[P]`` (order of ``module.parameters()``) into the parameters of ``module``."""
    offset = 0
    for p in module.parameters():
        p.copy_(vector[offset : offset + p.numel()].view_as(p))
        offset += p.numel()


def parameter_zeros(module: nn.Module, *lead: int) -> torch.Tensor:
    """Zeros ``[*lead, P]`` in the dtype and device of ``module``'s parameters."""
    flat = flat_parameters(module).detach()
    return flat.new_zeros(*lead, flat.numel())
