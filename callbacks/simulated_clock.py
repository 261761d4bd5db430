"""``SimulatedClock``: logs the simulated wall-clock time of every round (keys ``clock/*``).

The times come from the fit's federation: its system model (:class:`~lightning_sfl.system.wireless.WirelessCell`,
SCALA §5.1 and GAS; configured on the command line with ``--clock.*``) gives each synchronous round its duration from
the round's traffic and training rows, and asynchronous schedules stamp each round's end with their own event clock;
the federation stamps every :class:`~lightning_sfl.loop.RoundEnd` with its end time and duration. This callback only
logs them, once per round (``on_epoch``), to plot accuracy against simulated time next to ``comm/cumulative_bytes`` of
:class:`~lightning_sfl.callbacks.CommunicationBytes`:

* ``clock/round_seconds`` — the round's duration;
* ``clock/elapsed_seconds`` — the simulated time at the round's end (checkpointed with the federation).
"""

from __future__ import annotations

from typing_extensions import override

from lightning_sfl.callbacks.round_callback import RoundCallback
from lightning_sfl.loop import RoundEnd

__all__ = ["SimulatedClock"]


class SimulatedClock(RoundCallback):
    """Logs each round's simulated duration and end time (see the module docstring); nothing to configure."""

    @override
    def on_round_end(self, trainer, pl_module, event: RoundEnd) -> None:
        if event.time is None:
            return
        metrics = {"clock/round_seconds": float(event.seconds), "clock/elapsed_seconds": float(event.time)}
        pl_module.log_dict(metrics, on_step=False, on_epoch=True, batch_size=1)
