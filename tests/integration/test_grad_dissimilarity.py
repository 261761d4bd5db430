"""Gradient dissimilarity (SCALA Assumption 3): the pure formula by hand and by an identity, and the
``GradientDissimilarity`` callback on real short fits against an independent computation."""

from __future__ import annotations

import copy
import csv
import doctest
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch import nn

import lightning_sfl.system.dissimilarity as dissimilarity_module
from lightning_sfl.algorithms import SCALA, FedAvg
from lightning_sfl.callbacks.grad_dissimilarity import GradientDissimilarity, global_model_gradient
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.system.dissimilarity import client_weights, dissimilarity, layer_dissimilarity, partition_totals

warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*sync_dist.*")


# ----------------------------------------------------------------------------- pure functions
def test_two_clients_two_layers_by_hand():
    # p = (1/4, 3/4).
    # layer a: g1 = (1, 0), g2 = (0, 1) -> ḡ = (1/4, 3/4); ‖g1-ḡ‖² = 9/8, ‖g2-ḡ‖² = 1/8 -> 1/4·9/8 + 3/4·1/8 = 3/8
    # layer b: g1 = 2, g2 = -2 -> ḡ = -1; 1/4·9 + 3/4·1 = 3
    per_client = [
        {"a": torch.tensor([1.0, 0.0]), "b": torch.tensor([[2.0]])},
        {"a": torch.tensor([0.0, 1.0]), "b": torch.tensor([[-2.0]])},
    ]
    got = layer_dissimilarity(per_client, torch.tensor([10, 30]))
    assert list(got) == ["a", "b"]
    assert got["a"].item() == pytest.approx(0.375, abs=1e-12)
    assert got["b"].item() == pytest.approx(3.0, abs=1e-12)
    assert got["a"].dtype == torch.float64
    stacked = {"a": torch.tensor([[1.0, 0.0], [0.0, 1.0]]), "b": torch.tensor([[[2.0]], [[-2.0]]])}
    got_stacked = layer_dissimilarity(stacked, [1, 3])
    assert {k: v.item() for k, v in got_stacked.items()} == {k: v.item() for k, v in got.items()}
    totals = partition_totals(got, {"client_half": ["a"], "server_half": ["b"]})
    assert {k: v.item() for k, v in totals.items()} == pytest.approx(
        {"client_half": 0.375, "server_half": 3.0, "total": 3.375}, abs=1e-12
    )


def test_matches_the_variance_identity_on_random_gradients():
    g = torch.Generator().manual_seed(0)
    shapes = {"conv": (5, 3, 2), "bias": (7,), "scalar": ()}
    sizes = torch.tensor([17, 3, 250, 41, 1])
    grads = {n: torch.randn(len(sizes), *s, generator=g) * (1 + i) for i, (n, s) in enumerate(shapes.items())}
    got = layer_dissimilarity(grads, sizes)
    p = sizes.double() / sizes.sum()
    for n, stacked in grads.items():
        flat = stacked.double().reshape(len(sizes), -1)
        mean = (p[:, None] * flat).sum(0)
        identity = (p * flat.pow(2).sum(1)).sum() - mean.pow(2).sum()  # Σ p‖g‖² − ‖ḡ‖²
        assert got[n].item() == pytest.approx(identity.item(), rel=1e-10)
    # the list-of-dicts form gives the same numbers
    per_client = [{n: grads[n][k] for n in shapes} for k in range(len(sizes))]
    assert all(torch.equal(a, b) for a, b in zip(layer_dissimilarity(per_client, sizes).values(), got.values()))


def test_degenerate_cases_and_weights():
    same = torch.tensor([1.5, -2.0]).expand(4, 2)
    assert dissimilarity(same, [1, 2, 3, 4]).item() == 0.0  # identical clients: no dissimilarity
    assert dissimilarity(torch.tensor([[3.0, 4.0]]), [7]).item() == 0.0  # one client
    two = torch.tensor([[0.0], [1.0]])
    assert dissimilarity(two, [1, 1]).item() == pytest.approx(0.25)  # p1 p2 ‖g1 − g2‖²
    assert dissimilarity(two, [0.5, 0.5]).item() == dissimilarity(two, [5, 5]).item()  # only ratios matter
    assert dissimilarity(two, [0, 1]).item() == 0.0  # a client of weight 0 does not count
    assert client_weights([2, 6]).tolist() == [0.25, 0.75]
    for bad in ([], [0, 0], [-1, 2], [float("nan"), 1]):
        with pytest.raises(ValueError):
            client_weights(bad)
    with pytest.raises(ValueError, match="must be"):
        dissimilarity(torch.zeros(3, 2), [1, 2])


def test_partition_must_be_a_partition():
    per_layer = {"a": torch.tensor(1.0, dtype=torch.float64), "b": torch.tensor(2.0, dtype=torch.float64)}
    totals = partition_totals(per_layer, {"client_half": ["a", "b"], "server_half": []})
    assert totals["server_half"].item() == 0.0 and totals["total"].item() == 3.0
    with pytest.raises(ValueError, match="no group"):
        partition_totals(per_layer, {"x": ["a"]})
    with pytest.raises(ValueError, match="groups"):
        partition_totals(per_layer, {"x": ["a", "b"], "y": ["b"]})
    with pytest.raises(ValueError, match="no dissimilarity"):
        partition_totals(per_layer, {"x": ["a", "b", "c"]})
    with pytest.raises(ValueError, match="reserved"):
        partition_totals(per_layer, {"total": ["a", "b"]})


def test_module_doctests_pass():
    result = doctest.testmod(dissimilarity_module)
    assert result.attempted >= 4 and result.failed == 0


# ----------------------------------------------------------------------------- gradient of the global model
def _bn_halves() -> dict[str, nn.Module]:
    torch.manual_seed(3)
    client = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU())
    server = nn.Sequential(nn.Linear(6, 3))
    with torch.no_grad():  # non-trivial running statistics, so eval-mode and train-mode gradients differ
        client[1].running_mean.fill_(0.7)
        client[1].running_var.fill_(3.0)
    return {"client": client, "server": server}


def test_global_gradient_uses_train_mode_and_leaves_the_model_untouched():
    halves = _bn_halves()
    halves["client"].eval()  # flags must come back as they were
    x, y = torch.randn(10, 4, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2, 0, 1] * 2)
    before = {h: copy.deepcopy(m.state_dict()) for h, m in halves.items()}

    got = global_model_gradient(halves, x, y)

    for h, m in halves.items():
        assert all(torch.equal(v, m.state_dict()[k]) for k, v in before[h].items())  # weights and BN buffers
        assert all(p.grad is None for p in m.parameters())
    assert not halves["client"].training and halves["server"].training
    # reference: a copy of the composed model in train mode, plain autograd
    ref = nn.Sequential(copy.deepcopy(halves["client"]), copy.deepcopy(halves["server"])).train()
    F.cross_entropy(ref(x), y).backward()
    expected = {f"client.{k}": p.grad for k, p in ref[0].named_parameters()}
    expected |= {f"server.{k}": p.grad for k, p in ref[1].named_parameters()}
    assert list(got) == list(expected)
    for k in expected:
        torch.testing.assert_close(got[k], expected[k], rtol=1e-5, atol=1e-7)
    # the eval-mode gradient (running statistics) is a different one
    ref.eval().zero_grad()
    F.cross_entropy(ref(x), y).backward()
    assert not torch.allclose(got["client.0.weight"], ref[0][0].weight.grad, atol=1e-4)


def test_global_gradient_chunks_and_empty_server_half():
    torch.manual_seed(0)
    halves = {"client": nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)), "server": nn.Sequential()}
    x, y = torch.randn(11, 4), torch.randint(0, 3, (11,))
    whole = global_model_gradient(halves, x, y)
    chunked = global_model_gradient(halves, x, y, chunk_size=4)  # 4 + 4 + 3 rows
    assert list(whole) == ["client.0.weight", "client.0.bias", "client.2.weight", "client.2.bias"]
    for k in whole:
        torch.testing.assert_close(chunked[k], whole[k], rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------- the callback on real fits
def _datamodule(**kw) -> FederatedDataModule:
    args = dict(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)
    return FederatedDataModule(**(args | kw))


class _RoundClients(L.Callback):
    """Records the clients of every round (independently of the callback under test)."""

    def __init__(self) -> None:
        self.clients: dict[int, torch.Tensor] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if batch_idx == 0:
            self.clients[trainer.current_epoch] = batch.clients.clone()


def _fit(model, dm, callbacks, logger=False, max_epochs=3) -> L.Trainer:
    trainer = L.Trainer(
        logger=logger,
        max_epochs=max_epochs,
        log_every_n_steps=1,  # a round is one step: as the CLI's trainer
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=callbacks,
    )
    trainer.fit(model, dm)
    return trainer


def _logged_rows(trainer: L.Trainer) -> dict[int, dict[str, float]]:
    """``epoch -> {dissimilarity key: value}`` from the CSV logger's file."""
    rows: dict[int, dict[str, float]] = {}
    with open(Path(trainer.logger.log_dir) / "metrics.csv") as f:
        for row in csv.DictReader(f):
            values = {k: float(v) for k, v in row.items() if k.startswith("dissimilarity/") and v != ""}
            if values:
                assert int(row["epoch"]) not in rows  # one row per measured round
                rows[int(row["epoch"])] = values
    return rows


def _reference(client_net, server_net, dm: FederatedDataModule, clients: torch.Tensor) -> dict[str, float]:
    """Σ_k p_k ‖g_k − ḡ‖² per layer, written out: full-shard gradients of a rebuilt model with plain autograd, and
    the pairwise form ½ Σ_{k,l} p_k p_l ‖g_k − g_l‖² (not the library's formula)."""
    model = nn.Sequential(copy.deepcopy(client_net), copy.deepcopy(server_net)).train()
    named = [(f"client.{k}", p) for k, p in model[0].named_parameters()]
    named += [(f"server.{k}", p) for k, p in model[1].named_parameters()]
    grads = []
    for k in clients.tolist():
        idx = dm.client_indices[k]
        model.zero_grad()
        F.cross_entropy(model(dm.splits.to_float(dm.splits.train_x[idx])), dm.splits.train_y[idx]).backward()
        grads.append({n: p.grad.double().clone() for n, p in named})
    sizes = dm.client_sizes[clients].double()
    p = sizes / sizes.sum()
    out = {}
    for n, _ in named:
        pair = sum(p[a] * p[b] * (grads[a][n] - grads[b][n]).pow(2).sum() for a in range(len(p)) for b in range(len(p)))
        out[f"dissimilarity/{n}"] = 0.5 * float(pair)
    out["dissimilarity/client_half"] = sum(v for k, v in out.items() if k.startswith("dissimilarity/client."))
    out["dissimilarity/server_half"] = sum(v for k, v in out.items() if k.startswith("dissimilarity/server."))
    out["dissimilarity/total"] = out["dissimilarity/client_half"] + out["dissimilarity/server_half"]
    return out


@pytest.mark.parametrize("algorithm", [SCALA, FedAvg])
def test_callback_logs_the_right_rounds_and_matches_an_independent_computation(algorithm, tmp_path):
    torch.manual_seed(0)
    model = algorithm(local_iters=2, lr=0.05)
    initial = copy.deepcopy(model.client.net), copy.deepcopy(model.server.net)
    dm = _datamodule()
    recorder = _RoundClients()
    trainer = _fit(model, dm, [GradientDissimilarity(every_n_rounds=2), recorder], CSVLogger(tmp_path, name="run"))

    rows = _logged_rows(trainer)
    assert sorted(rows) == [0, 2]  # rounds i with i % 2 == 0 among 0, 1, 2
    assert [rows[i]["dissimilarity/round"] for i in (0, 2)] == [0.0, 2.0]
    layers = {f"dissimilarity/client.{n}" for n, _ in model.client.net.named_parameters()}
    layers |= {f"dissimilarity/server.{n}" for n, _ in model.server.net.named_parameters()}
    totals = {f"dissimilarity/{k}" for k in ("client_half", "server_half", "total", "round")}
    assert set(rows[0]) == set(rows[2]) == layers | totals
    if algorithm is FedAvg:
        assert not any(".server." in k or k.startswith("dissimilarity/server.") for k in rows[0])
        assert rows[0]["dissimilarity/server_half"] == 0.0
    else:
        assert any(k.startswith("dissimilarity/server.") for k in rows[0]) and rows[0]["dissimilarity/server_half"] > 0

    expected = _reference(*initial, dm, recorder.clients[0])
    assert expected["dissimilarity/total"] > 0
    for key, value in expected.items():
        assert rows[0][key] == pytest.approx(value, rel=1e-4, abs=1e-9), key
    assert rows[2]["dissimilarity/total"] != pytest.approx(rows[0]["dissimilarity/total"])  # a later model


@pytest.mark.parametrize("algorithm", [SCALA, FedAvg])
def test_callback_does_not_disturb_training(algorithm):
    torch.manual_seed(0)
    model = algorithm(local_iters=2, lr=0.05)
    twin = copy.deepcopy(model)
    final, rng = [], []
    for m, callbacks in ((model, []), (twin, [GradientDissimilarity(1, max_samples_per_client=50, chunk_size=16)])):
        torch.manual_seed(123)
        trainer = _fit(m, _datamodule(), callbacks)
        rng.append(torch.random.get_rng_state())
        final.append(m.state_dict())
        if callbacks:
            assert "dissimilarity/total" in trainer.callback_metrics
    assert final[0].keys() == final[1].keys()
    for k in final[0]:
        assert torch.equal(final[0][k], final[1][k]), k
    assert torch.equal(rng[0], rng[1])


def test_subsample_is_seeded_and_bounded():
    cb = GradientDissimilarity(max_samples_per_client=5, seed=7)
    idx = torch.arange(100, 130)
    a, b = cb.client_rows(idx, 3, 2), cb.client_rows(idx, 3, 2)
    assert torch.equal(a, b) and len(a) == 5 and len(set(a.tolist())) == 5 and set(a.tolist()) <= set(idx.tolist())
    assert not torch.equal(a, cb.client_rows(idx, 4, 2))  # another round, another subsample
    assert torch.equal(cb.client_rows(idx[:4], 3, 2), idx[:4])  # a small shard is used whole
    assert torch.equal(GradientDissimilarity().client_rows(idx, 3, 2), idx)
    for bad in (dict(every_n_rounds=-1), dict(max_samples_per_client=0), dict(chunk_size=0)):
        with pytest.raises(ValueError):
            GradientDissimilarity(**bad)


def test_iid_partition_is_far_less_dissimilar_than_one_class_per_client():
    torch.manual_seed(0)
    model = FedAvg(local_iters=2, lr=0.05)
    totals = {}
    for name, kw in {"iid": dict(partition="iid"), "quantity_1": dict(partition="quantity", alpha=1)}.items():
        trainer = _fit(copy.deepcopy(model), _datamodule(**kw), [GradientDissimilarity(1)], max_epochs=1)
        totals[name] = float(trainer.callback_metrics["dissimilarity/total"])  # round 0: the same initial model
    assert 0 < 10 * totals["iid"] < totals["quantity_1"], totals


def test_every_n_rounds_zero_turns_it_off():
    cb = GradientDissimilarity(every_n_rounds=0)
    assert not any(cb.should_measure(r) for r in range(20))
