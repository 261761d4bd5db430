"""FederatedDataModule: shards, per-round batches (eq. 3) and argument checks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from _helpers import round_steps

from lightning_sfl.data import FederatedDataModule
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.sampling import client_batch_sizes


@pytest.fixture(scope="module")
def dm() -> FederatedDataModule:
    dm = FederatedDataModule(
        dataset="digits", num_clients=20, partition="quantity", alpha=2, participation=0.25, batch_size=64, seed=0
    )
    return dm


def test_shards_sizes_and_label_distributions(dm):
    assert dm.num_classes == 10 and dm.input_shape == (1, 8, 8)
    assert len(dm.client_indices) == 20 and dm.client_sizes.sum() == len(dm.splits.train_y)
    for k in range(20):
        labels = dm.splits.train_y[dm.client_indices[k]]
        assert len(torch.unique(labels)) <= 2
        torch.testing.assert_close(
            dm.label_distribution[k], torch.bincount(labels, minlength=10).double() / len(labels)
        )


def test_round_steps_hold_every_selected_clients_minibatch(dm):
    steps = round_steps(dm, 3, local_iters=5)
    assert len(steps) == 5
    assert [(s.kind, s.round, s.index, s.round_start, s.round_end) for s in steps] == [
        ("local", 3, t, t == 0, t == 4) for t in range(5)
    ]
    clients, sizes = steps[0].clients, steps[0].sizes
    assert len(clients) == dm.clients_per_round == 5
    assert torch.equal(sizes, client_batch_sizes(dm.client_sizes[clients], 64))
    train_x = dm.splits.train_x.flatten(1)
    for b in steps:
        assert b.x.shape == (64, 1, 8, 8) and b.y.shape == (64,)
        assert torch.equal(b.clients, clients) and torch.equal(b.local_sizes, sizes)
        assert torch.equal(b.label_counts, torch.bincount(b.y, minlength=10))
        assert torch.equal(torch.bincount(b.owner, minlength=5), sizes)
        assert torch.equal(b.slots_tensor, torch.arange(5))  # client k of the round in slot k
        for s, k in enumerate(clients.tolist()):
            rows = b.x[b.owner == s].flatten(1)
            shard = train_x[dm.client_indices[k]]
            # every row of slot s is a sample of client k's shard with the right label
            assert all(((shard == r).all(dim=1)).any() for r in rows)
            assert set(b.y[b.owner == s].tolist()) <= set(dm.splits.train_y[dm.client_indices[k]].tolist())


def test_round_steps_are_deterministic_per_seed_and_round(dm):
    a, b = round_steps(dm, 7, 5), round_steps(dm, 7, 5)
    assert all(torch.equal(x.x, y.x) and torch.equal(x.y, y.y) for x, y in zip(a, b))
    c = round_steps(dm, 8, 5)
    assert not torch.equal(a[0].x, c[0].x)


def test_train_loader_executes_the_federations_schedule_for_the_trainers_round(dm):
    from lightning_sfl.loop import SyncRounds
    from lightning_sfl.loop.selection import UniformSelection

    class _T:
        current_epoch, global_rank, world_size = 4, 0, 1

    with pytest.raises(RuntimeError, match="runs a federation's schedule"):
        _ = dm.schedule
    dm.federate(SimpleNamespace(schedule=SyncRounds(5, UniformSelection())))  # the one part of it the loader reads
    dm.trainer = _T()
    try:
        loader = dm.train_dataloader()
        got = list(loader)
        assert len(loader) == 5
    finally:
        dm.trainer = None
    want = round_steps(dm, 4, 5)
    assert len(got) == 5 and all(torch.equal(g.x, w.x) for g, w in zip(got, want))


def test_client_stats_are_handed_over_once(dm):
    stats = dm.client_stats
    assert stats is dm.client_stats  # built once
    assert torch.equal(stats.sizes, dm.client_sizes) and torch.equal(stats.label_counts, dm.label_counts)
    assert (stats.num_clients, stats.num_classes, stats.clients_per_round, stats.batch_size) == (20, 10, 5, 64)
    assert torch.equal(stats.label_distribution, dm.label_distribution)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"dataset": "mnist"}, "dataset='mnist' is not one of: digits"),
        ({"partition": "random"}, "partition='random' is not one of: iid, quantity, dirichlet, shards"),
        ({"participation": 0.0}, r"participation=0.0 must be in \(0, 1\]"),
        ({"participation": 1.5}, r"participation=1.5 must be in \(0, 1\]"),
        ({"num_clients": 0}, "num_clients=0 must be >= 1"),
        ({"batch_size": 4}, "batch_size=4 is smaller than the 5 clients per round"),
        ({"partition": "dirichlet", "beta": 0.0}, "beta=0.0 must be > 0"),
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FederatedDataModule(**{"num_clients": 20, "participation": 0.25, **kwargs})


def test_shards_split_every_clients_rows_across_processes(dm):
    from lightning_sfl.data.datamodule import shard_step

    full = round_steps(dm, 2)[0]
    parts = [shard_step(full, r, 3) for r in range(3)]
    assert sum(len(p.y) for p in parts) == len(full.y)
    assert torch.equal(sum(p.local_sizes for p in parts), full.sizes)
    for p in parts:  # global counts stay, so losses and P_s are those of the whole batch
        assert torch.equal(p.sizes, full.sizes) and torch.equal(p.label_counts, full.label_counts)
        assert (p.local_sizes - full.sizes / 3).abs().max() < 1
        assert torch.equal(torch.bincount(p.owner, minlength=5), p.local_sizes)
    rows = torch.cat([p.x.flatten(1) for p in parts])
    assert sorted(map(tuple, rows.tolist())) == sorted(map(tuple, full.x.flatten(1).tolist()))


@pytest.mark.parametrize("world", [1, 3])
def test_test_batches_cover_every_test_row_once_across_processes(dm, world):
    """Each process evaluates a contiguous block of the test split in batches of at most ``test_batch_size`` rows;
    together, in rank order, they are the test split itself (no row twice, none padded)."""
    xs, ys = [], []
    dm.test_batch_size = 50  # several batches a process
    try:
        for rank in range(world):
            dm.trainer = SimpleNamespace(global_rank=rank, world_size=world)
            loader = dm.test_dataloader()
            batches = list(loader)
            assert len(loader) == len(batches) and all(len(y) <= dm.test_batch_size for _, y in batches)
            xs += [x for x, _ in batches]
            ys += [y for _, y in batches]
    finally:
        dm.trainer, dm.test_batch_size = None, 1024
    assert len(xs) > world
    assert torch.equal(torch.cat(xs), dm.splits.test_x) and torch.equal(torch.cat(ys), dm.splits.test_y)


def test_a_subclass_shards_drive_every_client_statistic():
    """A subclass that overrides ``client_indices`` (docs/tutorials/add-a-dataset.md) has its shards in the sizes, the
    label counts and the distributions, counted here client by client."""
    from functools import cached_property

    class FirstRows(FederatedDataModule):
        @cached_property
        def client_indices(self) -> list[torch.Tensor]:
            return [torch.arange(10 * k, 10 * k + 5 + k) for k in range(self.num_clients)]

    dm = FirstRows(dataset="digits", num_clients=6, alpha=2)
    y = dm.splits.train_y
    expected = torch.stack([torch.bincount(y[p], minlength=dm.num_classes) for p in dm.client_indices])
    assert dm.client_sizes.tolist() == [5, 6, 7, 8, 9, 10]
    assert torch.equal(dm.label_counts, expected)
    assert torch.equal(dm.label_distribution, expected.double() / expected.sum(1, keepdim=True))
    assert torch.equal(dm.client_stats.label_counts, expected)


def test_binary_class_makes_one_class_against_the_rest():
    """``binary_class=c``: labels 1 for class ``c``, 0 for the others, 2 classes, partitioned on those labels."""
    plain = FederatedDataModule(dataset="digits", num_clients=10, alpha=2)
    dm = FederatedDataModule(dataset="digits", num_clients=10, alpha=2, binary_class=3)
    assert dm.num_classes == 2
    assert torch.equal(dm.splits.train_y, (plain.splits.train_y == 3).long())
    assert torch.equal(dm.splits.test_y, (plain.splits.test_y == 3).long())
    assert dm.label_counts.shape == (10, 2) and int(dm.label_counts[:, 1].sum()) == int(
        (plain.splits.train_y == 3).sum()
    )
    assert "class 3 against the rest" in dm.describe()
    with pytest.raises(ConfigError, match=r"binary_class=10 is not a class of digits \(0 to 9\)"):
        _ = FederatedDataModule(dataset="digits", num_clients=10, binary_class=10).num_classes
    with pytest.raises(ConfigError, match="binary_class=-1 must be a class of the dataset"):
        FederatedDataModule(dataset="digits", binary_class=-1)
