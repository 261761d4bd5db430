"""The evaluation of the global model after every round (``test/acc`` and ``round``, also for ``validate``/``test`` of
a checkpoint): a component of every method (``method.evaluation``) with its own state, the accuracy metric and the
rounds behind a checkpoint loaded for evaluation, handed what each hook needs (the model to run, the logger, the
defences and the run's seed), never the method."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torchmetrics.classification import MulticlassAccuracy

__all__ = ["Evaluation"]


class Evaluation(nn.Module):
    """Accuracy of the global model on the test split, logged as ``<prefix>/acc`` with ``round`` (the rounds behind the
    model) at the end of each evaluation.

    Args:
        num_classes: ``N``.

    >>> ev = Evaluation(3)
    >>> logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    >>> ev.step(lambda x: x, {"x": logits, "y": torch.tensor([0, 2])})["preds"].tolist()
    [0, 1]
    >>> logged = {}
    >>> ev.finish(lambda name, value: logged.update({name: float(value)}), "test", rounds=4)
    >>> logged
    {'test/acc': 0.5, 'round': 4.0}
    """

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.accuracy = MulticlassAccuracy(num_classes, average="micro")
        #: Rounds behind a checkpoint loaded for ``validate``/``test`` (``None``: the rounds are a fit's).
        self.checkpoint_rounds: int | None = None

    def step(self, model: Callable[[torch.Tensor], torch.Tensor], batch: dict[str, torch.Tensor]) -> dict:
        """The predictions of ``model`` (the global model: logits ``[B, N]``; Semi-SFL's is its teacher) on one test
        batch, into the accuracy; returns ``{"preds": [B]}`` for callbacks
        (:class:`~lightning_sfl.callbacks.PerClassAccuracy` logs ``test/acc_class_<c>`` from them)."""
        preds = model(batch["x"]).argmax(dim=1)
        self.accuracy.update(preds, batch["y"])
        return {"preds": preds}

    def start(self, defences, seed: int, rank: int, rounds: int) -> None:
        """Every evaluation draws the defences' noise afresh from ``(seed, rank, rounds done)``."""
        if len(defences):
            defences.start_evaluation(seed, rank, rounds)

    def finish(self, log: Callable, prefix: str, rounds: int) -> None:
        """Log the evaluation's accuracy as ``<prefix>/acc`` and ``round`` (``rounds``), then start afresh."""
        log(f"{prefix}/acc", self.accuracy.compute())
        log("round", float(rounds))
        self.accuracy.reset()

    def rounds_completed(self, fitting: bool, epoch: int) -> int:
        """Rounds behind the global model being evaluated (the ``round`` logged with ``test/acc``): during a fit
        (``fitting``) the round just aggregated, ``epoch + 1``; in ``validate``/``test`` of a checkpoint the rounds it
        was saved after; otherwise ``epoch``."""
        if fitting:
            return epoch + 1
        return self.checkpoint_rounds if self.checkpoint_rounds is not None else epoch
