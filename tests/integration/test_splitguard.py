"""SplitGuard: its score against the authors' formula written in numpy, an honest server scored high and FSHA's hijacker
low on a fixed seed (a margin), training left exactly as it is without the probe, and one-line errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _helpers import csv_rounds, extended_params, flat_params, quiet_trainer, small_digits
from lightning.pytorch.loggers import CSVLogger

from lightning_sfl.algorithms import FSHA, SemiSFL, SFLLocalLoss, SplitFedV1
from lightning_sfl.callbacks import SplitGuard
from lightning_sfl.callbacks.splitguard import probes
from lightning_sfl.defences import ActivationNoise
from lightning_sfl.errors import ConfigError
from lightning_sfl.privacy.splitguard import shifted_labels, splitguard_score


def reference_score(fakes, r1, r2, mult=5.0, power=2.0) -> float:
    """``sg_score`` of the authors' notebook, written again from its description with numpy lists."""

    def angle(u, v):
        return math.acos(max(-1.0, min(1.0, float(np.dot(u, v) / (np.linalg.norm(u) * np.linalg.norm(v))))))

    f_mean, c_mean, r_mean = (sum(vs) / len(vs) for vs in (fakes, r1, r2))
    f_mag, c_mag, r_mag = (sum(np.linalg.norm(v) for v in vs) / len(vs) for vs in (fakes, r1, r2))
    cr_mag = (c_mag + r_mag) / 2
    div = abs(f_mag - cr_mag) + abs(c_mag - r_mag)
    x = angle(f_mean, (c_mean + r_mean) / 2) * abs(f_mag - cr_mag) / div
    x -= angle(c_mean, r_mean) * abs(r_mag - c_mag) / div
    return (1 / (1 + math.exp(-mult * x))) ** power


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_score_matches_the_authors_formula(seed):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(30, generator=g, dtype=torch.float64)
    fake = torch.randn(3, 30, generator=g, dtype=torch.float64) * (seed + 1) + base * (-1) ** seed
    r1 = torch.randn(4, 30, generator=g, dtype=torch.float64) * 0.5 + base
    r2 = torch.randn(5, 30, generator=g, dtype=torch.float64) * 0.5 + base
    want = reference_score(list(fake.numpy()), list(r1.numpy()), list(r2.numpy()))
    assert float(splitguard_score(fake, r1, r2)) == pytest.approx(want, rel=1e-10)


def test_score_edges_and_labels():
    same = torch.ones(2, 4, dtype=torch.float64)
    # nothing tells the fakes apart: sigmoid(0)²
    assert float(splitguard_score(same, same, same)) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="fake must be a non-empty"):
        splitguard_score(torch.zeros(0, 4), same, same)
    y = torch.arange(10)
    for shift in range(1, 10):
        assert (shifted_labels(y, shift, 10) != y).all()
    with pytest.raises(ValueError, match="shift=10"):
        shifted_labels(y, 10, 10)


def _fit(model, tmp_path, name: str, rounds: int = 3, probe: SplitGuard | None = None):
    torch.manual_seed(0)
    callbacks = [] if probe is None else [probe]
    logger = CSVLogger(tmp_path / name, name="csv", version=0)
    trainer = quiet_trainer(rounds, logger=logger, callbacks=callbacks, log_every_n_steps=1)
    trainer.fit(model, small_digits())
    return model, csv_rounds(tmp_path / name)


def test_an_honest_server_scores_high_and_fsha_low(tmp_path):
    torch.manual_seed(0)
    _, honest = _fit(SplitFedV1(local_iters=2, lr=0.05), tmp_path, "honest", probe=SplitGuard(every_n_rounds=1))
    torch.manual_seed(0)
    _, hijack = _fit(
        FSHA(local_iters=2, lr=1e-4, public_size=200, scored_images=32),
        tmp_path,
        "fsha",
        probe=SplitGuard(every_n_rounds=1),
    )
    honest_scores = [float(r["splitguard/score"]) for r in honest.values() if "splitguard/score" in r]
    hijack_scores = [float(r["splitguard/score"]) for r in hijack.values() if "splitguard/score" in r]
    assert len(honest_scores) == len(hijack_scores) == 3
    # one round's probe is noisy (4 fake batches of small shards): the margin is on the mean over rounds
    assert sum(honest_scores) / 3 > 0.7 and max(hijack_scores) < 0.4, (honest_scores, hijack_scores)
    assert min(honest_scores) > max(hijack_scores)


def test_the_probe_leaves_training_unchanged(tmp_path):
    """Same weights, buffers and accuracy with and without SplitGuard (also with noise on the activations)."""
    runs = []
    for name, probe in (("plain", None), ("probed", SplitGuard(every_n_rounds=1, batch_size=16))):
        torch.manual_seed(0)
        model = SplitFedV1(local_iters=2, lr=0.05, defences=[ActivationNoise(scale=0.1)])
        model, rows = _fit(model, tmp_path, name, rounds=2, probe=probe)
        runs.append((flat_params(model), [b.clone() for b in model.buffers()], rows[1]["test/acc"]))
    (p0, b0, acc0), (p1, b1, acc1) = runs
    assert torch.equal(p0, p1) and all(torch.equal(x, y) for x, y in zip(b0, b1)) and acc0 == acc1


@pytest.mark.parametrize("cls", [SFLLocalLoss, SemiSFL])
def test_methods_it_cannot_probe_are_refused_in_one_line(cls, tmp_path):
    model = cls(local_iters=1) if cls is SFLLocalLoss else cls(supervised_steps=1, labelled_batch_size=8)
    data = small_digits() if cls is SFLLocalLoss else None
    trainer = quiet_trainer(1, callbacks=[SplitGuard(every_n_rounds=1)])
    if data is None:
        from lightning_sfl.data import FederatedDataModule

        data = FederatedDataModule(dataset="digits", num_clients=8, alpha=2, batch_size=24, labelled_per_class=3)
    with pytest.raises(ConfigError, match=f"splitguard.every_n_rounds=1 needs a split method.*{cls.__name__} is not"):
        trainer.fit(model, data)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"regular_batches": 1}, "regular_batches=1 must be a whole number >= 2"),
        ({"fake_batches": 0}, "fake_batches=0 must be a whole number >= 1"),
        ({"every_n_rounds": -1}, "every_n_rounds=-1 must be a whole number >= 0"),
        ({"batch_size": 2.5}, "batch_size=2.5 must be a whole number >= 1"),
    ],
)
def test_bad_settings_are_one_line_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        SplitGuard(**kwargs)


def _probed_methods():
    from lightning_sfl.algorithms import REGISTRY

    return sorted(n for n, e in REGISTRY.items() if e.family != "semi" and e.cls.has_server_half)


#: SCALA-PE (~11 s on two cores: its decoders' warm-up) with ``-m extended``; every other split method in CI.
@pytest.mark.parametrize("name", extended_params(_probed_methods(), {"scala_pe"}))
def test_every_split_method_is_probed_or_refused(name, tmp_path):
    """Every registered method with a server half: one probed round gives a score in [0, 1], or a one-line refusal;
    all but SFLLocalLoss and SplitFedV3 are probed."""
    from _helpers import data_kwargs, method_kwargs

    from lightning_sfl.algorithms import REGISTRY
    from lightning_sfl.data import FederatedDataModule

    cls = REGISTRY[name].cls
    torch.manual_seed(0)
    model = cls(**method_kwargs(name, local_iters=1, lr=0.05))
    data = FederatedDataModule(
        dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1, **data_kwargs(name)
    )
    logger = CSVLogger(tmp_path, name="csv", version=0)
    probe = SplitGuard(every_n_rounds=1, fake_batches=1, regular_batches=2, batch_size=16, max_clients=2)
    trainer = quiet_trainer(1, logger=logger, callbacks=[probe], log_every_n_steps=1)
    if not probes(model):  # SFLLocalLoss (no gradient comes down), SplitFedV3 (clients keep their halves)
        with pytest.raises(ConfigError, match=f"{cls.__name__} is not one"):
            trainer.fit(model, data)
        return
    assert name not in ("sfl_local_loss", "splitfedv3")
    trainer.fit(model, data)
    score = float(csv_rounds(tmp_path)[0]["splitguard/score"])
    assert 0.0 <= score <= 1.0
