"""``PseudoLabelQuality``: how good a semi-supervised method's pseudo-labels are (keys ``train/pseudo_label_*``).

The method never sees the clients' labels (their steps carry none); a semi-supervised method returns what it assigned
in its step's outputs (``pseudo_labels`` ``[B]`` and ``mask`` ``[B]``, from
:class:`~lightning_sfl.algorithms.SemiSFL`'s unlabelled steps), and this callback looks the true labels up in the
federation's data by the step's ``rows``. Per round (``on_epoch``, weighted by rows):

* ``train/pseudo_label_acc`` — accuracy of the confident (masked-in) pseudo-labels;
* ``train/pseudo_label_acc_all`` — accuracy of the teacher's argmax on every row;
* ``train/mask_rate`` is logged by the method itself.

Methods without pseudo-labels are left alone.
"""

from __future__ import annotations

from typing_extensions import override

from lightning_sfl.callbacks.round_callback import RoundCallback
from lightning_sfl.loop import Federation

__all__ = ["PseudoLabelQuality"]


class PseudoLabelQuality(RoundCallback):
    """Logs the accuracy of a method's pseudo-labels against the true labels of the federation's data."""

    def __init__(self) -> None:
        self.federation: Federation | None = None

    @override
    def on_federation(self, trainer, pl_module, federation: Federation) -> None:
        self.federation = federation

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        labels = outputs.get("pseudo_labels") if isinstance(outputs, dict) else None
        if labels is None or self.federation is None or self.federation.data is None:
            return
        mask = outputs["mask"]
        truth = self.federation.data.train_labels(batch.rows).to(labels.device)
        correct = (labels == truth).float()
        pl_module.log("train/pseudo_label_acc_all", correct.mean(), on_step=False, on_epoch=True, batch_size=len(truth))
        confident = int(mask.sum())
        if confident:
            acc = correct[mask].mean()
            pl_module.log("train/pseudo_label_acc", acc, on_step=False, on_epoch=True, batch_size=confident)
