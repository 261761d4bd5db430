"""The logging fast paths change nothing that is logged: Lightning's ``self.log`` with the redundant metric moves
skipped gives the same CSV as without, and ``typed_table`` builds the same W&B table as ``wandb.Table``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

FIT = textwrap.dedent(
    """
    import sys, torch, lightning as L
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultMetric

    class M(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch, i):
            loss = self.layer(batch).square().mean()
            self.log("train/loss", loss, on_step=True, on_epoch=True, batch_size=len(batch) - i % 3)
            self.log("train/max", batch.max(), on_step=False, on_epoch=True, reduce_fx="max")
            self.log("train/sum", float(i), on_step=False, on_epoch=True, reduce_fx="sum")
            self.log_dict({f"train/c{k}": batch[:, k].mean() for k in range(3)}, on_step=False, on_epoch=True)
            return loss

        def validation_step(self, batch, i):
            self.log("val/loss", self.layer(batch).square().mean(), batch_size=len(batch))

        def on_validation_epoch_end(self):
            self.log("round", float(self.current_epoch))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(torch.randn(40, 3, generator=torch.Generator().manual_seed(0)), 6)

        def val_dataloader(self):
            return torch.utils.data.DataLoader(torch.randn(20, 3, generator=torch.Generator().manual_seed(1)), 7)

    for mode, folder in zip(sys.argv[1::2], sys.argv[2::2]):  # Lightning's path first: the fast one stays once on
        if mode == "fast":
            from lightning_sfl.process.fast_logging import skip_redundant_metric_moves
            assert skip_redundant_metric_moves() and skip_redundant_metric_moves()  # idempotent
            assert _ResultMetric.to._lightning_sfl
        else:
            assert not getattr(_ResultMetric.to, "_lightning_sfl", False)
        torch.manual_seed(0)
        trainer = L.Trainer(max_epochs=3, logger=CSVLogger(folder, name="", version=""), log_every_n_steps=2,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(M())
        print(mode, sorted((k, float(v)) for k, v in trainer.callback_metrics.items()))
    """
)


def test_fit_logs_the_same_with_the_fast_path(tmp_path):
    """The same fit with Lightning's path, then (in the same process, once it is switched on) with the fast one."""
    modes = ("lightning", "fast")
    args = [arg for mode in modes for arg in (mode, str(tmp_path / mode))]
    proc = subprocess.run([sys.executable, "-c", FIT, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = dict(line.split(" ", 1) for line in proc.stdout.strip().splitlines()[-2:])
    out = {mode: (printed[mode], (tmp_path / mode / "metrics.csv").read_text()) for mode in modes}
    assert out["fast"] == out["lightning"]
    assert "train/loss_epoch" in out["fast"][1] and "val/loss" in out["fast"][1]


@pytest.mark.parametrize("classes", [3, 10])
def test_typed_table_is_the_table_wandb_builds(classes):
    wandb = pytest.importorskip("wandb")
    from lightning_sfl.wandb.payloads import per_class_payload, typed_table

    g = torch.Generator().manual_seed(classes)
    rows = [[c, float(torch.rand(1, generator=g)), int(torch.randint(0, 9, (1,), generator=g))] for c in range(classes)]
    rows[1][1] = float("nan")  # a class without test samples
    fast, reference = typed_table(["class", "accuracy", "support"], rows), wandb.Table(["class", "accuracy", "support"])
    for row in rows:
        reference.add_data(*row)
    assert fast.columns == reference.columns
    assert str(fast.data) == str(reference.data)  # (NaN != NaN)
    assert fast._column_types == reference._column_types
    assert repr(fast._to_table_json()) == repr(reference._to_table_json())
    with pytest.raises(TypeError, match="types of the first row"):
        typed_table(["a", "b"], [[1, "x"], [1.5, "y"]])
    payload = per_class_payload(torch.rand(classes).tolist(), torch.randint(0, 5, (classes, classes)).tolist(), 4)
    assert len(payload["per_class/table"].data) == classes and payload["round"] == 4.0
