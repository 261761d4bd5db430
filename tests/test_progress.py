"""The round-level progress bar advances once per round and shows the latest accuracy."""

from __future__ import annotations

import lightning as L

from lightning_sfl.algorithms import SCALA
from lightning_sfl.callbacks import CommunicationBytes, RoundProgressBar
from lightning_sfl.data import FederatedDataModule


def test_round_progress_bar_counts_rounds_and_shows_accuracy(capsys):
    bar = RoundProgressBar()
    dm = FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)
    trainer = L.Trainer(
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[bar, CommunicationBytes()],
    )
    trainer.fit(SCALA(local_iters=2, lr=0.05), dm)
    assert bar.train_progress_bar.total == 3 and bar.train_progress_bar.n == 3
    out = capsys.readouterr().out
    assert "Rounds" in out and "3/3" in out
    acc = float(trainer.callback_metrics["test/acc"])
    assert f"acc={acc:.3g}" in out
    assert "Validation" not in out  # per-round validation bars are hidden during fit


def test_the_total_follows_max_steps_when_it_ends_the_fit_first(capsys):
    bar = RoundProgressBar()
    dm = FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)
    trainer = L.Trainer(
        max_epochs=-1,
        max_steps=5,  # local_iters=2: rounds 1, 2 and the first step of round 3
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[bar],
    )
    trainer.fit(SCALA(local_iters=2, lr=0.05), dm)
    assert bar.train_progress_bar.total == 3 and trainer.global_step == 5
    assert "/3 [" in capsys.readouterr().out
