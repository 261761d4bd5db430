"""The per-client store (:mod:`lightning_sfl.client_store`) against a dense ``[K, *row]`` tensor doing the same
writes: reads, sums over all clients, a memory budget that sends rows to disk, and checkpoint records that rebuild
exactly the state they were saved with, whatever was written after them."""

from __future__ import annotations

import pytest
import torch

from lightning_sfl import client_store
from lightning_sfl.client_store import CHAIN_LIMIT, ClientStore
from lightning_sfl.errors import ConfigError

K, P = 50, 6


def random_writes(store: ClientStore, reference: torch.Tensor, rounds: int, seed: int) -> None:
    """``rounds`` writes of 5 distinct random clients' rows to both ``store`` and ``reference`` (``[K, P]``)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(rounds):
        clients = torch.randperm(K, generator=g)[:5]
        rows = torch.randn(5, P, generator=g, dtype=reference.dtype)
        store[clients] = rows
        reference[clients] = rows


def fresh(default: torch.Tensor | None = None, **kwargs) -> tuple[ClientStore, torch.Tensor]:
    default = torch.zeros(P, dtype=torch.float64) if default is None else default
    return ClientStore("c", K, default, **kwargs), default.expand(K, P).clone()


def test_reads_and_writes_equal_a_dense_tensor_for_every_kind_of_index():
    store, reference = fresh(torch.arange(P, dtype=torch.float64))  # a default that is not zero (SplitFedV3's)
    random_writes(store, reference, 6, seed=0)
    store[3] = torch.full((P,), 7.0)
    reference[3] = 7.0
    store[[4, 9]] = 0  # a number, broadcast (SCALA-PE's reset of the Adam moments)
    reference[[4, 9]] = 0
    assert torch.equal(store.dense(), reference)
    assert torch.equal(store[5], reference[5]) and torch.equal(store[torch.tensor(5)], reference[5])
    assert torch.equal(store[[1, 3, 1]], reference[[1, 3, 1]])
    assert torch.equal(store[torch.tensor([8, 0])], reference[torch.tensor([8, 0])])
    store[[2]] = store[[2]] - 1.5  # `store[clients] -= x` as FedDyn writes it: a copy read, changed, written back
    reference[[2]] -= 1.5
    assert torch.equal(store.dense(), reference)
    held = (reference != torch.arange(P, dtype=torch.float64)).any(dim=1).nonzero().flatten()
    assert set(held.tolist()) <= set(store.clients_held().tolist())
    assert store.shape == reference.shape and store.dtype == torch.float64 and len(store) == K


def test_an_unknown_client_is_refused_naming_the_store():
    store, _ = fresh()
    with pytest.raises(IndexError, match=f"c: client {K} is not one of 0..{K - 1}"):
        store[[0, K]]


@pytest.mark.parametrize("dense_limit", [client_store.DENSE_LIMIT, 0])
def test_sums_over_all_clients_equal_the_dense_ones(dense_limit):
    """Up to DENSE_LIMIT numbers the dense product, bitwise; beyond it the held rows' sum plus the default's share."""
    store, reference = fresh(torch.linspace(-1, 1, P, dtype=torch.float64))
    store.dense_limit = dense_limit
    random_writes(store, reference, 4, seed=1)
    weights = torch.rand(K, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    if dense_limit:
        assert torch.equal(store.weighted_sum(weights), weights @ reference)
        assert torch.equal(store.mean(), reference.mean(0))
    else:
        torch.testing.assert_close(store.weighted_sum(weights, chunk=3), weights @ reference, rtol=1e-14, atol=1e-14)
        torch.testing.assert_close(store.mean(), reference.mean(0), rtol=1e-14, atol=1e-14)


def test_over_its_memory_budget_rows_go_to_disk_and_read_back_the_same(tmp_path):
    store, reference = fresh(memory_budget=4 * P * 8)  # four float64 rows
    store.bind_folder(tmp_path)
    random_writes(store, reference, 5, seed=3)
    files = list((tmp_path / "client_state" / "c").glob("*.pt"))
    assert files, "25 rows written past a budget of 4: some went to disk"
    assert len(store._clients_of_slot) <= 4 + 5  # the budget, plus at most one write's rows before it spills
    assert torch.equal(store.dense(), reference)


def test_a_record_rebuilds_its_state_after_later_writes_a_kill_and_a_resumed_fork(tmp_path):
    store, reference = fresh(memory_budget=3 * P * 8)
    store.bind_folder(tmp_path)
    random_writes(store, reference, 3, seed=4)
    first, at_first = store.save(), reference.clone()
    random_writes(store, reference, 3, seed=5)
    second, at_second = store.save(), reference.clone()
    random_writes(store, reference, 2, seed=6)  # written (some spilled to files) and never saved: a kill
    for record, want in ((first, at_first), (second, at_second)):
        restored, _ = fresh()
        restored.load(record)
        assert torch.equal(restored.dense(), want)
    fork, fork_reference = fresh()  # a run resumed from the first record writes files of its own
    fork.bind_folder(tmp_path)
    fork.load(first)
    fork_reference.copy_(at_first)
    random_writes(fork, fork_reference, 2, seed=7)
    third = fork.save()
    for record, want in ((second, at_second), (third, fork_reference)):
        restored, _ = fresh()
        restored.load(record)
        assert torch.equal(restored.dense(), want)


def test_a_save_writes_only_the_rows_changed_since_the_last_and_a_long_chain_is_compacted(tmp_path):
    store, reference = fresh()
    store.bind_folder(tmp_path)
    random_writes(store, reference, 1, seed=8)
    store.save()
    assert store.save()["chain"] == store.save()["chain"]  # nothing changed: no file
    for i in range(CHAIN_LIMIT):
        store[[i % K]] = torch.full((P,), float(i), dtype=torch.float64)
        reference[i % K] = float(i)
        record = store.save()
        newest = torch.load(tmp_path / "client_state" / record["chain"][-1], weights_only=True)
        assert newest["clients"].tolist() in ([i % K], store.clients_held().tolist())  # one row, or all (compacted)
    assert len(record["chain"]) < CHAIN_LIMIT
    restored, _ = fresh()
    restored.load(record)
    assert torch.equal(restored.dense(), reference)


def test_a_record_whose_files_are_gone_names_the_missing_file(tmp_path):
    store, reference = fresh()
    store.bind_folder(tmp_path)
    random_writes(store, reference, 1, seed=9)
    record = store.save()
    (tmp_path / "client_state" / record["chain"][0]).unlink()
    restored, _ = fresh()
    restored.load(record)
    with pytest.raises(ConfigError, match=r"c is in files of its run's client_state/ folder, and .*\.pt is missing"):
        restored[0]


def test_a_moved_run_folder_is_read_from_the_folder_beside_its_checkpoint(tmp_path):
    store, reference = fresh()
    store.bind_folder(tmp_path / "old")
    random_writes(store, reference, 2, seed=10)
    record = store.save()
    (tmp_path / "old").rename(tmp_path / "new")
    restored, _ = fresh()
    restored.load(record, [tmp_path / "new" / "client_state"])
    assert torch.equal(restored.dense(), reference)


def test_a_store_built_from_a_dense_tensor_holds_only_the_rows_that_differ_from_the_default():
    reference = torch.zeros(K, P)
    reference[[3, 17]] = 1.0
    store = ClientStore.from_dense("c", reference, torch.zeros(P))
    assert store.clients_held().tolist() == [3, 17] and torch.equal(store.dense(), reference)


def test_the_memory_budget_must_be_positive():
    with pytest.raises(ConfigError, match="client_state_memory=0 MiB must be > 0"):
        client_store.set_memory_budget(0)
