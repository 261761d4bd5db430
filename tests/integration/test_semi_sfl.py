"""Semi-SFL end to end: no labels leave the clients, the teachers follow their recurrences, K_s adapts, a resumed run
equals the uninterrupted one, and bad settings are one-line errors."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from _helpers import flat_params, quiet_trainer
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_sfl.algorithms import SemiSFL, SupervisedOnly
from lightning_sfl.callbacks import CommunicationBytes
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.errors import ConfigError
from lightning_sfl.runtime.state import banks_left_out

SMALL = dict(
    supervised_steps=3,
    local_iters=2,
    labelled_batch_size=16,
    client_batch_size=8,
    queue_size=32,
    threshold=0.5,
    ks_window=1,
    ks_milestone_every=1,
    lr=0.05,
    momentum=0.9,
)


def _dm(**kw):
    args = dict(dataset="digits", num_clients=6, partition="dirichlet", beta=0.3, participation=0.5, batch_size=24)
    return FederatedDataModule(**{**args, "labelled_per_class": 5, "seed": 1, **kw})


def _fit(rounds, cls=SemiSFL, folder=None, ckpt_path=None, **kwargs):
    torch.manual_seed(0)
    unused = {*cls.unused_options(), *(() if issubclass(cls, SemiSFL) else ("queue_size",))}  # refused by cls
    small = {k: v for k, v in SMALL.items() if k not in unused}
    model = cls(**{**small, **kwargs})
    callbacks = [CommunicationBytes()]
    if folder is not None:
        callbacks.append(ModelCheckpoint(dirpath=folder, save_last=True))
    trainer = quiet_trainer(rounds, callbacks=callbacks, enable_checkpointing=folder is not None)
    trainer.fit(model, _dm(), ckpt_path=ckpt_path)
    return model, trainer


def test_labels_never_travel_and_the_queue_fills():
    seen = []

    class Spy(SemiSFL):
        def unlabelled_step(self, step):
            seen.append(step.y)
            return super().unlabelled_step(step)

        def on_round_end(self, event):
            totals = event.ledger.totals()
            seen.append(totals)
            super().on_round_end(event)

    model, trainer = _fit(2, cls=Spy)
    steps = [s for s in seen if not isinstance(s, dict)]
    assert len(steps) == 4 and all(y is None for y in steps)
    for totals in (s for s in seen if isinstance(s, dict)):
        assert "up/labels" not in totals and totals["up/activations"] > 0 and totals["down/gradients"] > 0
        assert totals["down/client_half"] > 0 and totals["up/client_half"] > 0
    assert int((model.queue_labels >= 0).sum()) == min(32, 4 * 3 * 8)  # 3 clients × 8 rows × 4 steps
    assert "train/mask_rate" in trainer.callback_metrics and "train/K_s" in trainer.callback_metrics


def test_pseudo_label_accuracy_is_measured_against_the_data_modules_labels():
    """The callback's accuracy equals the fraction of the method's confident pseudo-labels (its step's outputs) that
    match the true labels of the step's rows, recomputed here from the same steps."""
    from lightning_sfl.callbacks import PseudoLabelQuality

    records = []

    class Spy(SemiSFL):
        def unlabelled_step(self, step):
            out = super().unlabelled_step(step)
            records.append((step.rows.clone(), out["pseudo_labels"].clone(), out["mask"].clone()))
            return out

    torch.manual_seed(0)
    model, dm = Spy(**SMALL), _dm()
    trainer = quiet_trainer(1, callbacks=[PseudoLabelQuality()])
    trainer.fit(model, dm)
    truth = [dm.splits.train_y[rows] for rows, _, _ in records]
    hits = sum(int(((pl == y) & m).sum()) for (_, pl, m), y in zip(records, truth))
    confident = sum(int(m.sum()) for _, _, m in records)
    every = sum(int((pl == y).sum()) for (_, pl, _), y in zip(records, truth)) / sum(len(y) for y in truth)
    assert float(trainer.callback_metrics["train/pseudo_label_acc_all"]) == pytest.approx(every, abs=1e-6)
    if confident:
        assert float(trainer.callback_metrics["train/pseudo_label_acc"]) == pytest.approx(hits / confident, abs=1e-6)


def test_teacher_is_the_ema_of_the_student_over_supervised_steps():
    """With no unlabelled phase, after t supervised steps the teacher equals the EMA recurrence replayed on the
    student's weights after each step (warm-up γ_t = min(1 − 1/(t+1), γ))."""
    snapshots = []

    class Spy(SupervisedOnly):
        def supervised_step(self, step):
            super().supervised_step(step)
            snapshots.append(flat_params(self.server.net).clone())

    model, _ = _fit(2, cls=Spy, ema=0.9)
    teacher = snapshots[0]
    for t, w in enumerate(snapshots[1:], start=1):
        gamma = min(1 - 1 / (t + 1), 0.9)
        teacher = gamma * teacher + (1 - gamma) * w
    torch.testing.assert_close(flat_params(model.teacher_server), teacher)
    assert int(model.teacher_updates) == len(snapshots) == 6


def test_frozen_client_teacher_keeps_the_downloaded_half():
    halves = {}

    class Spy(SemiSFL):
        def aggregate(self, step):
            bank = self.client_banks["teacher"]
            halves[self.client_teacher] = [flat_params(bank.slots[i]) for i in range(len(bank))]
            halves["global"] = flat_params(self.teacher_client)
            super().aggregate(step)

    _fit(1, cls=Spy, client_teacher="frozen")
    assert all(torch.equal(h, halves["global"]) for h in halves["frozen"])
    _fit(1, cls=Spy, client_teacher="ema")
    assert not any(torch.equal(h, halves["global"]) for h in halves["ema"])


def test_resume_mid_run_is_exact(tmp_path):
    """Teacher, queue, K_s and its loss history: 4 rounds equal 2 rounds, then a resume from last.ckpt for 2 more."""
    full, _ = _fit(4)
    _fit(2, folder=tmp_path)
    resumed, _ = _fit(4, folder=tmp_path, ckpt_path=str(tmp_path / "last.ckpt"))
    for (name, a), b in zip(full.state_dict().items(), resumed.state_dict().values()):
        if not name.startswith(banks_left_out(full)):
            assert torch.equal(a, b), name
    assert full.schedule.supervised.state_dict() == resumed.schedule.supervised.state_dict()
    assert len(resumed.schedule.supervised.losses) == 4  # the history of the first 2 rounds came from the checkpoint


def test_k_s_is_adapted_from_the_supervised_loss():
    model, _ = _fit(3)
    control = model.schedule.supervised
    assert len(control.losses) == 3 and all(v > 0 for v in control.losses)
    replay = type(control)(initial=3, window=1, milestone_every=1)
    assert [replay.observe(v) for v in control.losses][-1] == control.steps


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"threshold": 0.0}, r"threshold=0.0 \(τ\) must be in \(0, 1\]"),
        ({"threshold": 1.5}, r"threshold=1.5 \(τ\) must be in \(0, 1\]"),
        ({"local_iters": 0}, r"unlabelled_steps=0 \(K_u\) must be a whole number >= 1|local_iters=0 must be >= 1"),
        ({"client_teacher": "x"}, "client_teacher='x' must be one of: ema, frozen"),
    ],
)
def test_bad_settings_are_one_line_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SemiSFL(**kwargs)


def test_missing_or_oversized_labelled_set_is_a_one_line_error():
    model = SemiSFL(**SMALL)
    with pytest.raises(ConfigError, match="needs a labelled server set: set --data.labelled_per_class"):
        L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False).fit(model, _dm(labelled_per_class=0))
    with pytest.raises(ConfigError, match="labelled_per_class=1000 leaves no unlabelled data"):
        _dm(labelled_per_class=1000).check()
