"""Each part of a method saves its own entry of a checkpoint and keeps the others': what a checkpoint holds, and a
resume from it, do not depend on the order of the parts (issue 55: a mixin used to replace the ``lightning_sfl``
entry, so the federation's state was saved only because of the order of the bases)."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from _helpers import small_digits
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_sfl.algorithms import SCALA
from lightning_sfl.callbacks import SimulatedClock

PARTS = SCALA._checkpoint_parts


def _fit(parts, rounds: int, folder, ckpt_path=None):
    torch.manual_seed(0)
    method = type("Method", (SCALA,), {"_checkpoint_parts": parts})(local_iters=2, lr=0.05, momentum=0.5)
    trainer = L.Trainer(
        max_epochs=rounds,
        logger=False,
        callbacks=[ModelCheckpoint(dirpath=folder, save_last=True), SimulatedClock()],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(method, small_digits(), ckpt_path=ckpt_path)
    return method, trainer


@pytest.mark.parametrize("order", ["as_given", "reversed"])
def test_a_resume_is_exact_whatever_the_order_of_the_parts(order, tmp_path):
    """Two rounds, saved, resumed for a third with the parts in either order: the method's state and the federation's
    simulated time are those of three rounds in one go, and the checkpoint holds both parts' entries."""
    parts = PARTS if order == "as_given" else PARTS[::-1]
    full, full_trainer = _fit(PARTS, 3, tmp_path / "full")
    _fit(parts, 2, tmp_path / "part")
    saved = torch.load(tmp_path / "part" / "last.ckpt", weights_only=True)["lightning_sfl"]
    assert {"algorithm", "federation"} <= saved.keys()
    resumed, trainer = _fit(parts, 3, tmp_path / "part", ckpt_path=str(tmp_path / "part" / "last.ckpt"))
    for (name, a), b in zip(full.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
    clock = "clock/elapsed_seconds"
    assert float(trainer.callback_metrics[clock]) == float(full_trainer.callback_metrics[clock])
