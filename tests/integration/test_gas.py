"""GAS and AsyncSFL (asynchronous SFL on a simulated clock): the batched arrival path against one arrival at a time,
the model buffer against eq. (10) by hand, the statistics against eqs. (11)-(12) recomputed from every activation the
server received, the generation rule against its count identity, exact resume, and one-line errors."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from _helpers import REPO, extended_params
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_sfl.algorithms import GAS, AsyncSFL
from lightning_sfl.callbacks import SimulatedClock
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Federation
from lightning_sfl.system.wireless import WirelessCell

#: 8 clients, 3 in flight, a server update every 3 arrivals, an aggregation every 2 uploads, E = 3, b = 8 rows;
#: cut at s5 (128-dim activations: a full covariance stays small).
KW = {
    "concurrency": 3,
    "flush_every": 3,
    "aggregate_every": 2,
    "client_batch_size": 8,
    "local_iters": 3,
    "lr": 0.05,
    "momentum": 0.5,
    "split_point": "s5",
}


def _dm() -> FederatedDataModule:
    return FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=8, seed=1)


def _trainer(rounds: int, precision: str = "64-true", **kwargs) -> L.Trainer:
    options = {"logger": False, "enable_checkpointing": False, **kwargs}
    return L.Trainer(
        max_epochs=rounds,
        precision=precision,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[SimulatedClock(), *options.pop("callbacks", [])],
        **options,
    )


def _federated(model) -> FederatedDataModule:
    """The data module, federated with ``model`` on GAS's wireless cell (``f_k ~ U[1e9, 1e10]``, placement seed 0)."""
    dm = _dm()
    Federation.build(model, dm, system=WirelessCell(flops_high=1e10))
    return dm


def _fit(model, rounds: int = 3, **kwargs):
    _trainer(rounds, **kwargs).fit(model, _federated(model))
    return model


def _recording(cls):
    """``cls`` that records what reached the server: every arrival step and every server batch."""

    class Recording(cls):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (acts, labels, s(n)) per step
            self.batches: list[tuple[int, torch.Tensor]] = []  # (real rows, labels of the server batch)
            self.groups: list[int] = []
            self.aggregations: list[tuple[list[dict], list[int], dict]] = []

        def buffer_arrivals(self, acts, step):
            self.groups.append(len(step.clients))
            self.seen.append((acts.clone(), step.y.clone(), step.progress[step.owner].clone()))
            super().buffer_arrivals(acts, step)

        def server_batch(self, acts, labels):
            out = super().server_batch(acts, labels)
            self.batches.append((len(acts), out[1].clone()))
            return out

        def aggregate(self, step):
            states, clients = zip(*self.uploads)
            super().aggregate(step)
            after = {k: v.clone() for k, v in self.client.net.state_dict().items()}
            self.aggregations.append((list(states), list(clients), after))

    return Recording


def _state(model, slots: bool = True) -> dict[str, torch.Tensor]:
    """The run's states but the metrics (and the slots unless ``slots``: banks of two kinds store them differently)."""
    skip = ("evaluation.",) if slots else ("evaluation.", "client_banks.")
    return {k: v for k, v in model.state_dict().items() if not k.startswith(skip)}


CASES = {
    "async_sfl": (AsyncSFL, {}),
    "async_sfl_stacked_bank": (AsyncSFL, {"client_bank": "stacked"}),  # the batched run on the stacked bank
    "gas_full_stacked_bank": (GAS, {"client_bank": "stacked", "weight_decay": 1e-3}),
    "async_sfl_code_order": (AsyncSFL, {"gradient_order": "before_server_step", "aggregation": "uniform"}),
    "gas_full": (GAS, {}),
    "gas_diag": (GAS, {"covariance": "diag"}),
}
# not "lowrank": its rank-r truncation after every merge depends on how the arrivals are grouped (by design)


@pytest.mark.parametrize("case", sorted(CASES))
def test_batched_arrivals_equal_one_arrival_at_a_time(case):
    cls, extra = CASES[case]
    torch.manual_seed(0)
    batched = _recording(cls)(**KW, **extra)
    torch.manual_seed(0)
    single = _recording(cls)(**KW, **{**extra, "client_bank": "sequential"}, batch_arrivals=False)
    _fit(batched), _fit(single)
    assert max(batched.groups) > 1 and max(single.groups) == 1  # the batched run did batch
    assert len(single.groups) > len(batched.groups)
    assert type(batched.bank).__name__ == ("StackedBank" if "stacked" in case else "SequentialBank")
    want, got = _state(single, slots=False), _state(batched, slots=False)
    assert want.keys() == got.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-9, atol=1e-10, msg=f"{case}: {k}")
    for slot in range(KW["concurrency"]):  # each slot's client half (weights; the banks store them differently)
        want, got = single.bank.snapshot(slot), batched.bank.snapshot(slot)
        for k in want:
            torch.testing.assert_close(got[k], want[k], rtol=1e-9, atol=1e-10, msg=f"{case}: slot {slot} {k}")
    assert int(batched.server_updates) == int(single.server_updates) > 0


def test_gradient_order_and_aggregation_options_change_the_run():
    runs = {}
    for name, extra in [("paper", {}), ("order", {"gradient_order": "before_server_step"}), ("uniform", {})]:
        torch.manual_seed(0)
        if name == "uniform":
            extra = {"aggregation": "uniform"}
        runs[name] = torch.cat([p.detach().reshape(-1) for p in _fit(AsyncSFL(**KW, **extra)).client.net.parameters()])
    assert (runs["paper"] - runs["order"]).abs().max() > 1e-6
    assert (runs["paper"] - runs["uniform"]).abs().max() > 1e-6


@pytest.mark.parametrize("aggregation", ["data_size", "uniform"])
def test_every_aggregation_is_eq_10_over_the_buffered_uploads(aggregation):
    torch.manual_seed(0)
    model = _fit(_recording(AsyncSFL)(**KW, aggregation=aggregation))
    sizes = _dm()
    sizes.setup("fit")
    assert len(model.aggregations) == 3  # one per round
    for states, clients, after in model.aggregations:
        assert len(states) == KW["aggregate_every"]
        w = [float(sizes.client_stats.sizes[c]) if aggregation == "data_size" else 1.0 for c in clients]
        w = torch.tensor(w, dtype=torch.float64)
        w = w / w.sum()
        for k, v in after.items():
            want = sum(wi * s[k].double() for wi, s in zip(w, states))
            torch.testing.assert_close(v.double(), want, rtol=1e-12, atol=1e-12)
    if aggregation == "data_size":  # clients of unequal sizes: the weights matter
        assert any(len({int(sizes.client_stats.sizes[c]) for c in cl}) > 1 for _, cl, _ in model.aggregations)


def test_statistics_are_eqs_11_12_over_every_activation_received():
    torch.manual_seed(0)
    model = _fit(_recording(GAS)(**KW, covariance="diag"))
    acts = torch.cat([a for a, _, _ in model.seen]).reshape(-1, 128).double()
    labels = torch.cat([y for _, y, _ in model.seen])
    weights = torch.cat([w for _, _, w in model.seen]).double()
    assert weights.min() >= 1 and weights.max() > weights.min()  # s(n) = n = t·E + e grows with progress
    for y in labels.unique().tolist():
        a, w = acts[labels == y], weights[labels == y]
        mean = (w[:, None] * a).sum(0) / w.sum()
        var = (w[:, None] * (a - mean) ** 2).sum(0) / w.sum()  # population form, eq. (12)'s diagonal
        torch.testing.assert_close(model.gauss_weight[y], w.sum())
        torch.testing.assert_close(model.gauss_mean[y], mean, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(model.gauss_second[y], var, rtol=1e-9, atol=1e-10)


def test_server_batches_top_every_label_up_to_b_once_every_label_has_statistics():
    torch.manual_seed(0)
    model = _fit(_recording(GAS)(**KW, covariance="diag"), rounds=8)
    b, generated = KW["client_batch_size"], 0
    for real, labels in model.batches:
        counts = torch.bincount(labels, minlength=10)
        if len(labels) == real:  # before every label has statistics: the buffer only
            continue
        generated += len(labels) - real
        real_counts = torch.bincount(labels[:real], minlength=10)
        assert counts.tolist() == torch.maximum(real_counts, torch.full_like(real_counts, b)).tolist()
    assert generated > 0


def test_resume_from_last_checkpoint_ends_equal(tmp_path):
    def run(rounds, folder, ckpt_path=None):
        torch.manual_seed(0)
        model = GAS(**KW, covariance="diag")
        checkpoint = ModelCheckpoint(dirpath=folder, save_last=True)
        _trainer(rounds, precision="32-true", enable_checkpointing=True, callbacks=[checkpoint]).fit(
            model, _federated(model), ckpt_path=ckpt_path
        )
        return model

    full = run(4, tmp_path / "full")
    run(2, tmp_path / "part")
    resumed = run(4, tmp_path / "part", ckpt_path=str(tmp_path / "part" / "last.ckpt"))
    want, got = _state(full), _state(resumed)
    assert want.keys() == got.keys() and any(k.startswith("client_banks.") for k in want)  # slots are checkpointed
    for k in want:
        assert torch.equal(got[k], want[k]), k


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"flush_every": 0}, "flush_every=0 must be a whole number >= 1"),
        ({"aggregate_every": 0}, "aggregate_every=0 must be a whole number >= 1"),
        ({"local_iters": 0}, "local_iters=0 must be"),
        ({"covariance": "dense"}, "covariance='dense' must be one of: full, diag, lowrank"),
        ({"gradient_order": "late"}, "gradient_order='late' must be one of: after_server_step, before_server_step"),
        ({"aggregation": "mean"}, "aggregation='mean' must be one of: data_size, uniform"),
        ({"rank": 0, "covariance": "lowrank"}, "rank=0 must be a whole number >= 1"),
    ],
)
def test_bad_settings_are_one_line_errors_at_construction(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        GAS(**{**KW, **kwargs})


def test_more_clients_in_flight_than_clients_fails_when_the_fit_starts():
    with pytest.raises(ConfigError, match="concurrency=9 must be <= the number of clients \\(8\\)"):
        _fit(AsyncSFL(**{**KW, "concurrency": 9}), rounds=1)


#: GAS in CI; the other asynchronous methods (~3 s each on two cores) with ``-m extended``.
@pytest.mark.parametrize(
    "name", extended_params(["gas", "async_sfl", "fedbuff", "ca2fl"], {"async_sfl", "fedbuff", "ca2fl"})
)
def test_digits_config_runs_from_the_cli_and_logs_the_simulated_clock(name, tmp_path):
    import csv

    from lightning_sfl.lightning_cli import SFLCLI

    config = REPO / "configs" / "digits" / f"{name}.yaml"
    SFLCLI(
        args=[
            "fit",
            "--config",
            str(config),
            "--trainer.max_epochs=2",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
            f"--trainer.logger.save_dir={tmp_path}",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    (metrics,) = tmp_path.rglob("metrics.csv")
    rows = [r for r in csv.DictReader(open(metrics)) if r.get("clock/elapsed_seconds")]
    elapsed = [float(r["clock/elapsed_seconds"]) for r in rows]
    assert len(elapsed) == 2 and 0 < elapsed[0] < elapsed[1]  # simulated seconds at the end of each aggregation
    assert [float(r["clock/round_seconds"]) for r in rows] == pytest.approx([elapsed[0], elapsed[1] - elapsed[0]])


@pytest.mark.parametrize("dataset,rounds", [("cifar10", 2000), ("cinic10", 2000), ("fashion_mnist", 1000)])
def test_paper_configs_hold_the_gas_paper_settings(dataset, rounds):

    import yaml

    config = yaml.safe_load((REPO / "configs" / dataset / "gas.yaml").read_text())
    m, d = config["model"]["init_args"], config["data"]
    assert config["model"]["class_path"] == "lightning_sfl.algorithms.GAS" and config["trainer"]["max_epochs"] == rounds
    assert (d["num_clients"], m["concurrency"], m["local_iters"], m["client_batch_size"]) == (20, 10, 20, 32)
    assert (m["flush_every"], m["aggregate_every"], m["covariance"], m["split_point"]) == (10, 10, "full", "s2")
    assert (m["lr"], m["momentum"], m["weight_decay"], float(config["clock"]["flops_high"])) == (0.01, 0.9, 5e-4, 1e10)
    assert (d["partition"], d["shards_per_client"]) == ("shards", 2)


@pytest.mark.parametrize("dataset", ["digits", "mnist5k", "fashion_mnist", "cifar10", "cinic10"])
def test_the_synchronous_baselines_of_a_gas_config_take_b_rows_a_client(dataset):
    """``--model fedavg`` (or MiniBatch-SFL, S²FL) on a GAS config: ``C`` clients a round sharing ``B·C`` rows
    (``data.batch_size``, split by eq. 3), i.e. ``B`` rows for each client of equal ``|D_k|``, as the asynchronous
    methods' ``client_batch_size`` (the GAS paper: every method takes minibatches of 32)."""

    import torch
    import yaml

    from lightning_sfl.loop.sampling import client_batch_sizes, clients_per_round

    config = yaml.safe_load((REPO / "configs" / dataset / "gas.yaml").read_text())
    m, d = config["model"]["init_args"], config["data"]
    clients = clients_per_round(d["num_clients"], d["participation"])
    assert clients == m["concurrency"]
    rows = client_batch_sizes(torch.full((clients,), 600), d["batch_size"])
    assert rows.tolist() == [m["client_batch_size"]] * clients


@pytest.mark.parametrize(
    ("cls", "concurrency", "batch_arrivals", "stacked"),
    [
        (AsyncSFL, 16, True, True),  # arrivals in waves, from AUTO_STACKED_MIN_SLOTS_ASYNC_CPU slots on
        (AsyncSFL, 15, True, False),
        (GAS, 16, False, False),  # one arrival a step: nothing to stack
    ],
)
def test_auto_bank_stacks_the_arrivals_waves_from_sixteen_slots_on_a_cpu(cls, concurrency, batch_arrivals, stacked):
    """``client_bank="auto"`` on a CPU: the stacked bank for the activation arrivals in waves from 16 slots on (what
    ``benchmarks/async_arrivals.py`` measured faster), the sequential bank below and for arrivals one at a time."""
    from lightning_sfl.runtime.client_bank import SequentialBank
    from lightning_sfl.runtime.stacked_bank import AUTO_STACKED_MIN_SLOTS_ASYNC_CPU, StackedBank

    assert AUTO_STACKED_MIN_SLOTS_ASYNC_CPU == 16
    options = {**KW, "concurrency": concurrency, "batch_arrivals": batch_arrivals, "client_bank": "auto"}
    model = cls(**{**options, "covariance": "diag"} if cls is GAS else options)
    dm = FederatedDataModule(dataset="digits", num_clients=20, alpha=2, participation=0.5, batch_size=16, seed=1)
    Federation.build(model, dm, system=WirelessCell(flops_high=1e10))
    _trainer(1).fit(model, dm)
    assert isinstance(model.bank, StackedBank if stacked else SequentialBank)
