"""The evaluation of the global model after every round (``test/acc`` and ``round``, also for ``validate``/``test``
of a checkpoint), as a mixin of :class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm`."""

from __future__ import annotations

import torch
from typing_extensions import override

from lightning_sfl import trainer_view

__all__ = ["GlobalModelEvaluation"]


class GlobalModelEvaluation:
    """Accuracy of the global model (``self(x)``; Semi-SFL's is its teacher) on the test split, logged as ``test/acc``
    with ``round``, the rounds behind the model (:attr:`rounds_completed`). Needs ``self.val_acc`` (a torchmetrics
    accuracy) and ``self.defences``."""

    def _eval_step(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Accuracy of the global model on one test batch; returns ``{"preds": [B]}`` for callbacks
        (:class:`~lightning_sfl.callbacks.PerClassAccuracy` logs ``test/acc_class_<c>`` from them)."""
        preds = self(batch["x"]).argmax(dim=1)
        self.val_acc.update(preds, batch["y"])
        return {"preds": preds}

    def _eval_epoch_end(self, prefix: str) -> None:
        self.log(f"{prefix}/acc", self.val_acc.compute())
        self.log("round", float(self.rounds_completed))
        self.val_acc.reset()

    @property
    def rounds_completed(self) -> int:
        """Rounds behind the global model being evaluated: during fit the round just aggregated; in
        ``validate``/``test`` of a checkpoint the rounds it was saved after; otherwise the trainer's epochs."""
        if trainer_view.is_fitting(self.trainer):
            return self.current_epoch + 1
        restored = getattr(self, "_checkpoint_rounds", None)
        return restored if restored is not None else self.current_epoch

    @override
    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        self._checkpoint_rounds = int(checkpoint.get("epoch", -1)) + 1  # saved at the end of epoch ``epoch``

    @override
    def on_validation_epoch_start(self) -> None:
        self._start_evaluation()
        super().on_validation_epoch_start()

    @override
    def on_test_epoch_start(self) -> None:
        self._start_evaluation()
        super().on_test_epoch_start()

    def _start_evaluation(self) -> None:
        """Every evaluation draws the defences' noise afresh from ``(seed, rounds done)`` (the run's seed; 0 outside a
        fit)."""
        if len(self.defences):
            seed = int(self.federation.stats.seed) if self.federation is not None else 0
            done = self.rounds_completed if self._trainer is not None else 0
            self.defences.start_evaluation(seed, self.global_rank, done)

    @override
    def on_train_start(self) -> None:
        self._checkpoint_rounds = None  # from now on the rounds are this fit's

    @override
    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        return self._eval_step(batch)

    @override
    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    @override
    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        return self._eval_step(batch)

    @override
    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")
