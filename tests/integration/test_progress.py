"""The round-level progress bar advances once per round and shows the latest accuracy."""

from __future__ import annotations

import lightning as L

from lightning_sfl.algorithms import SCALA
from lightning_sfl.callbacks import CommunicationBytes, RoundProgressBar
from lightning_sfl.data import FederatedDataModule


def _fit(callbacks: list, local_iters: int = 2, **settings) -> L.Trainer:
    """SCALA on 8 digits clients with ``callbacks``, no logger, checkpoint or summary; the trainer it ran."""
    dm = FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)
    quiet = {"logger": False, "enable_checkpointing": False, "enable_model_summary": False}
    run = L.Trainer(callbacks=callbacks, **quiet, **settings)
    run.fit(SCALA(local_iters=local_iters, lr=0.05), dm)
    return run


def test_round_progress_bar_counts_rounds_and_shows_accuracy(capsys):
    bar = RoundProgressBar()
    trainer = _fit([bar, CommunicationBytes()], max_epochs=3)
    assert bar.train_progress_bar.total == 3 and bar.train_progress_bar.n == 3
    out = capsys.readouterr().out
    assert "Rounds" in out and "3/3" in out
    acc = float(trainer.callback_metrics["test/acc"])
    assert f"acc={acc:.3g}" in out
    assert "Validation" not in out  # per-round validation bars are hidden during fit


def test_the_total_follows_max_steps_when_it_ends_the_fit_first(capsys):
    bar = RoundProgressBar()
    trainer = _fit([bar], max_epochs=-1, max_steps=5)  # local_iters=2: rounds 1, 2 and the first step of round 3
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
    _fit([_Tick(clock, [0.5, 1.5, 1.0]), bar], local_iters=3, max_epochs=3)
    out = capsys.readouterr().out
    shown = {s for s in ("round 1:", "round 2: iteration 1/3", "round 3: iteration 1/3", "round 3: iteration 3/3")
             if s in out}  # fmt: skip
    assert shown == set(), shown
    for s in ("round 2: iteration 2/3", "round 2: iteration 3/3", "round 3: iteration 2/3"):
        assert s in out, (s, out)
    assert bar.train_progress_bar.desc.startswith("Rounds") and out.rstrip().endswith("]")
    assert "Rounds: 100%" in out.split("round 3: iteration 2/3")[-1]  # the last round ended as a round of the bar


# The bar ending its line before a fatal error's line is checked through the console script, with W&B on, in
# tests/integration/test_bad_inputs.py
# (test_a_divergence_ends_with_one_error_line_of_its_own_that_says_no_checkpoint_was_written).
