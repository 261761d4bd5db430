"""The loop's data: typed steps, schedules, client statistics and round events (see ``docs/architecture.md``)."""

from lightning_sfl.loop.local_epochs import LocalEpochs
from lightning_sfl.loop.schedule import Schedule, SyncRounds
from lightning_sfl.loop.step import ClientStats, RoundCallback, RoundEnd, Step

__all__ = ["ClientStats", "LocalEpochs", "RoundCallback", "RoundEnd", "Schedule", "Step", "SyncRounds"]
