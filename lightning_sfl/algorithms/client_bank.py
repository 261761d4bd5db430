"""Client slots: the ``S`` per-client copies of a model half used during one round.

``SequentialBank`` keeps one module copy per slot and runs them one after another; it is the reference
implementation that faster banks (stacked parameters + ``vmap``) must agree with.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from lightning_sfl.algorithms.aggregate import weighted_average
from lightning_sfl.errors import ConfigError


class SequentialBank(nn.Module):
    """``S`` copies of ``template``; slot ``k`` holds client ``C^i[k]``'s weights ``w_{c,k}`` during a round."""

    def __init__(self, template: nn.Module, num_slots: int) -> None:
        super().__init__()
        if num_slots < 1:
            raise ConfigError(f"num_slots={num_slots} must be >= 1")
        self.slots = nn.ModuleList(copy.deepcopy(template) for _ in range(num_slots))

    def __len__(self) -> int:
        return len(self.slots)

    @torch.no_grad()
    def reset(self, source: nn.Module) -> None:
        """Broadcast: every slot takes ``source``'s weights and buffers."""
        state = source.state_dict()
        for slot in self.slots:
            slot.load_state_dict(state)

    def forward(self, x: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        """Run slot ``k`` on its ``B_k`` rows. ``x``: ``[B, ...]`` ordered by slot; ``sizes``: ``[S]``."""
        chunks = x.split(sizes.tolist())
        return torch.cat([slot(chunk) for slot, chunk in zip(self.slots, chunks)])

    def forward_features(self, x: torch.Tensor, sizes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Like :meth:`forward` for ``nn.Sequential`` slots, also returning the input of the last layer
        (the features ``z`` before the classifier): ``([B, D], [B, N])``."""
        chunks = x.split(sizes.tolist())
        feats = [slot[:-1](chunk) for slot, chunk in zip(self.slots, chunks)]
        return torch.cat(feats), torch.cat([slot[-1](f) for slot, f in zip(self.slots, feats)])

    @torch.no_grad()
    def aggregate_into(self, target: nn.Module, weights: torch.Tensor) -> None:
        """FL phase, eq. (10): ``target ← Σ_k w_k · slot_k / Σ_k w_k``."""
        target.load_state_dict(weighted_average([s.state_dict() for s in self.slots], weights))
