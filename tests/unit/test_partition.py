"""Partitioners and the per-round sampling rules (eq. 3)."""

from __future__ import annotations

import pytest
import torch

from lightning_sfl.data.partition import dirichlet, iid, label_distribution, partition, quantity, shards
from lightning_sfl.loop.sampling import (
    client_batch_sizes,
    clients_per_round,
    minibatch_indices,
    round_generator,
    sample_clients,
)


def _labels(num_classes: int = 10, per_class: int = 40, seed: int = 0) -> torch.Tensor:
    y = torch.arange(num_classes).repeat_interleave(per_class)
    return y[torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))]


def _assert_disjoint(parts: list[torch.Tensor], n: int) -> torch.Tensor:
    allidx = torch.cat(parts)
    assert len(torch.unique(allidx)) == len(allidx), "a sample was given to two clients"
    assert allidx.min() >= 0 and allidx.max() < n
    assert all(len(p) > 0 for p in parts)
    return allidx


@pytest.mark.parametrize("method", ["iid", "quantity", "dirichlet", "shards"])
def test_partition_is_disjoint_and_deterministic(method):
    y = _labels()
    a = partition(y, method, 20, alpha=2, beta=0.3, shards_per_client=2, seed=3)
    b = partition(y, method, 20, alpha=2, beta=0.3, shards_per_client=2, seed=3)
    c = partition(y, method, 20, alpha=2, beta=0.3, shards_per_client=2, seed=4)
    assert len(a) == 20
    _assert_disjoint(a, len(y))
    assert all(torch.equal(p, q) for p, q in zip(a, b))
    assert any(not torch.equal(p, q) for p, q in zip(a, c))


@pytest.mark.parametrize("method", ["iid", "quantity", "dirichlet"])
def test_partition_covers_every_sample_when_it_divides(method):
    y = _labels()
    assert len(_assert_disjoint(partition(y, method, 20, alpha=2, beta=0.3, seed=0), len(y))) == len(y)


@pytest.mark.parametrize("num_clients,alpha", [(20, 2), (10, 1), (15, 2), (7, 3), (100, 2), (30, 10)])
def test_quantity_gives_alpha_distinct_classes(num_clients, alpha):
    y = _labels(per_class=200)
    parts = quantity(y, num_clients, alpha, seed=1)
    _assert_disjoint(parts, len(y))
    for p in parts:
        assert len(torch.unique(y[p])) == alpha  # exactly α distinct classes (hence at most α)
    # Every class is cut into floor or ceil of K·α/N portions of near-equal size.
    holders = torch.zeros(10, dtype=torch.long)
    for p in parts:
        holders[torch.unique(y[p])] += 1
    assert set(holders.tolist()) <= {num_clients * alpha // 10, -(-num_clients * alpha // 10)}
    assert holders.sum() == num_clients * alpha


def test_quantity_portion_sizes_match_the_paper():
    y = _labels(per_class=40)
    parts = quantity(y, 20, 2, seed=0)  # K·α/N = 4 portions of 10 samples per class
    for p in parts:
        counts = torch.bincount(y[p], minlength=10)
        assert sorted(counts[counts > 0].tolist()) == [10, 10]


def test_dirichlet_small_beta_is_more_skewed():
    y = _labels(per_class=200)

    def mean_max_share(beta: float) -> float:
        dist = label_distribution(y, dirichlet(y, 20, beta, seed=0), 10)
        return float(dist.max(dim=1).values.mean())

    assert mean_max_share(0.05) > mean_max_share(1.0) > mean_max_share(100.0)
    assert mean_max_share(100.0) < 0.25  # nearly uniform


def test_dirichlet_leftovers_go_to_largest_remainders():
    y = torch.zeros(7, dtype=torch.long)  # one class, 7 samples, 3 clients
    parts = dirichlet(y, 3, beta=1.0, seed=0)
    sizes = [len(p) for p in parts]
    assert sum(sizes) == 7 and min(sizes) >= 1


def test_shards_have_fixed_size_and_few_labels():
    y = _labels(per_class=40)
    parts = shards(y, 20, shards_per_client=2, seed=0)  # 40 shards of 10 sorted samples
    for p in parts:
        assert len(p) == 20
        assert len(torch.unique(y[p])) <= 2


def test_iid_sizes_differ_by_at_most_one():
    parts = iid(_labels(per_class=41), 7, seed=0)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 410


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda y: quantity(y, 10, 11), "alpha=11"),
        (lambda y: quantity(y, 10, 0), "alpha=0"),
        (lambda y: dirichlet(y, 10, 0.0), "beta=0.0"),
        (lambda y: iid(y, 10_000), "num_clients=10000"),
        (lambda y: partition(y, "bogus", 4), "partition='bogus' is not one of: iid, quantity, dirichlet, shards"),
        (lambda y: quantity(y, 400, 10), "without data|samples for"),
    ],
)
def test_bad_partition_arguments_fail_clearly(call, match):
    with pytest.raises(ValueError, match=match):
        call(_labels())


def test_label_distribution_rows_sum_to_one():
    y = _labels()
    parts = quantity(y, 20, 2, seed=0)
    dist = label_distribution(y, parts, 10)
    assert dist.shape == (20, 10)
    torch.testing.assert_close(dist.sum(dim=1), torch.ones(20, dtype=torch.float64))
    k = 3
    manual = torch.bincount(y[parts[k]], minlength=10).double() / len(parts[k])
    torch.testing.assert_close(dist[k], manual)


# ----------------------------------------------------------------------------- eq. (3) and client sampling
def test_batch_sizes_follow_eq3_exactly_when_divisible():
    assert client_batch_sizes(torch.tensor([10, 30, 60]), 20).tolist() == [2, 6, 12]


def test_batch_sizes_largest_remainder_by_hand():
    # exact shares 64·[90, 45, 45, 100, 40]/320 = [18, 9, 9, 20, 8]
    assert client_batch_sizes(torch.tensor([90, 45, 45, 100, 40]), 64).tolist() == [18, 9, 9, 20, 8]
    # exact shares 10·[1, 1, 1]/3 = 3.33 each: floors 3, one leftover to the first (stable tie order)
    assert client_batch_sizes(torch.tensor([5, 5, 5]), 10).tolist() == [4, 3, 3]
    # tiny client would get 0.1 rows: it gets one, taken from the largest
    assert client_batch_sizes(torch.tensor([1, 99]), 10).tolist() == [1, 9]


@pytest.mark.parametrize("seed", range(20))
def test_batch_sizes_invariants(seed):
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 500, (int(torch.randint(1, 30, (1,), generator=g)),), generator=g)
    b = int(torch.randint(len(sizes), 400, (1,), generator=g))
    bk = client_batch_sizes(sizes, b)
    assert int(bk.sum()) == b and int(bk.min()) >= 1
    exact = sizes.double() * b / sizes.sum()
    # largest-remainder rounding is within one row of eq. (3); each client bumped up to one row costs the
    # largest client one more row
    assert (bk.double() - exact).abs().max() < 1.0 + int((exact < 1).sum())


def test_batch_smaller_than_clients_is_an_error():
    with pytest.raises(ValueError, match="batch_size=3 is smaller than the 4 clients"):
        client_batch_sizes(torch.tensor([5, 5, 5, 5]), 3)


def test_client_sampling_depends_only_on_seed_and_round():
    a = sample_clients(100, 0.1, seed=7, round_idx=5)
    torch.manual_seed(123)  # global RNG state must not matter
    b = sample_clients(100, 0.1, seed=7, round_idx=5)
    assert torch.equal(a, b) and len(a) == clients_per_round(100, 0.1) == 10
    assert len(torch.unique(a)) == 10
    assert not torch.equal(a, sample_clients(100, 0.1, seed=7, round_idx=6))
    assert not torch.equal(a, sample_clients(100, 0.1, seed=8, round_idx=5))


def test_client_sampling_is_uniform():
    counts = torch.zeros(20)
    for r in range(2000):
        counts[sample_clients(20, 0.25, seed=0, round_idx=r)] += 1
    assert counts.sum() == 2000 * 5
    assert (counts / 2000 - 0.25).abs().max() < 0.04


def test_minibatches_cycle_through_the_shard_without_replacement():
    shard = torch.arange(100, 110)
    rows = minibatch_indices(shard, 4, 5, round_generator(0, 0))  # 20 rows = two passes over 10 samples
    assert rows.shape == (5, 4)
    flat = rows.flatten()
    assert sorted(flat[:10].tolist()) == list(range(100, 110))
    assert sorted(flat[10:20].tolist()) == list(range(100, 110))
