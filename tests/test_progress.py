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


class _Clock:
    """The time the bar reads: advanced by :class:`_Tick` before each local iteration, by ``step_s[round]``."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Tick(L.Callback):
    def __init__(self, clock: _Clock, step_s: list[float]) -> None:
        self.clock, self.step_s = clock, step_s

    def on_train_batch_start(self, trainer, *_) -> None:
        self.clock.now += self.step_s[trainer.current_epoch]


def test_a_long_round_shows_its_local_iterations(capsys):
    """Three rounds of 3 local iterations lasting 0.5, 1.5 and 1.0 s each (a clock of the test's): the first round
    (1.5 s) shows none; the second shows iterations 2 and 3 (from 2 s into it); the third, iteration 2 only (the next
    comes 1 s later, before ``redraw_s``). The bar counts rounds again after each."""
    clock = _Clock()
    bar = RoundProgressBar(slow_round_s=2.0, redraw_s=1.5, clock=clock)
    dm = FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)
    trainer = L.Trainer(
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[_Tick(clock, [0.5, 1.5, 1.0]), bar],
    )
    trainer.fit(SCALA(local_iters=3, lr=0.05), dm)
    out = capsys.readouterr().out
    shown = {s for s in ("round 1:", "round 2: iteration 1/3", "round 3: iteration 1/3", "round 3: iteration 3/3")
             if s in out}  # fmt: skip
    assert shown == set(), shown
    for s in ("round 2: iteration 2/3", "round 2: iteration 3/3", "round 3: iteration 2/3"):
        assert s in out, (s, out)
    assert bar.train_progress_bar.desc.startswith("Rounds") and out.rstrip().endswith("]")
    assert "Rounds: 100%" in out.split("round 3: iteration 2/3")[-1]  # the last round ended as a round of the bar


def test_the_error_line_starts_a_line_of_its_own_after_the_bar(tmp_path):
    """A fit that stops on a non-finite activation with the bar on: the bar ends its line, the ``error:`` line is a
    line of its own (the last of the combined output)."""
    import subprocess
    import sys
    from pathlib import Path

    config = Path(__file__).resolve().parents[1] / "configs/digits/scala.yaml"
    cmd = [sys.executable, "-m", "lightning_sfl.cli", "fit", "--config", str(config), "--model.lr", "1e6"]
    cmd += ["--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "true", "--trainer.logger", "false"]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300, cwd=tmp_path)
    text = out.stdout.decode()  # as written: the bar's "\r" kept (universal newlines would make it a line break)
    lines = text.rstrip("\n").split("\n")
    assert out.returncode == 1, text[-3000:]
    assert "\rRounds" in text  # the bar was drawn
    assert lines[-1].startswith("error: non-finite activations in round 1, local iteration "), repr(text[-600:])
