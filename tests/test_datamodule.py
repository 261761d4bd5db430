"""FederatedDataModule: shards, per-round batches (eq. 3) and argument checks."""

from __future__ import annotations

import pytest
import torch

from lightning_sfl.data import FederatedDataModule
from lightning_sfl.data.sampling import client_batch_sizes


@pytest.fixture(scope="module")
def dm() -> FederatedDataModule:
    dm = FederatedDataModule(
        dataset="digits", num_clients=20, partition="quantity", alpha=2, participation=0.25, batch_size=64, seed=0
    )
    dm.set_local_iters(5)
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


def test_round_batches_hold_every_selected_clients_minibatch(dm):
    batches = dm.round_batches(3)
    assert len(batches) == 5
    clients, sizes = batches[0]["clients"], batches[0]["sizes"]
    assert len(clients) == dm.clients_per_round == 5
    assert torch.equal(sizes, client_batch_sizes(dm.client_sizes[clients], 64))
    train_x = dm.splits.train_x.flatten(1)
    for b in batches:
        assert b["x"].shape == (64, 1, 8, 8) and b["y"].shape == (64,)
        assert torch.equal(b["clients"], clients) and int(b["round"]) == 3
        assert torch.equal(torch.bincount(b["slot"], minlength=5), sizes)
        for s, k in enumerate(clients.tolist()):
            rows = b["x"][b["slot"] == s].flatten(1)
            shard = train_x[dm.client_indices[k]]
            # every row of slot s is a sample of client k's shard with the right label
            assert all(((shard == r).all(dim=1)).any() for r in rows)
            assert set(b["y"][b["slot"] == s].tolist()) <= set(dm.splits.train_y[dm.client_indices[k]].tolist())


def test_round_batches_are_deterministic_per_seed_and_round(dm):
    a, b = dm.round_batches(7), dm.round_batches(7)
    assert all(torch.equal(x["x"], y["x"]) and torch.equal(x["y"], y["y"]) for x, y in zip(a, b))
    c = dm.round_batches(8)
    assert not torch.equal(a[0]["x"], c[0]["x"])


def test_train_loader_follows_the_trainers_round(dm):
    class _T:
        current_epoch, global_rank, world_size = 4, 0, 1

    dm.trainer = _T()
    try:
        got = list(dm.train_dataloader())
    finally:
        dm.trainer = None
    want = dm.round_batches(4)
    assert len(got) == 5 and all(torch.equal(g["x"], w["x"]) for g, w in zip(got, want))


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
    from lightning_sfl.data.datamodule import shard_batch

    full = dm.round_batches(2)[0]
    parts = [shard_batch(full, r, 3) for r in range(3)]
    assert sum(len(p["y"]) for p in parts) == len(full["y"])
    assert torch.equal(sum(p["local_sizes"] for p in parts), full["sizes"])
    for p in parts:  # global counts stay, so losses and P_s are those of the whole batch
        assert torch.equal(p["sizes"], full["sizes"]) and torch.equal(p["label_counts"], full["label_counts"])
        assert (p["local_sizes"] - full["sizes"] / 3).abs().max() < 1
    rows = torch.cat([p["x"].flatten(1) for p in parts])
    assert sorted(map(tuple, rows.tolist())) == sorted(map(tuple, full["x"].flatten(1).tolist()))
