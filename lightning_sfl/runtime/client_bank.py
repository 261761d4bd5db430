"""Client slots: the per-client copies of a model half held during training.

:class:`ClientBank` is the protocol every bank follows; :class:`SequentialBank` keeps one module copy per slot
and runs them one after another (the reference); :class:`~lightning_sfl.runtime.stacked_bank.StackedBank`
stacks the parameters on a client dimension and runs the slots in one batched call. Both must agree to float
tolerance (tested for every method).

A synchronous round resets every slot from the global half, trains, and aggregates every slot. An asynchronous
client takes a slot when it starts and leaves it when it uploads, so the protocol works on any subset of slots
(``slots=[j, ...]``; ``None``: all), resets a slot's optimiser state alone, and aggregates stored snapshots as
well as live slots. Banks whose slots outlive a round (``checkpointed = True``, set by the method from its
schedule) are saved in checkpoints; the others are rebuilt every round and left out.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence

import torch
from torch import nn
from typing_extensions import override

from lightning_sfl.errors import ConfigError
from lightning_sfl.runtime.aggregate import weighted_average

__all__ = ["ClientBank", "SequentialBank", "Slots"]

#: Which slots an operation applies to: ``None`` (all), or slot indices (a list or an int64 tensor).
Slots = Sequence[int] | torch.Tensor | None


def slot_list(slots: Slots, num_slots: int) -> list[int]:
    """``slots`` as a list of slot indices (all ``num_slots`` for ``None``), checked to be in range."""
    if slots is None:
        return list(range(num_slots))
    out = [int(j) for j in (slots.tolist() if isinstance(slots, torch.Tensor) else slots)]
    if any(not 0 <= j < num_slots for j in out):
        raise IndexError(f"slots {out} out of range for a bank of {num_slots}")
    return out


@torch.no_grad()
def clip_gradients_(grads: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale ``grads`` in place by ``min(1, max_norm / (‖g‖ + 1e-6))``, ``‖g‖`` their joint 2-norm (as
    ``torch.nn.utils.clip_grad_norm_``); returns ``‖g‖``.

    >>> g = [torch.tensor([3.0]), torch.tensor([4.0])]
    >>> float(clip_gradients_(g, 1.0)), [round(float(t), 4) for t in g]
    (5.0, [0.6, 0.8])
    """
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))
    scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.to(g.dtype))
    return norm


class ClientBank(nn.Module):
    """Protocol of the client slots (``len(bank)`` slots; ``bank.slots[k]`` a view or module of slot ``k`` with
    ``parameters()``, ``state_dict()``, ``load_state_dict()`` and ``__call__``).

    Implementations provide ``slots``, :meth:`forward`, :meth:`forward_features` and
    :meth:`reset_optimizer_state`; the generic :meth:`reset`, :meth:`aggregate_into`, :meth:`snapshot` and
    :meth:`load_slot` work through ``slots`` and may be overridden by faster versions.
    """

    #: Saved in checkpoints (slots that outlive a round); set by the method from its schedule.
    checkpointed: bool = False

    def __len__(self) -> int:
        return len(self.slots)

    @torch.no_grad()
    def reset(self, source: nn.Module, slots: Slots = None) -> None:
        """Broadcast: the ``slots`` (default all) take ``source``'s weights and buffers."""
        state = source.state_dict()
        for k in slot_list(slots, len(self)):
            self.slots[k].load_state_dict(state)

    @override
    def forward(self, x: torch.Tensor, sizes: torch.Tensor, slots: Slots = None) -> torch.Tensor:
        """Run slot ``slots[i]`` (default ``i``) on its ``sizes[i]`` rows; ``x``: ``[B, ...]`` in that order."""
        raise NotImplementedError

    def forward_features(
        self, x: torch.Tensor, sizes: torch.Tensor, slots: Slots = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Like :meth:`forward` for ``nn.Sequential`` slots, also returning the input of the last layer (the
        features ``z`` before the classifier): ``([B, D], [B, N])``."""
        raise NotImplementedError

    def reset_optimizer_state(self, optimizer: torch.optim.Optimizer, slots: Slots = None) -> None:
        """Forget ``optimizer``'s state (e.g. momentum) of the ``slots`` (default all): they start fresh."""
        raise NotImplementedError

    def clip_grad_norms_(self, max_norm: float, slots: Slots = None) -> torch.Tensor:
        """Each slot's own gradient-norm clipping (``clip_grad_norm_`` per client): the gradients of slot ``k`` are
        scaled by ``min(1, max_norm / (‖g_k‖ + 1e-6))``; returns the norms before clipping, ``[len(slots)]``."""
        raise NotImplementedError

    @torch.no_grad()
    def aggregate_into(self, target: nn.Module, weights: torch.Tensor, slots: Slots = None) -> None:
        """FL phase, eq. (10): ``target ← Σ_k w_k · slot_k / Σ_k w_k`` over ``slots`` (default all), ``weights``
        ``[len(slots)]``; integer buffers keep the first slot's value."""
        states = [self.slots[k].state_dict() for k in slot_list(slots, len(self))]
        target.load_state_dict(weighted_average(states, weights))

    def snapshot(self, slot: int) -> dict[str, torch.Tensor]:
        """A detached copy of slot ``slot``'s state (e.g. an upload kept in a buffer until it is aggregated)."""
        return {k: v.detach().clone() for k, v in self.slots[slot].state_dict().items()}

    @torch.no_grad()
    def load_slot(self, slot: int, state: dict[str, torch.Tensor]) -> None:
        """Slot ``slot`` takes ``state`` (a snapshot, or a client's stored half)."""
        self.slots[slot].load_state_dict(state)

    @staticmethod
    @torch.no_grad()
    def aggregate_snapshots(target: nn.Module, states: Sequence[dict[str, torch.Tensor]], weights) -> None:
        """Eq. (10) over stored snapshots instead of live slots: ``target ← Σ_k w_k · state_k / Σ_k w_k``."""
        target.load_state_dict(weighted_average(states, torch.as_tensor(weights)))

    def steps_only(self, optimizer: torch.optim.Optimizer, slots: Slots = None):
        """A context in which ``optimizer.step()`` moves only ``slots`` (``None``: every slot). Here a no-op: a slot
        a step leaves out has no gradient, and the optimiser skips its modules."""
        return contextlib.nullcontext()


class SequentialBank(ClientBank):
    """``S`` module copies of ``template``; slot ``k`` holds client ``C^i[k]``'s weights ``w_{c,k}``."""

    def __init__(self, template: nn.Module, num_slots: int) -> None:
        super().__init__()
        if num_slots < 1:
            raise ConfigError(f"num_slots={num_slots} must be >= 1")
        self.slots = nn.ModuleList(copy.deepcopy(template) for _ in range(num_slots))

    def _chosen(self, slots: Slots) -> list[nn.Module]:
        return list(self.slots) if slots is None else [self.slots[k] for k in slot_list(slots, len(self))]

    @override
    def forward(self, x: torch.Tensor, sizes: torch.Tensor, slots: Slots = None) -> torch.Tensor:
        chunks = x.split(sizes.tolist())
        return torch.cat([slot(chunk) for slot, chunk in zip(self._chosen(slots), chunks)])

    @override
    def forward_features(
        self, x: torch.Tensor, sizes: torch.Tensor, slots: Slots = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        chunks = x.split(sizes.tolist())
        chosen = self._chosen(slots)
        feats = [slot[:-1](chunk) for slot, chunk in zip(chosen, chunks)]
        return torch.cat(feats), torch.cat([slot[-1](f) for slot, f in zip(chosen, feats)])

    @override
    def reset_optimizer_state(self, optimizer: torch.optim.Optimizer, slots: Slots = None) -> None:
        for slot in self._chosen(slots):
            for p in slot.parameters():
                optimizer.state.pop(p, None)

    @torch.no_grad()
    @override
    def clip_grad_norms_(self, max_norm: float, slots: Slots = None) -> torch.Tensor:
        norms = []
        for slot in self._chosen(slots):
            grads = [p.grad for p in slot.parameters() if p.grad is not None]
            device = next(slot.parameters()).device
            norms.append(clip_gradients_(grads, max_norm).to(device) if grads else torch.zeros((), device=device))
        return torch.stack(norms)
