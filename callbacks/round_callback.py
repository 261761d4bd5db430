"""``RoundCallback``: the base of callbacks that receive the loop's round events and the fit's federation."""

from __future__ import annotations

import lightning as L

from lightning_sfl.loop import Federation, RoundEnd, Step

__all__ = ["RoundCallback"]


class RoundCallback(L.Callback):
    """A Lightning callback that also receives the federation when a fit starts, and the loop's round events (both
    delivered by the federation, on every process; the round events inside the ``training_step`` of the round's first
    and last step, where ``pl_module.log`` works as in any hook).

    Plain ``L.Callback`` subclasses may define the same three methods; subclassing this only documents them.
    """

    def on_federation(self, trainer: L.Trainer, pl_module: L.LightningModule, federation: Federation) -> None:
        """When the fit starts (after ``setup``): the clients' statistics, the schedule, the system model, the byte
        ledger and the clients' data of this fit."""

    def on_round_start(self, trainer: L.Trainer, pl_module: L.LightningModule, step: Step) -> None:
        """Before the round's first step runs (the global model is the one the previous round produced)."""

    def on_round_end(self, trainer: L.Trainer, pl_module: L.LightningModule, event: RoundEnd) -> None:
        """After the round's FL phase (aggregation): ``event`` says who took part, what they sent and when (its
        simulated end time and duration)."""
