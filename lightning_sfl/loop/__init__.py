"""The loop's data: typed steps, schedules, client statistics and round events (see ``docs/architecture.md``)."""

from lightning_sfl.loop.async_clock import AsyncClock, ClientTimes
from lightning_sfl.loop.async_events import ArrivalStep, AsyncEvents, UploadStep
from lightning_sfl.loop.local_epochs import LocalEpochs
from lightning_sfl.loop.schedule import Schedule, SyncRounds
from lightning_sfl.loop.step import ClientStats, RoundCallback, RoundEnd, Step
from lightning_sfl.loop.warmup import WarmupRounds, WarmupStep

__all__ = [
    "ArrivalStep",
    "AsyncClock",
    "AsyncEvents",
    "ClientStats",
    "ClientTimes",
    "LocalEpochs",
    "RoundCallback",
    "RoundEnd",
    "Schedule",
    "Step",
    "SyncRounds",
    "UploadStep",
    "WarmupRounds",
    "WarmupStep",
]
