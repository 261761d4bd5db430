"""FedConcat: clustering, per-cluster FedAvg (one cluster = FedAvg), the head stage against a reference computed in
the test (frozen encoders, local SGD of each client's head copy, ``|D_k|``-weighted average) and its traffic."""

from __future__ import annotations

import copy

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from _helpers import flat_params, quiet_trainer, small_digits

from lightning_sfl.algorithms.fedavg import FedAvg
from lightning_sfl.algorithms.fedconcat import FedConcat, cluster_clients
from lightning_sfl.errors import ConfigError
from lightning_sfl.system.comm import module_bytes

LR = 0.05


class _Record(L.Callback):
    """Each step's data, the global model at each round start and each round's end event."""

    def __init__(self) -> None:
        self.steps, self.starts, self.ends = [], [], []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.steps.append(batch)

    def on_round_start(self, trainer, pl_module, step) -> None:
        self.starts.append(copy.deepcopy(pl_module.client.net))

    def on_round_end(self, trainer, pl_module, event) -> None:
        self.ends.append((event.clients.clone(), event.ledger.per_client("down"), event.ledger.per_client("up")))


def _fit(cls, rounds: int, callbacks=(), **kwargs):
    torch.manual_seed(0)
    model = cls(lr=LR, local_iters=2, **kwargs)
    quiet_trainer(rounds, limit_val_batches=0, callbacks=list(callbacks)).fit(model, small_digits())
    return model


def test_cluster_clients_groups_clients_with_the_same_label_distribution():
    g = torch.Generator().manual_seed(0)
    centres = torch.eye(6)[[0, 2, 4]] * 0.8 + 0.2 / 6  # three distinct label distributions
    which = torch.tensor([0, 1, 2, 0, 1, 2, 2, 0, 1])
    points = centres[which] + 0.01 * torch.rand(9, 6, generator=g)
    labels = cluster_clients(points, 3, seed=0)
    assert labels.dtype == torch.int64 and labels.shape == (9,)
    for a in range(9):
        for b in range(9):
            assert bool(labels[a] == labels[b]) == bool(which[a] == which[b])
    assert torch.equal(labels, cluster_clients(points, 3, seed=0))


def test_one_cluster_in_the_encoder_stage_is_fedavg():
    ref = _fit(FedAvg, 2)
    concat = _fit(FedConcat, 2, clusters=1, encoder_rounds=2)
    torch.testing.assert_close(
        flat_params(concat.client.net.clusters[0]), flat_params(ref.client.net), rtol=0, atol=1e-6
    )


def test_each_cluster_averages_its_own_clients():
    rec = _Record()
    model = _fit(FedConcat, 1, callbacks=[rec], clusters=3, encoder_rounds=5)
    start, (clients, _, _) = rec.starts[0], rec.ends[0]
    of = model.fedconcat_cluster[clients]
    sizes = model.client_sizes[clients].double()
    slots = torch.stack([flat_params(s) for s in model.bank.slots]).double()  # the clients' trained models
    for c in range(3):
        got = flat_params(model.client.net.clusters[c])
        members = of == c
        if members.any():
            want = (sizes[members, None] * slots[members]).sum(0) / sizes[members].sum()
            torch.testing.assert_close(got.double(), want, rtol=0, atol=1e-6)
        else:
            assert torch.equal(got, flat_params(start.clusters[c]))  # no client of that cluster this round
    assert len(torch.unique(of)) > 1  # several clusters trained (else this test would show little)


def test_head_stage_trains_a_fedavg_head_on_the_frozen_concatenated_encoders():
    rec = _Record()
    model = _fit(FedConcat, 2, callbacks=[rec], clusters=3, encoder_rounds=1)
    before = rec.starts[1]  # global model when the head stage starts
    for c in range(3):
        assert torch.equal(flat_params(model.client.net.clusters[c]), flat_params(before.clusters[c]))  # frozen
    clients = rec.ends[1][0]
    steps = [s for s in rec.steps if s.round == 1]
    assert [s.kind for s in steps] == ["local", "local"]
    heads = []
    for k in range(len(clients)):  # each client's local SGD on its head copy, by hand
        w, b = before.head.weight.detach().clone(), before.head.bias.detach().clone()
        for s in steps:
            rows = s.owner == k
            with torch.no_grad():
                z = before.features(s.x[rows])
            w.requires_grad_(True), b.requires_grad_(True)
            loss = F.cross_entropy(z @ w.T + b, s.y[rows])
            gw, gb = torch.autograd.grad(loss, (w, b))
            w, b = (w - LR * gw).detach(), (b - LR * gb).detach()
        heads.append(torch.cat([w.reshape(-1), b]))
    sizes = model.client_sizes[clients].double()
    want = (sizes[:, None] * torch.stack(heads).double()).sum(0) / sizes.sum()
    torch.testing.assert_close(flat_params(model.client.net.head).double(), want, rtol=0, atol=1e-5)


def test_traffic_encoders_travel_once_then_only_the_head():
    rec = _Record()
    model = _fit(FedConcat, 4, callbacks=[rec], clusters=2, encoder_rounds=1)
    net = model.client.net
    full, head = module_bytes(net.clusters[0]), module_bytes(net.head)
    encoders = 2 * (full - module_bytes(net.clusters[0][-1]))
    clients0, down0, up0 = rec.ends[0]
    assert down0.tolist() == [full] * len(clients0) and up0.tolist() == [full] * len(clients0)
    seen: set[int] = set()
    repeat = False
    for clients, down, up in rec.ends[1:]:
        for k, client in enumerate(clients.tolist()):
            assert int(down[k]) == head + (0 if client in seen else encoders)
            assert int(up[k]) == head
            repeat |= client in seen
        seen |= set(clients.tolist())
    assert repeat  # some client took part twice in the head stage


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="clusters=0 must be an int >= 1"):
        FedConcat(clusters=0)
    with pytest.raises(ConfigError, match="encoder_rounds=0 must be >= 1"):
        FedConcat(encoder_rounds=0)
    with pytest.raises(ConfigError, match="cluster_seed=-1 must be an int >= 0"):
        FedConcat(cluster_seed=-1)
    with pytest.raises(ConfigError, match=r"clusters=9 must be <= the number of clients \(8\)"):
        _fit(FedConcat, 1, clusters=9)
    torch.manual_seed(0)
    trainer = quiet_trainer(-1, max_steps=4, limit_val_batches=0)
    with pytest.raises(ConfigError, match="FedConcat needs encoder_rounds when the trainer's max_epochs is -1"):
        trainer.fit(FedConcat(lr=LR), small_digits())
