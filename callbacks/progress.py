"""``RoundProgressBar``: one progress bar over global rounds, with the latest test accuracy.

Lightning's default bar counts local iterations and restarts every epoch; in federated runs the unit
that matters is the round (epoch). This bar advances once per round and shows ``acc`` (latest
``test/acc``), the mean server and client losses of the round and the cumulative traffic::

    Rounds  42%|████▏     | 42/100 [00:07<00:09, 5.9round/s, acc=0.947, server_loss=0.21, client_loss=0.25, MB=3.1]

A round that has lasted ``slow_round_s`` seconds (2 by default) shows its local iterations in place of ``Rounds``
(``round 43: iteration 4/10``) until it ends; shorter rounds cost one clock reading per local iteration. When the run
stops on an error (or Ctrl-C) the bar ends its line, so that the ``error:`` line that follows starts a line of its own.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable

from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm
from typing_extensions import override

_SHOWN = {"test/acc": "acc", "train/server_loss": "server_loss", "train/client_loss": "client_loss"}


def rounds_total(trainer, pl_module) -> int | None:
    """Rounds the fit will run: ``max_epochs``, or fewer when ``max_steps`` ends it first (rounds of a fixed
    ``schedule.steps_per_round``); ``None`` when neither bounds it (``max_epochs=-1`` with ``max_time``, or
    variable-length rounds)."""
    bounds = []
    if trainer.max_epochs is not None and trainer.max_epochs >= 0:
        bounds.append(trainer.max_epochs)
    per_round = getattr(getattr(pl_module, "schedule", None), "steps_per_round", None)
    if trainer.max_steps is not None and trainer.max_steps >= 0 and per_round:
        bounds.append(-(-trainer.max_steps // per_round))
    return min(bounds) if bounds else None


def round_status(round_index: int, batch_idx: int, per_round: int | None) -> str:
    """The bar's text in a long round: ``round <r>: iteration <i>/<n>`` (1-based; ``/<n>`` when rounds have a fixed
    number of local iterations).

    >>> round_status(2, 3, 10), round_status(0, 0, None)
    ('round 3: iteration 4/10', 'round 1: iteration 1')
    """
    return f"round {round_index + 1}: iteration {batch_idx + 1}" + (f"/{per_round}" if per_round else "")


class RoundProgressBar(TQDMProgressBar):
    """Progress over rounds (total: :func:`rounds_total`); validation bars are hidden during ``fit``. A round longer
    than ``slow_round_s`` seconds shows its local iterations (redrawn at most every ``redraw_s`` seconds); ``clock``:
    the time in seconds (default ``time.monotonic``)."""

    def __init__(
        self,
        refresh_rate: int = 1,
        process_position: int = 0,
        leave: bool = False,
        slow_round_s: float = 2.0,
        redraw_s: float = 0.5,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(refresh_rate, process_position, leave)
        self.slow_round_s, self.redraw_s = slow_round_s, redraw_s
        self._clock = clock or time.monotonic
        self._round_start = math.inf  # no round yet
        self._drawn = -math.inf  # when the iteration was last shown

    @override
    def init_train_tqdm(self) -> Tqdm:
        return Tqdm(
            desc="Rounds",
            unit="round",
            position=2 * self.process_position,
            disable=self.is_disabled,
            leave=True,
            dynamic_ncols=True,
            file=sys.stdout,
            smoothing=0,
        )

    @override
    def get_metrics(self, trainer, pl_module) -> dict[str, float | str]:
        metrics = trainer.callback_metrics
        shown: dict[str, float | str] = {}
        for key, name in _SHOWN.items():
            if key in metrics:
                shown[name] = f"{float(metrics[key]):.3g}"
        if "comm/cumulative_bytes" in metrics:
            shown["MB"] = f"{float(metrics['comm/cumulative_bytes']) / 1e6:.1f}"
        return shown

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        self.train_progress_bar = self.init_train_tqdm()
        self.train_progress_bar.reset(total=rounds_total(trainer, pl_module))
        self.train_progress_bar.update(trainer.current_epoch)  # resumed runs start where they stopped

    @override
    def on_train_epoch_start(self, trainer, *_) -> None:
        self._round_start = self._clock()

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        now = self._clock()
        if now - self._round_start < self.slow_round_s or now - self._drawn < self.redraw_s or self.is_disabled:
            return
        self._drawn = now
        per_round = getattr(getattr(pl_module, "schedule", None), "steps_per_round", None)
        self.train_progress_bar.set_description(round_status(trainer.current_epoch, batch_idx, per_round))

    @override
    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.train_progress_bar.n = trainer.current_epoch + 1
        if self._drawn > -math.inf:  # the round showed its iterations: the bar counts rounds again
            self.train_progress_bar.set_description("Rounds", refresh=False)
            self._drawn = -math.inf
        self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))

    @override
    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """End the open bars' lines (a bar's last update has no newline): the error line that follows starts a line of
        its own."""
        for bar in (self._train_progress_bar, self._val_progress_bar, self._test_progress_bar):
            if bar is not None:
                bar.close()

    @override
    def on_validation_start(self, trainer, pl_module) -> None:
        if trainer.state.fn == "fit":
            self.val_progress_bar = Tqdm(disable=True)
        else:
            super().on_validation_start(trainer, pl_module)
