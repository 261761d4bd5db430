"""The loop: the federation a fit's parts share, typed steps, schedules, client statistics and round events (see
the documentation's :doc:`/architecture`)."""

from lightning_sfl.loop.async_clock import AsyncClock
from lightning_sfl.loop.async_events import ArrivalStep, AsyncEvents, UploadStep
from lightning_sfl.loop.federation import ClientData, Federate, Federation
from lightning_sfl.loop.local_epochs import LocalEpochs
from lightning_sfl.loop.schedule import Schedule, SyncRounds
from lightning_sfl.loop.step import ClientStats, RoundEnd, Step
from lightning_sfl.loop.warmup import WarmupRounds, WarmupStep
from lightning_sfl.system.timing import ClientTimes  # what the asynchronous clock runs on

__all__ = [
    "ArrivalStep",
    "AsyncClock",
    "AsyncEvents",
    "ClientData",
    "ClientStats",
    "ClientTimes",
    "Federate",
    "Federation",
    "LocalEpochs",
    "RoundEnd",
    "Schedule",
    "Step",
    "SyncRounds",
    "UploadStep",
    "WarmupRounds",
    "WarmupStep",
]
