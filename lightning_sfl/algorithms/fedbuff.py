"""Buffered asynchronous FL on the GAS clock: FedBuff (Nguyen et al., AISTATS 2022) and CA²FL (Wang et al., 2023).

Plain FL clients (the whole model, no split) on :class:`~lightning_sfl.loop.AsyncEvents`: a client takes a slot with
the global model ``w`` of its start, trains ``E`` local SGD iterations of ``b`` rows, and uploads its update
``Δ_i = w_i − w_start``. Every ``Q_c`` uploads (the buffer ``S``, ``M = Q_c``) the server updates ``w`` and one round
ends:

* FedBuff, Alg. 1: ``w ← w + η_g·(1/M)·Σ_{i∈S} Δ_i``; the GAS code sets ``w`` to the uniform mean of the buffered
  models instead (``update="average"``);
* CA²FL, Alg. 1: each client's latest update is cached, ``h_i`` (0 until it first uploads), ``h̄ = (1/K)·Σ_i h_i``;
  ``v = h̄ + (1/M)·Σ_{i∈S} (Δ_i − h_i)``, ``w ← w + η·v``, then ``h_i ← Δ_i`` for the buffered clients. The GAS
  code instead adds ``Σ_i (|D_i|/Σ_j|D_j|)·h_i`` over all clients after refreshing the cache
  (``update="gas_code"``).

The update acts on the parameters; buffers (e.g. BatchNorm statistics) take the buffered models' mean. The cache
``h`` ``[K, P]`` is a per-client store (:mod:`~lightning_sfl.client_store`): rows held for the clients
that have uploaded, on disk beyond a memory budget, checkpointed incrementally.
"""

from __future__ import annotations

import torch
from typing_extensions import override

from lightning_sfl.algorithms.async_base import AsyncMethod, choice
from lightning_sfl.algorithms.registry import register
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.async_events import UploadStep
from lightning_sfl.runtime.aggregate import flat_parameters, load_flat_parameters, parameter_zeros
from lightning_sfl.runtime.client_bank import ClientBank
from lightning_sfl.runtime.iteration import full_model_iteration

__all__ = ["CA2FL", "FedBuff"]


@register("fedbuff", family="async")
class FedBuff(AsyncMethod):
    """FedBuff on the GAS clock (see the module docstring).

    Args:
        server_lr: ``η_g``.
        update: ``delta`` (FedBuff: ``w + η_g·mean Δ``) or ``average`` (the GAS code: uniform mean of the models).
        **kwargs: :class:`~lightning_sfl.algorithms.async_base.AsyncMethod`'s (``concurrency`` ``C``,
            ``aggregate_every`` ``Q_c = M``, ``client_batch_size`` ``b``) and the base's (``local_iters`` ``E``).
    """

    has_server_half = False
    updates: tuple[str, ...] = ("delta", "average")

    def __init__(self, server_lr: float = 1.0, update: str = "delta", **kwargs) -> None:
        if not server_lr > 0:
            raise ConfigError(f"server_lr={server_lr} must be > 0")
        self.update = choice("update", update, self.updates)
        super().__init__(**kwargs)
        self.server_lr = float(server_lr)
        self.deltas: list[torch.Tensor] = []  # Δ_i of the buffered uploads, [P] each; empty at every round end

    @override
    def upload(self, step: UploadStep) -> None:
        """Train ``E`` local iterations in the client's slot, then buffer its model and its update ``Δ_i``."""
        slot = self.bank.slots[int(step.slots[0])]
        start = flat_parameters(slot).detach().clone()
        rows = int(step.sizes[0]) // step.local_iters  # b: the step holds E minibatches of b rows, in order
        for e in range(step.local_iters):
            minibatch = step.minibatch(e * rows, rows)
            last = e == step.local_iters - 1  # one global_step a step; one slot moves
            loss = full_model_iteration(self, minibatch, count_step=last)  # its slot's CE
            self.log("train/client_loss", loss.detach(), on_step=False, on_epoch=True, batch_size=rows)
        self.deltas.append(flat_parameters(slot).detach() - start)
        super().upload(step)

    @classmethod
    @override
    def unused_options(cls) -> dict[str, str]:
        """``flush_every`` (no activations: no server update per arrivals) and ``aggregation`` (``update`` sets the
        server step)."""
        return {
            **super().unused_options(),
            "flush_every": f"{cls.__name__}'s clients upload no activations (Q_s counts activation arrivals)",
            "aggregation": f"{cls.__name__}'s server step is set by its update option",
        }

    def server_direction(self, deltas: torch.Tensor, clients: list[int]) -> torch.Tensor:
        """The update direction from the buffered ``Δ`` ``[M, P]`` of ``clients``: FedBuff's mean."""
        return deltas.mean(0)

    @override
    def aggregate(self, step: UploadStep) -> None:
        states, clients = zip(*self.uploads)
        deltas, clients = torch.stack(self.deltas), list(clients)
        w = flat_parameters(self.client.net).detach().clone()
        weights = torch.ones(len(states), dtype=torch.float64)  # buffers (and the code's models): uniform mean
        ClientBank.aggregate_snapshots(self.client.net, states, weights)
        if self.update != "average":
            load_flat_parameters(self.client.net, w + self.server_lr * self.server_direction(deltas, clients))
        self.uploads.clear()
        self.deltas.clear()
        self.reset_slots(step.slots)


@register("ca2fl", family="async")
class CA2FL(FedBuff):
    """CA²FL on the GAS clock: FedBuff with cached updates calibrating the buffered ones (see the module docstring).

    Args:
        update: ``delta`` (CA²FL, Alg. 1) or ``gas_code`` (the GAS code's variant).
        **kwargs: :class:`FedBuff`'s (``server_lr`` is ``η``).
    """

    updates = ("delta", "gas_code")

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_client_state("cache", lambda: parameter_zeros(self.client.net))  # h_i, [K, P]

    @override
    def server_direction(self, deltas: torch.Tensor, clients: list[int]) -> torch.Tensor:
        if self.update == "gas_code":
            self.refresh_cache(deltas, clients)
            p = self.client_sizes.to(deltas.dtype)
            return self.cache.weighted_sum(p / p.sum())
        mean_cache = self.cache.mean()  # h̄ over all K clients, before the refresh
        v = mean_cache + (deltas - self.cache[torch.tensor(clients, device=deltas.device)]).mean(0)
        self.refresh_cache(deltas, clients)
        return v

    def refresh_cache(self, deltas: torch.Tensor, clients: list[int]) -> None:
        """``h_i ← Δ_i`` for the buffered clients, in upload order (a client that uploaded twice keeps its last)."""
        for delta, client in zip(deltas, clients):
            self.cache[client] = delta
