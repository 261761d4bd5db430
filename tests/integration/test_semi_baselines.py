"""Semi-SFL's baselines: FedSwitch-SL, FedSwitch and SemiFL. Pure parts against loops written here; identities with
Semi-SFL; what travels (full-model methods send no activations); bad settings."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from _helpers import flat_params, quiet_trainer

from lightning_sfl.algorithms import FedSwitch, FedSwitchSL, SemiFL, SemiSFL
from lightning_sfl.algorithms.semi_baselines import client_means, mixup_rows, same_client_partners, switch_logits
from lightning_sfl.callbacks import CommunicationBytes
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.errors import ConfigError

SMALL = dict(
    supervised_steps=2,
    local_iters=2,
    labelled_batch_size=16,
    client_batch_size=8,
    threshold=0.3,
    lr=0.05,
    momentum=0.9,
)


def _fit(cls, rounds=2, **kwargs):
    torch.manual_seed(0)
    queue = {"queue_size": 32} if issubclass(cls, SemiSFL) else {}  # Semi-SFL's queue of teacher projections
    model = cls(**{**SMALL, **queue, **kwargs})
    dm = FederatedDataModule(
        dataset="digits", num_clients=6, partition="dirichlet", beta=0.3, participation=0.5, batch_size=24,
        labelled_per_class=5, seed=1,
    )  # fmt: skip
    trainer = quiet_trainer(rounds, callbacks=[CommunicationBytes()])
    trainer.fit(model, dm)
    return model, model.ledger.totals()


# ----------------------------------------------------------------------------------------------- pure parts
def test_switch_logits_takes_each_clients_more_confident_model():
    g = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(7, 4, generator=g) * 3, torch.randn(7, 4, generator=g) * 3
    owner = torch.tensor([0, 0, 1, 1, 1, 2, 2])
    logits, use_student = switch_logits(student, teacher, owner, 3)
    for k in range(3):
        rows = [i for i in range(7) if owner[i] == k]
        s = sum(student[i].softmax(0).max() for i in rows) / len(rows)
        t = sum(teacher[i].softmax(0).max() for i in rows) / len(rows)
        assert bool(use_student[k]) == bool(s > t)
        for i in rows:
            assert torch.equal(logits[i], student[i] if s > t else teacher[i])
    assert 0 < int(use_student.sum()) < 3, "the case should have both outcomes"
    same, _ = switch_logits(teacher, teacher, owner, 3)
    assert torch.equal(same, teacher)  # a tie keeps the teacher


def test_client_means_against_a_loop():
    values, owner = torch.tensor([1.0, 2.0, 6.0, 4.0]), torch.tensor([1, 1, 1, 2])
    want = [0.0, 3.0, 4.0]  # client 0 has no rows: 0
    assert client_means(values, owner, 3).tolist() == want


def test_mix_partners_stay_within_their_client_and_the_mix_loss_matches_a_loop():
    sizes = torch.tensor([3, 1, 4])
    owner = torch.repeat_interleave(torch.arange(3), sizes)
    partner = same_client_partners(sizes, owner, torch.Generator().manual_seed(0))
    assert torch.equal(owner[partner], owner)
    many = torch.cat([same_client_partners(sizes, owner, torch.Generator().manual_seed(s)) for s in range(50)])
    assert set(many[:1].tolist()) <= {0, 1, 2} and set(many.tolist()) == set(range(8))  # every row gets drawn
    g = torch.Generator().manual_seed(1)
    logits, labels, lam = torch.randn(8, 5, generator=g), torch.randint(0, 5, (8,), generator=g), torch.rand(8)
    rows = mixup_rows(logits, labels, partner, lam)
    for i in range(8):
        logp = logits[i].log_softmax(0)
        want = -(lam[i] * logp[labels[i]] + (1 - lam[i]) * logp[labels[partner[i]]])
        torch.testing.assert_close(rows[i], want)


# ----------------------------------------------------------------------------------------------- identities
def _students_and_teachers(model):
    return torch.cat([flat_params(m) for m in (model.client, model.server, model.teacher_client, model.teacher_server)])


def test_fedswitch_sl_without_switching_is_semi_sfl_without_its_contrastive_terms():
    """FedSwitch-SL is the semi-supervised base with a labeller: without switching it is Semi-SFL without eqs. 3 and 5
    (whose projection head then trains on nothing), bitwise."""
    gentle = dict(threshold=0.5, lr=0.02, momentum=0.0)  # the student is more confident than its lagging teacher
    a, _ = _fit(FedSwitchSL, switching="off", **gentle)
    b, _ = _fit(SemiSFL, contrastive=False, **gentle)
    torch.testing.assert_close(_students_and_teachers(a), _students_and_teachers(b), rtol=0, atol=0)
    c, _ = _fit(FedSwitchSL, **gentle)
    assert not torch.equal(_students_and_teachers(a), _students_and_teachers(c)), "switching changed nothing"


def test_split_methods_send_activations_and_full_model_methods_only_models():
    _, split = _fit(FedSwitchSL)
    _, plain = _fit(SemiSFL, contrastive=False)
    assert split["up/activations"] == pytest.approx(1.5 * plain["up/activations"])  # + the student's view
    for cls in (FedSwitch, SemiFL):
        _, totals = _fit(cls)
        assert not any(k.endswith(("activations", "gradients")) for k in totals), (cls.__name__, totals)
        assert totals["up/full_model"] > 0 and totals["down/full_model"] > 0
    _, fedswitch = _fit(FedSwitch)
    _, semifl = _fit(SemiFL)  # SemiFL's clients download one model (their labeller is it), FedSwitch's two
    assert fedswitch["down/full_model"] == 2 * semifl["down/full_model"]


def test_semifl_labels_with_the_model_the_clients_received():
    """SemiFL's labeller is the global model after the server's training, frozen through the clients' steps."""
    received = []

    class Spy(SemiFL):
        def download(self):
            super().download()
            received.append(flat_params(self.client.net))

        def aggregate(self, step):
            slot = self.client_banks["teacher"].snapshot(0)
            received.append(torch.cat([v.reshape(-1) for v in slot.values()]))
            super().aggregate(step)

    model, _ = _fit(Spy, rounds=1)
    torch.testing.assert_close(received[1], received[0], rtol=0, atol=0)
    assert model.client_teacher == "frozen" and model.ema == 0.0
    torch.testing.assert_close(flat_params(model.teacher_client), received[0], rtol=0, atol=0)  # evaluated model


def test_semifl_global_optimiser_is_momentum_sgd_on_the_pseudo_gradient():
    """Round ``h``: ``m_h = β·m_{h−1} + (mean_k x_k − x)``, ``x ← x + η·m_h``, the buffer carried across rounds."""
    seen = {"before": [], "mean": [], "after": []}

    class Trace(SemiFL):
        def aggregate_slots(self, *args, **kwargs):  # the plain unweighted mean of the clients' models
            super().aggregate_slots(*args, **kwargs)
            seen["mean"].append(flat_params(self.client.net))

        def aggregate(self, step):
            seen["before"].append(flat_params(self.client.net))
            super().aggregate(step)
            seen["after"].append(flat_params(self.client.net))

    beta, lr = 0.5, 0.7
    _fit(Trace, rounds=2, global_momentum=beta, global_lr=lr)
    m = torch.zeros_like(seen["before"][0])
    for before, mean, after in zip(seen["before"], seen["mean"], seen["after"]):
        m = beta * m + (mean - before)
        torch.testing.assert_close(after, before + lr * m, rtol=1e-6, atol=1e-7)
    assert not torch.allclose(seen["after"][1], seen["mean"][1])  # the second round differs from the plain mean
    plain, _ = _fit(SemiFL, global_momentum=0.0, grad_clip=None)  # the earlier SemiFL: the plain mean, no clipping
    default, _ = _fit(SemiFL)  # the authors' choices: clip at 1, momentum 0.5
    assert default.grad_clip == 1.0 and default.global_momentum == 0.5
    assert not torch.equal(flat_params(plain), flat_params(default))


def test_every_baseline_learns_on_digits():
    for cls in (FedSwitchSL, FedSwitch, SemiFL):
        model, _ = _fit(cls, rounds=3)
        assert torch.isfinite(flat_params(model)).all()


@pytest.mark.parametrize(
    "cls,kwargs,match",
    [
        (FedSwitchSL, {"switching": "always"}, "switching"),
        (FedSwitch, {"switching": "x"}, "switching"),
        (SemiFL, {"mix_alpha": 0.0}, "mix_alpha"),
        (SemiFL, {"threshold": 1.5}, "threshold"),
        (SemiFL, {"global_momentum": 1.0}, "global_momentum=1.0"),
        (SemiFL, {"global_lr": 0.0}, "global_lr=0.0"),
        (SemiSFL, {"proj_hidden": 0}, "proj_hidden"),
        (SemiSFL, {"lr_min": -0.1}, "lr_min"),
    ],
)
def test_bad_settings_are_one_line_errors(cls, kwargs, match):
    with pytest.raises(ConfigError, match=match) as err:
        cls(**kwargs)
    assert "\n" not in str(err.value)


def test_cosine_schedule_sets_each_rounds_learning_rate():
    from lightning_sfl.algorithms.semi_sfl import cosine_lr

    seen = []

    class Spy(SemiSFL):
        def supervised_step(self, step):
            seen.append((step.round, self.optimizers().optimizer.param_groups[0]["lr"]))
            return super().supervised_step(step)

    _fit(Spy, rounds=3, lr_schedule="cosine", lr_min=0.005)
    for h, lr in seen:
        assert lr == pytest.approx(0.005 + (0.05 - 0.005) * (1 + math.cos(math.pi * h / 3)) / 2)
        assert lr == pytest.approx(cosine_lr(h, 3, 0.05, 0.005))
    assert {h for h, _ in seen} == {0, 1, 2}
    with pytest.raises(ConfigError, match="lr_schedule"):
        SemiSFL(lr_schedule="step")


def test_static_batch_norm_is_the_average_of_the_batch_statistics():
    from torch import nn

    from lightning_sfl.algorithms.semi_baselines import static_batch_norm_

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU())
    model[1].running_mean.fill_(9.0)  # stale statistics are forgotten
    batches = [torch.randn(5, 1, 6, 6) + i for i in range(3)]
    model.eval()
    assert static_batch_norm_(model, batches) == 1
    assert not model.training and model[1].momentum == 0.1  # mode and momentum restored
    with torch.no_grad():
        features = [model[0](x) for x in batches]
    means = torch.stack([f.mean(dim=(0, 2, 3)) for f in features]).mean(dim=0)
    variances = torch.stack([f.var(dim=(0, 2, 3), unbiased=True) for f in features]).mean(dim=0)
    torch.testing.assert_close(model[1].running_mean, means)
    torch.testing.assert_close(model[1].running_var, variances)
    assert static_batch_norm_(nn.Linear(2, 2), batches) == 0


def test_semifl_recomputes_batch_norm_before_sending_and_testing():
    """With a BatchNorm model the clients' labeller and the evaluated model carry the statistics of the whole
    training set (sBN) and the clients label in eval mode; without sBN, the running statistics of training."""
    from lightning_sfl.algorithms.semi_baselines import static_batch_norm_

    labelled_in = []

    class Spy(SemiFL):
        def pseudo_label(self, step, weak, teacher_logits):
            labelled_in.append(self.client_banks["teacher"].training)
            return super().pseudo_label(step, weak, teacher_logits)

    model, _ = _fit(Spy, rounds=1, arch="resnet18")
    stats = model.federation.stats
    rows = torch.cat([stats.labelled, *stats.shards]).sort().values
    reference = copy.deepcopy(model.teacher_client)
    static_batch_norm_(reference, (model.federation.data.train_inputs(r, torch.device("cpu")) for r in rows.split(250)))
    received = model.client_banks["teacher"].slots[0]
    for name, buffer in reference.named_buffers():
        torch.testing.assert_close(model.teacher_client.get_buffer(name), buffer)  # the evaluated model
        torch.testing.assert_close(received.get_buffer(name), buffer)  # what the clients label with
    assert labelled_in and not any(labelled_in)
    plain, _ = _fit(SemiFL, rounds=1, arch="resnet18", static_bn=False)
    bn = [b for n, b in plain.teacher_client.named_buffers() if n.endswith("running_mean")][0]
    assert not torch.allclose(bn, [b for n, b in reference.named_buffers() if n.endswith("running_mean")][0])


def test_a_baselines_checkpoint_with_semi_sfls_unused_head_and_queue_still_resumes(tmp_path):
    """Before the baselines had a base of their own they held Semi-SFL's projection head, queue and options, unused: a
    checkpoint of theirs with those still builds the method (the options dropped) and resumes (the tensors dropped)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from lightning_sfl.checkpoint import legacy_hyperparameters

    torch.manual_seed(0)
    model = FedSwitch(**SMALL)
    dm = lambda: FederatedDataModule(  # noqa: E731
        dataset="digits", num_clients=6, partition="dirichlet", beta=0.3, participation=0.5, batch_size=24,
        labelled_per_class=5, seed=1,
    )  # fmt: skip
    saving = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    quiet_trainer(1, callbacks=[saving], enable_checkpointing=True).fit(model, dm())
    old = torch.load(tmp_path / "last.ckpt", weights_only=False)
    old["hyper_parameters"].update(temperature=0.2, proj_dim=4, queue_size=8, contrastive=False)
    old["state_dict"].update({"projection.1.weight": torch.zeros(4, 4), "queue_keys": torch.zeros(8, 4)})
    torch.save(old, tmp_path / "old.ckpt")
    resumed = FedSwitch(**legacy_hyperparameters(FedSwitch, old["hyper_parameters"]))
    again = ModelCheckpoint(dirpath=tmp_path / "resumed")
    quiet_trainer(2, callbacks=[again], enable_checkpointing=True).fit(resumed, dm(), ckpt_path=tmp_path / "old.ckpt")
    assert resumed.current_epoch == 2 and not hasattr(resumed, "projection")
