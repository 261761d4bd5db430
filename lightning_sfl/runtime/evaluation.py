"""The evaluation of the global model after every round (``test/acc`` and ``round``, also for ``validate``/``test``
of a checkpoint), as functions :class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm`'s evaluation hooks call."""

from __future__ import annotations

import torch

from lightning_sfl import trainer_view

__all__ = ["evaluation_step", "finish_evaluation", "rounds_completed", "start_evaluation"]


def evaluation_step(method, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Accuracy of the global model (``method(x)``; Semi-SFL's is its teacher) on one test batch, into
    ``method.val_acc``; returns ``{"preds": [B]}`` for callbacks (:class:`~lightning_sfl.callbacks.PerClassAccuracy`
    logs ``test/acc_class_<c>`` from them)."""
    preds = method(batch["x"]).argmax(dim=1)
    method.val_acc.update(preds, batch["y"])
    return {"preds": preds}


def finish_evaluation(method, prefix: str) -> None:
    """Log the epoch's accuracy as ``<prefix>/acc`` with ``round``, the rounds behind the model."""
    method.log(f"{prefix}/acc", method.val_acc.compute())
    method.log("round", float(rounds_completed(method)))
    method.val_acc.reset()


def start_evaluation(method) -> None:
    """Every evaluation draws the defences' noise afresh from ``(seed, rounds done)`` (the run's seed; 0 outside a
    fit)."""
    if len(method.defences):
        seed = int(method.federation.stats.seed) if method.federation is not None else 0
        done = rounds_completed(method) if method._trainer is not None else 0
        method.defences.start_evaluation(seed, method.global_rank, done)


def rounds_completed(method) -> int:
    """Rounds behind ``method``'s global model being evaluated (the ``round`` logged with ``test/acc``): during fit the
    round just aggregated; in ``validate``/``test`` of a checkpoint the rounds it was saved after; otherwise the
    trainer's epochs."""
    if trainer_view.is_fitting(method._trainer):
        return method.current_epoch + 1
    saved = getattr(method, "_checkpoint_rounds", None)
    return saved if saved is not None else method.current_epoch
