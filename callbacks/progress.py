"""``RoundProgressBar``: one progress bar over global rounds, with the latest test accuracy.

Lightning's default bar counts local iterations and restarts every epoch; in federated runs the unit
that matters is the round (epoch). This bar advances once per round and shows ``acc`` (latest
``test/acc``), the mean server and client losses of the round and the cumulative traffic::

    Rounds  42%|████▏     | 42/100 [00:07<00:09, 5.9round/s, acc=0.947, server_loss=0.21, client_loss=0.25, MB=3.1]
"""

from __future__ import annotations

import sys

from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

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


class RoundProgressBar(TQDMProgressBar):
    """Progress over rounds (total: :func:`rounds_total`); validation bars are hidden during ``fit``."""

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

    def get_metrics(self, trainer, pl_module) -> dict[str, float | str]:
        metrics = trainer.callback_metrics
        shown: dict[str, float | str] = {}
        for key, name in _SHOWN.items():
            if key in metrics:
                shown[name] = f"{float(metrics[key]):.3g}"
        if "comm/cumulative_bytes" in metrics:
            shown["MB"] = f"{float(metrics['comm/cumulative_bytes']) / 1e6:.1f}"
        return shown

    def on_train_start(self, trainer, pl_module) -> None:
        self.train_progress_bar = self.init_train_tqdm()
        self.train_progress_bar.reset(total=rounds_total(trainer, pl_module))
        self.train_progress_bar.update(trainer.current_epoch)  # resumed runs start where they stopped

    def on_train_epoch_start(self, trainer, *_) -> None:
        pass

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        pass

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.train_progress_bar.n = trainer.current_epoch + 1
        self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_validation_start(self, trainer, pl_module) -> None:
        if trainer.state.fn == "fit":
            self.val_progress_bar = Tqdm(disable=True)
        else:
            super().on_validation_start(trainer, pl_module)
