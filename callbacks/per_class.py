"""``PerClassAccuracy``: per-class test accuracy and confusion matrix of the global model, every n rounds.

The coordinator evaluates the global model ``pl_module(x)`` on the test split after every round
(``validation_step``). In a *reporting round* — every ``every_n_rounds``-th round (``round % n == 0``) and the
last round of the fit (``max_epochs`` or ``max_steps`` reached, or the trainer stopping) — this callback
collects the predictions of that evaluation into a torchmetrics ``MulticlassAccuracy(average="none")`` and a
``MulticlassConfusionMatrix`` (both synchronised across processes under DDP by ``compute``) and logs, keyed by
``round`` (rounds completed, as the coordinator logs it):

* to every ``WandbLogger`` (global rank zero):

  - ``per_class/table``: ``wandb.Table`` with columns ``class, accuracy, support`` (one row per class;
    support = test samples of that class);
  - ``per_class/bar_chart``: ``wandb.plot.bar`` of that table (W&B stores its data as
    ``per_class/bar_chart_table``);
  - ``per_class/confusion_matrix``: W&B's confusion-matrix chart (``wandb/confusion_matrix/v1``, data
    ``per_class/confusion_matrix_table`` with columns ``Actual, Predicted, nPredictions``, ``N²`` rows,
    built from the synchronised matrix);

* to every logger: scalars ``test/acc_class_<c>`` through ``pl_module.log``, next to the coordinator's own
  ``test/acc`` (the only place per-class accuracy is logged).

Predictions reach the callback through the evaluation step's outputs, without a second forward pass: the
coordinator's ``validation_step``/``test_step`` return ``{"preds": [B]}`` (the global model's predicted classes
for the batch's ``B`` rows). A module whose evaluation step returns no ``preds`` is evaluated by the callback
itself (``pl_module(batch["x"]).argmax(1)``). A standalone ``trainer.validate``/``trainer.test`` always reports.
Outside reporting rounds, during the sanity check and without loggers it does nothing. No state beyond its
setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import lightning as L
import torch
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.trainer.states import TrainerFn
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix
from typing_extensions import override

from lightning_sfl.errors import whole_number
from lightning_sfl.wandb.payloads import log_built, per_class_payload


def rounds_completed(trainer: L.Trainer, pl_module: L.LightningModule | None = None) -> int:
    """``round`` as the coordinator logs it (its ``rounds_evaluated``: a checkpoint's round in ``validate``/``test``);
    for other modules, during fit the evaluated round is ``current_epoch + 1``."""
    if pl_module is not None and hasattr(pl_module, "rounds_evaluated"):  # a method of ours
        return pl_module.rounds_evaluated()
    return trainer.current_epoch + 1 if trainer.state.fn == TrainerFn.FITTING else trainer.current_epoch


def is_last_round(trainer: L.Trainer) -> bool:
    """Whether the evaluation now running (during fit) follows the last round of the fit."""
    if trainer.should_stop:
        return True
    max_epochs, max_steps = trainer.max_epochs, trainer.max_steps
    if max_epochs is not None and max_epochs >= 0 and trainer.current_epoch + 1 >= max_epochs:
        return True
    return max_steps is not None and max_steps >= 0 and trainer.global_step >= max_steps


class PerClassAccuracy(L.Callback):
    """Per-class test accuracy, support and confusion matrix every ``every_n_rounds`` rounds and at the last one.

    Args:
        every_n_rounds: report in rounds ``n, 2n, 3n, …`` (rounds counted from 1) and in the last round.
    """

    #: The command line's group of its options (``--per_class.every_n_rounds``), named in its errors.
    cli_group: ClassVar[str] = "per_class"

    def __init__(self, every_n_rounds: int = 1) -> None:
        self.every_n_rounds = whole_number(f"{self.cli_group}.every_n_rounds", every_n_rounds)
        self.accuracy: MulticlassAccuracy | None = None
        self.confusion: MulticlassConfusionMatrix | None = None
        self._active = False

    def should_log(self, round_idx: int, last_round: bool = False) -> bool:
        """Whether round ``round_idx`` (1-based) is a reporting round."""
        return last_round or round_idx % self.every_n_rounds == 0

    # ------------------------------------------------------------------ collect
    def _start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._active = False
        if trainer.sanity_checking or not trainer.loggers:
            return
        fitting = trainer.state.fn == TrainerFn.FITTING
        if fitting and not self.should_log(rounds_completed(trainer, pl_module), is_last_round(trainer)):
            return
        n = int(pl_module.num_classes)
        if self.accuracy is None or self.accuracy.num_classes != n:
            self.accuracy = MulticlassAccuracy(n, average="none")
            self.confusion = MulticlassConfusionMatrix(n)
        self.accuracy = self.accuracy.to(pl_module.device)
        self.confusion = self.confusion.to(pl_module.device)
        self.accuracy.reset()
        self.confusion.reset()
        self._active = True

    def _update(self, pl_module: L.LightningModule, outputs: Any, batch: dict[str, torch.Tensor]) -> None:
        if not self._active:
            return
        preds = outputs.get("preds") if isinstance(outputs, Mapping) else None
        if preds is None:  # a module whose evaluation step returns no predictions: evaluate it here
            with torch.no_grad():
                preds = pl_module(batch["x"]).argmax(dim=1)
        self.accuracy.update(preds, batch["y"])
        self.confusion.update(preds, batch["y"])

    def _end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._active:
            return
        self._active = False
        accuracy = self.accuracy.compute().float().cpu()  # all ranks: synchronised under DDP
        confusion = self.confusion.compute().long().cpu()
        round_idx = rounds_completed(trainer, pl_module)
        values = {f"test/acc_class_{c}": float(a) for c, a in enumerate(accuracy)}
        pl_module.log_dict(values, on_step=False, on_epoch=True, batch_size=1)  # already synchronised
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                if isinstance(logger, WandbLogger):  # built in W&B's process where the logger has one
                    args = (accuracy.tolist(), confusion.tolist(), round_idx)
                    log_built(logger, per_class_payload, args, step=trainer.global_step)

    # ------------------------------------------------------------------ Lightning hooks
    @override
    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        self._start(trainer, pl_module)

    @override
    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._update(pl_module, outputs, batch)

    @override
    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        self._end(trainer, pl_module)

    @override
    def on_test_epoch_start(self, trainer, pl_module) -> None:
        self._start(trainer, pl_module)

    @override
    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._update(pl_module, outputs, batch)

    @override
    def on_test_epoch_end(self, trainer, pl_module) -> None:
        self._end(trainer, pl_module)

    @override
    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._active = False
