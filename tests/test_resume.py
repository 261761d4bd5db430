"""Exact resume at round boundaries, for every registered algorithm: an interrupted run continued from its
last checkpoint ends with exactly the weights and metrics of an uninterrupted run."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from lightning_sfl.algorithms import ALGORITHMS
from lightning_sfl.callbacks import CommunicationBytes
from lightning_sfl.data import FederatedDataModule


def _dm() -> FederatedDataModule:
    return FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)


def _fit(name: str, rounds: int, folder: Path, ckpt_path: str | None = None):
    torch.manual_seed(0)
    model = ALGORITHMS[name](local_iters=2, lr=0.05, momentum=0.5)  # momentum: optimiser state matters
    trainer = L.Trainer(
        max_epochs=rounds,
        logger=CSVLogger(folder, name="csv", version=0),
        callbacks=[ModelCheckpoint(dirpath=folder / "ckpt", save_last=True), CommunicationBytes()],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, _dm(), ckpt_path=ckpt_path)
    return model, trainer


def _per_round(folder: Path) -> dict[int, dict[str, str]]:
    rows: dict[int, dict[str, str]] = {}
    with open(folder / "csv" / "version_0" / "metrics.csv") as f:
        for row in csv.DictReader(f):
            rows.setdefault(int(row["epoch"]), {}).update({k: v for k, v in row.items() if v != ""})
    return rows


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_resume_at_round_boundary_is_exact(name, tmp_path):
    full, _ = _fit(name, 4, tmp_path / "full")
    _fit(name, 2, tmp_path / "part")  # "interrupted" after round 2
    resumed, trainer = _fit(name, 4, tmp_path / "part", ckpt_path=str(tmp_path / "part" / "ckpt" / "last.ckpt"))
    assert trainer.current_epoch == 4
    for (n, a), b in zip(full.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), f"{name}: {n} differs after resume"
    want, got = _per_round(tmp_path / "full"), _per_round(tmp_path / "part")
    for epoch in (2, 3):
        for key in ("test/acc", "comm/cumulative_bytes", "train/server_loss"):
            assert got[epoch][key] == want[epoch][key], (name, epoch, key)
