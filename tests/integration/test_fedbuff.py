"""FedBuff and CA²FL on the asynchronous clock: every server update against its formula recomputed by hand from the
buffered updates, the updates against the models the clients started from, identities between the variants, exact
resume, and one-line errors."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_sfl.algorithms import CA2FL, FedBuff
from lightning_sfl.callbacks import SimulatedClock
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Federation
from lightning_sfl.runtime.aggregate import flat_parameters
from lightning_sfl.system.wireless import WirelessCell

#: 8 clients, 3 in flight, E = 2 local iterations of b = 8 rows, a server update every 2 uploads.
KW = {"concurrency": 3, "aggregate_every": 2, "client_batch_size": 8, "local_iters": 2, "lr": 0.05, "momentum": 0.5}


def _dm() -> FederatedDataModule:
    return FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=8, seed=1)


def _fit(model, rounds: int = 4, precision: str = "64-true", ckpt_path=None, checkpoint_dir=None):
    callbacks = [SimulatedClock()]
    dm = _dm()
    Federation.build(model, dm, system=WirelessCell(flops_high=1e10))  # GAS's wireless cell, placement seed 0
    if checkpoint_dir is not None:
        callbacks.append(ModelCheckpoint(dirpath=checkpoint_dir, save_last=True))
    L.Trainer(
        max_epochs=rounds,
        precision=precision,
        logger=False,
        enable_checkpointing=checkpoint_dir is not None,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    ).fit(model, dm, ckpt_path=ckpt_path)
    return model


def _recording(cls):
    class Recording(cls):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.initial = flat_parameters(self.client.net).detach().clone()
            self.rounds: list[dict] = []  # per aggregation: w before and after, Δ and start of each upload, clients
            self.pending: list[tuple[torch.Tensor, int]] = []  # (start model, version) of each buffered upload

        def upload(self, step):
            super().upload(step)
            snapshot = torch.cat(
                [v.reshape(-1) for k, v in self.uploads[-1][0].items() if "weight" in k or "bias" in k]
            )
            self.pending.append((snapshot - self.deltas[-1], step.version))

        def aggregate(self, step):
            before = flat_parameters(self.client.net).detach().clone()
            deltas, clients = torch.stack(self.deltas).clone(), [c for _, c in self.uploads]
            super().aggregate(step)
            after = flat_parameters(self.client.net).detach().clone()
            self.rounds.append({"before": before, "after": after, "deltas": deltas, "clients": clients})
            self.rounds[-1]["starts"] = list(self.pending)
            self.pending.clear()

    return Recording


def test_fedbuff_steps_by_the_mean_buffered_update_from_the_models_the_clients_started_from():
    torch.manual_seed(0)
    model = _fit(_recording(FedBuff)(**KW, server_lr=0.5))
    globals_by_version = [model.initial.double()] + [r["after"] for r in model.rounds]
    for r in model.rounds:
        torch.testing.assert_close(r["after"], r["before"] + 0.5 * r["deltas"].mean(0), rtol=1e-12, atol=1e-12)
        for start, version in r["starts"]:  # Δ_i = w_i − the global model of the client's start
            torch.testing.assert_close(start, globals_by_version[version], rtol=1e-12, atol=1e-12)
    assert any(v > 0 for r in model.rounds for _, v in r["starts"])  # some clients started after an update
    assert any(r["before"].ne(globals_by_version[v]).any() for r in model.rounds for _, v in r["starts"])  # stale


def test_fedbuff_with_one_client_and_server_lr_1_equals_averaging():
    single = {**KW, "concurrency": 1, "aggregate_every": 1}
    torch.manual_seed(0)
    delta = flat_parameters(_fit(FedBuff(**single, server_lr=1.0))).detach()
    torch.manual_seed(0)
    average = flat_parameters(_fit(FedBuff(**single, update="average"))).detach()
    torch.testing.assert_close(delta, average, rtol=1e-12, atol=1e-12)


def _ca2fl_reference(rounds: list[dict], num_clients: int, lr: float, update: str, sizes: torch.Tensor):
    """CA²FL's server updates replayed from the recorded buffers with a cache kept here."""
    cache = torch.zeros(num_clients, len(rounds[0]["before"]), dtype=torch.float64)
    for r in rounds:
        deltas, clients = r["deltas"], r["clients"]
        if update == "delta":
            v = cache.mean(0) + (deltas - cache[clients]).mean(0)
            for d, c in zip(deltas, clients):
                cache[c] = d
        else:
            for d, c in zip(deltas, clients):
                cache[c] = d
            v = (sizes / sizes.sum()) @ cache
        torch.testing.assert_close(r["after"], r["before"] + lr * v, rtol=1e-12, atol=1e-12)
    return cache


@pytest.mark.parametrize("update", ["delta", "gas_code"])
def test_ca2fl_server_updates_match_the_formula_with_a_cache_kept_by_hand(update):
    torch.manual_seed(0)
    model = _fit(_recording(CA2FL)(**KW, server_lr=0.7, update=update), rounds=5)
    dm = _dm()
    dm.setup("fit")
    cache = _ca2fl_reference(model.rounds, 8, 0.7, update, dm.client_stats.sizes.double())
    torch.testing.assert_close(model.cache.dense(), cache, rtol=1e-12, atol=1e-12)
    assert (cache.abs().sum(1) > 0).sum() >= 4  # several clients cached


def test_ca2fl_first_update_is_fedbuffs_and_later_ones_differ():
    torch.manual_seed(0)
    first_ca2fl = flat_parameters(_fit(CA2FL(**KW), rounds=1)).detach()
    torch.manual_seed(0)
    first_fedbuff = flat_parameters(_fit(FedBuff(**KW), rounds=1)).detach()
    torch.testing.assert_close(first_ca2fl, first_fedbuff, rtol=1e-12, atol=1e-12)  # empty cache: v = mean Δ
    torch.manual_seed(0)
    ca2fl = flat_parameters(_fit(CA2FL(**KW), rounds=3)).detach()
    torch.manual_seed(0)
    fedbuff = flat_parameters(_fit(FedBuff(**KW), rounds=3)).detach()
    assert (ca2fl - fedbuff).abs().max() > 1e-6


def test_ca2fl_resumes_exactly(tmp_path):
    def run(rounds, folder, ckpt_path=None):
        torch.manual_seed(0)
        return _fit(CA2FL(**KW), rounds, "32-true", ckpt_path=ckpt_path, checkpoint_dir=folder)

    full = run(4, tmp_path / "full")
    run(2, tmp_path / "part")
    resumed = run(4, tmp_path / "part", ckpt_path=str(tmp_path / "part" / "last.ckpt"))
    assert torch.equal(resumed.cache.dense(), full.cache.dense()) and full.cache.rows_held() > 0
    want, got = full.state_dict(), resumed.state_dict()
    assert want.keys() == got.keys()
    for k in want:
        assert torch.equal(got[k], want[k]), k


@pytest.mark.parametrize(
    "cls,kwargs,match",
    [
        (FedBuff, {"server_lr": 0.0}, "server_lr=0.0 must be > 0"),
        (FedBuff, {"update": "gas_code"}, "update='gas_code' must be one of: delta, average"),
        (CA2FL, {"update": "average"}, "update='average' must be one of: delta, gas_code"),
        (FedBuff, {"aggregate_every": 0}, "aggregate_every=0 must be a whole number >= 1"),
        (CA2FL, {"aggregation": "uniform"}, "aggregation='uniform' changes nothing: CA2FL's server step is set by"),
        (FedBuff, {"flush_every": 3}, "flush_every=3 changes nothing: FedBuff's clients upload no activations"),
    ],
)
def test_bad_settings_are_one_line_errors(cls, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        cls(**{**KW, **kwargs})
