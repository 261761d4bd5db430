"""The bookkeeping of one round, out of a method's ``training_step``: the round events its callbacks receive, the
round of the byte ledger, what each bank slot did (its client, rows and local iterations) and the
:class:`~lightning_sfl.loop.RoundEnd` that closes the round.

A method starts one at the round's first step (:meth:`RoundTracker.start`), counts every step (:meth:`count`), logs
its losses (:meth:`log_losses`) and ends it after aggregating (:meth:`end`); the federation stamps the simulated time
and hands the event on.
"""

from __future__ import annotations

import math

import torch

from lightning_sfl.loop import Federation, RoundEnd, Step
from lightning_sfl.runtime.guards import check_finite
from lightning_sfl.runtime.processes import sum_over_processes, world_size

__all__ = ["RoundTracker"]


class RoundTracker:
    """One round of a method's ``S`` bank slots (see the module docstring). The counters live on the steps' device
    (no synchronisation per step) and are read once, at the round's end.

    Attributes:
        clients: ``[S]`` the client in each slot (-1: none yet this round).
        samples: ``[S]`` training rows each slot processed.
        iterations: ``[S]`` local iterations each slot took part in (steps with rows for it).
        server_rows: rows of steps without clients: data the server holds and trains on (Semi-SFL's labelled set).
    """

    def __init__(self, federation: Federation, first: Step, num_slots: int) -> None:
        self.federation = federation
        self.samples = first.sizes.new_zeros(num_slots)
        self.iterations = first.sizes.new_zeros(num_slots)
        self.clients = first.clients.new_full((num_slots,), -1)
        self.server_rows = 0

    @classmethod
    def start(cls, federation: Federation, first: Step, num_slots: int) -> RoundTracker:
        """The round of ``first`` (its first step) begins: the callbacks' ``on_round_start``, then a fresh round of
        the byte ledger for ``num_slots`` slots."""
        federation.emit("on_round_start", first)
        federation.ledger.start(num_slots)
        return cls(federation, first, num_slots)

    def count(self, step: Step) -> None:
        """What ``step`` adds to its slots: its rows, one local iteration where it has rows, and its clients (only
        for steps that train the client halves); a step without clients, its rows to the server's."""
        if len(step.clients) and step.trains_client_halves:
            slots = step.slots_tensor
            self.samples.index_add_(0, slots, step.sizes)
            self.iterations.index_add_(0, slots, (step.sizes > 0).to(step.sizes.dtype))
            self.clients[slots] = step.clients
        elif not len(step.clients):
            self.server_rows += len(step.rows)

    def log_losses(self, log, step: Step, server_loss: torch.Tensor, client_loss: torch.Tensor) -> None:
        """The step's losses as ``train/server_loss`` and ``train/client_loss`` (means over the round, through the
        method's ``log``), summed over processes first; a non-finite one stops the run naming the step's clients."""
        if world_size() > 1:  # each process holds its shard's part of the (globally normalised) losses
            losses = (server_loss, client_loss)
            server_loss, client_loss = (sum_over_processes(v.detach().clone()) for v in losses)
        if not math.isfinite(float(server_loss.detach() + client_loss.detach())):  # one read of the device
            for name, loss in (("server loss", server_loss), ("client loss", client_loss)):
                if not torch.isfinite(loss):
                    check_finite(step, (name, loss.detach().expand(step.num_rows)))
        log("train/server_loss", server_loss.detach(), on_step=False, on_epoch=True, batch_size=step.num_rows)
        log("train/client_loss", client_loss.detach(), on_step=False, on_epoch=True, batch_size=step.num_rows)

    def end(self, last: Step, metrics: dict[str, float]) -> RoundEnd:
        """The round of ``last`` (its last step, after the aggregation) ends: its :class:`RoundEnd`, stamped with the
        simulated time by the federation, goes to the callbacks' ``on_round_end``; returns it."""
        event = RoundEnd(
            last.round,
            self.clients.cpu(),
            self.samples.cpu(),
            self.federation.ledger,
            last.time,
            self.iterations.cpu(),
            metrics=metrics,
            server_rows=self.server_rows,
        )
        event = self.federation.end_round(event)
        self.federation.emit("on_round_end", event)
        return event
