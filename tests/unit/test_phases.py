"""Semi-SFL's data and round: the labelled server set, the phased schedule, and unlabelled steps without labels."""

from __future__ import annotations

import pytest
import torch

from lightning_sfl.data import FederatedDataModule
from lightning_sfl.data.partition import labelled_split
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.ks_control import SupervisedSteps
from lightning_sfl.loop.phases import Phases
from lightning_sfl.loop.selection import UniformSelection


def test_labelled_split_is_class_balanced_disjoint_and_seeded():
    labels = torch.arange(10).repeat_interleave(torch.tensor([5, 6, 7, 8, 9, 10, 11, 12, 13, 14]))
    labelled, rest = labelled_split(labels, 3, seed=4)
    assert torch.bincount(labels[labelled]).tolist() == [3] * 10
    assert torch.equal(torch.cat([labelled, rest]).sort().values, torch.arange(len(labels)))
    again, _ = labelled_split(labels, 3, seed=4)
    other, _ = labelled_split(labels, 3, seed=5)
    assert torch.equal(labelled, again) and not torch.equal(labelled, other)
    with pytest.raises(ConfigError, match="labelled_per_class=5 leaves no unlabelled data of the smallest class"):
        labelled_split(labels, 5, seed=0)


def _dm(**kw):
    return FederatedDataModule(
        dataset="digits",
        num_clients=6,
        partition="iid",
        participation=0.5,
        batch_size=24,
        labelled_per_class=5,
        seed=2,
        **kw,
    )


def test_clients_never_hold_the_labelled_rows():
    dm = _dm()
    labelled = set(dm.labelled_indices.tolist())
    held = torch.cat(dm.client_indices)
    assert len(labelled) == 50 and not labelled & set(held.tolist())
    assert len(held) + len(labelled) == len(dm.splits.train_y)
    assert torch.equal(dm.client_stats.labelled, dm.labelled_indices)
    assert FederatedDataModule(dataset="digits").client_stats.labelled is None
    with pytest.raises(ConfigError, match="labelled_per_class=-1 must be a whole number >= 0"):
        FederatedDataModule(labelled_per_class=-1)


def _phases(k_s=3, k_u=2):
    return Phases(SupervisedSteps(initial=k_s, window=1, milestone_every=1), k_u, 16, 8, UniformSelection())


def test_a_round_is_k_s_supervised_steps_then_k_u_unlabelled_steps_without_labels():
    dm, schedule = _dm(), _phases()
    steps = dm.plan(0, schedule)
    assert [s.kind for s in steps] == ["supervised"] * 3 + ["unlabelled"] * 2
    assert [s.index for s in steps] == list(range(5)) and [s.round_end for s in steps] == [False] * 4 + [True]
    labelled = set(dm.labelled_indices.tolist())
    for s in steps[:3]:
        assert len(s.clients) == 0 and set(s.rows.tolist()) <= labelled and len(s.y) == 16
        assert torch.equal(s.y, dm.splits.train_y[s.rows])
    for s in steps[3:]:
        assert s.y is None and s.label_counts is None  # the method cannot read the clients' labels
        assert len(s.clients) == 3 and s.sizes.tolist() == [8, 8, 8] and s.num_rows == 24 and len(s.x) == 24
        for k, block in zip(s.clients.tolist(), s.rows.split(s.sizes.tolist())):
            assert set(block.tolist()) <= set(dm.client_indices[k].tolist())


def test_k_s_follows_the_controller_and_resumes():
    dm, schedule = _dm(), _phases(k_s=4)
    dm.plan(0, schedule)
    assert schedule.observe_supervised_loss(1.0) == 4  # the first loss: no Δ yet
    assert schedule.observe_supervised_loss(1.0) == 2  # Δ = 0 < ϱ1: halve
    state = schedule.state_dict()
    plan_a = dm.plan(1, schedule)
    assert sum(s.kind == "supervised" for s in plan_a) == 2
    resumed = _phases(k_s=4)
    resumed.load_state_dict(state)
    plan_b = dm.plan(1, resumed)
    assert [(s.kind, s.rows.tolist()) for s in plan_a] == [(s.kind, s.rows.tolist()) for s in plan_b]


def test_phases_errors_are_one_line():
    with pytest.raises(ConfigError, match=r"unlabelled_steps=0 \(K_u\) must be a whole number >= 1"):
        _phases(k_u=0)
    with pytest.raises(ConfigError, match="needs a labelled server set"):
        FederatedDataModule(dataset="digits").plan(0, _phases())
    with pytest.raises(ConfigError, match="needs a labelled server set"):  # checked before a run (the CLI calls it)
        _phases().check(FederatedDataModule(dataset="digits").client_stats)
    _phases().check(FederatedDataModule(dataset="digits", labelled_per_class=2).client_stats)
