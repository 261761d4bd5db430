"""``PseudoLabelQuality``: how good a semi-supervised method's pseudo-labels are (keys ``train/pseudo_label_*``).

The method never sees the clients' labels (their steps carry none); this callback looks them up in the data module by
the step's ``rows`` after the step ran, and compares them with what the method assigned (``last_pseudo_labels``
``[B]`` and ``last_mask`` ``[B]``, set by :class:`~lightning_sfl.algorithms.SemiSFL` on every unlabelled step). Per
round (``on_epoch``, weighted by rows):

* ``train/pseudo_label_acc`` — accuracy of the confident (masked-in) pseudo-labels;
* ``train/pseudo_label_acc_all`` — accuracy of the teacher's argmax on every row;
* ``train/mask_rate`` is logged by the method itself.

Methods without pseudo-labels are left alone.
"""

from __future__ import annotations

import lightning as L


class PseudoLabelQuality(L.Callback):
    """Logs the accuracy of a method's pseudo-labels against the true labels the data module holds."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        labels, mask = getattr(pl_module, "last_pseudo_labels", None), getattr(pl_module, "last_mask", None)
        if labels is None or getattr(batch, "y", 0) is not None or trainer.datamodule is None:
            return
        truth = trainer.datamodule.splits.train_y[batch.rows.cpu()].to(labels.device)
        correct = (labels == truth).float()
        pl_module.log("train/pseudo_label_acc_all", correct.mean(), on_step=False, on_epoch=True, batch_size=len(truth))
        confident = int(mask.sum())
        if confident:
            acc = correct[mask].mean()
            pl_module.log("train/pseudo_label_acc", acc, on_step=False, on_epoch=True, batch_size=confident)
        pl_module.last_pseudo_labels = pl_module.last_mask = None  # consumed: a later labelled step is not mistaken
