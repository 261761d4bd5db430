"""Semi-SFL's system model (:class:`~lightning_sfl.system.devices.EdgeDevices`): per-iteration Gaussian compute times
per device type, fluctuating links, the server's supervised phase; checked against hand computations, by statistics
of the draws, and on a fit from the command line."""

from __future__ import annotations

import csv
import doctest
import math
from types import SimpleNamespace

import pytest
import torch
from _helpers import REPO

import lightning_sfl.system.devices as devices_module
from lightning_sfl.errors import ConfigError
from lightning_sfl.system.devices import DEVICE_GFLOPS, EdgeDevices, iteration_seconds, link_rates
from lightning_sfl.system.timing import RoundTraffic
from lightning_sfl.system.wireless import WirelessCell


def costs(training=1e9, full=3e9, split=True):
    """What a client model costs: ``training`` FLOPs a sample on the client, ``full`` for the whole model."""
    return SimpleNamespace(training_flops=training, full_training_flops=full, sends_activations=split)


def traffic(clients, samples, iterations, by_kind, round_idx=0, server_rows=0):
    as_long = lambda v: torch.tensor(v, dtype=torch.long)  # noqa: E731
    by_kind = {key: as_long(v) for key, v in by_kind.items()}
    up = sum((v for (d, _), v in by_kind.items() if d == "up"), torch.zeros(len(clients), dtype=torch.long))
    down = sum((v for (d, _), v in by_kind.items() if d == "down"), torch.zeros(len(clients), dtype=torch.long))
    acts = int(by_kind.get(("up", "activations"), torch.zeros(1)).sum())
    return RoundTraffic(
        as_long(clients), as_long(samples), as_long(iterations), up, down, acts, round_idx, server_rows, by_kind
    )


def fixed(barrier="iteration", **kwargs):
    """No randomness: no compute noise, one rate up (4 Mbit/s) and one down (10 Mbit/s)."""
    return EdgeDevices(device_cv=0.0, uplink_mbps=[4, 4], downlink_mbps=[10, 10], barrier=barrier, seed=0, **kwargs)


def test_doctests_pass():
    result = doctest.testmod(devices_module)
    assert result.attempted > 0 and result.failed == 0


def test_iteration_barrier_round_by_hand():
    system = fixed(device_types=["slow", "fast"], device_gflops=[1.0, 2.0], server_gflops=10.0)
    system.bind(2, seed=0, costs=costs())
    system.client_types = torch.tensor([0, 1])  # client 0 slow (1 GFLOP/s), client 1 fast (2 GFLOP/s)
    # client 0: 2 iterations of 3 rows; client 1: 1 iteration of 2 rows; 100 labelled rows on the server
    kinds = {
        ("up", "activations"): [2000, 500],  # per iteration: 1000 B and 500 B
        ("down", "gradients"): [4000, 1000],  # per iteration: 2000 B and 1000 B
        ("down", "client_half"): [5000, 5000],
        ("up", "client_half"): [6000, 6000],
    }
    seconds = system.round_seconds(traffic([0, 1], [6, 2], [2, 1], kinds, server_rows=100))
    server = 100 * 3e9 / 10e9
    model_down = 8 * 5000 / 10e6
    # iteration 1: client 0 computes 3 rows at 1 GFLOP/s, client 1 2 rows at 2 GFLOP/s, each plus its exchange
    it1 = max(3.0 + 8 * 1000 / 4e6 + 8 * 2000 / 10e6, 1.0 + 8 * 500 / 4e6 + 8 * 1000 / 10e6)
    it2 = 3.0 + 8 * 1000 / 4e6 + 8 * 2000 / 10e6  # client 1 is done
    model_up = 8 * 6000 / 4e6
    assert seconds == pytest.approx(server + model_down + it1 + it2 + model_up, rel=1e-12)


def test_round_barrier_adds_each_clients_times_and_waits_for_the_slowest():
    system = fixed(barrier="round", device_types=["a"], device_gflops=[1.0], server_gflops=1.0)
    system.bind(3, seed=0, costs=costs(split=False))
    kinds = {("down", "full_model"): [1000, 1000, 1000], ("up", "full_model"): [1000, 1000, 1000]}
    seconds = system.round_seconds(traffic([2, 0, -1], [4, 1, 0], [2, 1, 0], kinds))
    slowest = 8 * 1000 / 10e6 + 2 * (2 * 1e9 / 1e9) + 8 * 1000 / 4e6  # client 2: two iterations of 2 rows
    assert seconds == pytest.approx(slowest, rel=1e-12)
    assert system.last_client_seconds.tolist() == pytest.approx([slowest, 8e-4 + 1.0 + 2e-3])


def test_a_round_without_clients_is_the_servers_phase():
    system = fixed(server_gflops=2.0)
    system.bind(4, seed=0, costs=costs(full=5e9))
    assert system.round_seconds(traffic([-1, -1], [0, 0], [0, 0], {}, server_rows=8)) == pytest.approx(20.0)


def test_iteration_times_are_gaussian_with_the_types_mean_and_spread():
    g = torch.Generator().manual_seed(0)
    draws = iteration_seconds(torch.tensor([2.0, 0.5]), torch.tensor([0.1, 0.3]), 20_000, g)
    assert draws.mean(dim=1).tolist() == pytest.approx([2.0, 0.5], rel=0.01)
    assert (draws.std(dim=1) / draws.mean(dim=1)).tolist() == pytest.approx([0.1, 0.3], rel=0.03)
    assert float(draws.min()) >= 0.05  # clipped at a tenth of the mean


def test_rates_stay_in_range_and_vary_by_round_not_by_call():
    rates = link_rates(50_000, [2, 8], torch.Generator().manual_seed(0))
    assert 2e6 <= float(rates.min()) and float(rates.max()) <= 8e6
    assert float(rates.mean()) == pytest.approx(5e6, rel=0.01)
    system = EdgeDevices(seed=3)
    system.bind(10, seed=0, costs=costs())
    kinds = {("up", "activations"): [10_000] * 3, ("down", "gradients"): [10_000] * 3}
    t = lambda r: system.round_seconds(traffic([0, 4, 7], [30, 30, 30], [3, 3, 3], kinds, round_idx=r))  # noqa: E731
    assert t(5) == t(5) and t(5) != t(6)  # the same round draws the same (a resumed run), another round not


def test_default_types_split_the_clients_evenly_and_follow_the_seed():
    system = EdgeDevices(seed=1)
    system.bind(31, seed=0, costs=costs())
    counts = torch.bincount(system.client_types, minlength=2).tolist()
    assert sorted(counts) == [15, 16]
    again = EdgeDevices(seed=1)
    again.bind(31, seed=0, costs=costs())
    assert torch.equal(system.client_types, again.client_types)
    other = EdgeDevices(seed=None)  # follows the data seed
    other.bind(31, seed=2, costs=costs())
    assert not torch.equal(system.client_types, other.client_types)
    share = EdgeDevices(device_share=[3, 1], seed=0)
    share.bind(8, seed=0, costs=costs())
    assert torch.bincount(share.client_types).tolist() == [6, 2]


def test_mean_iteration_time_scales_with_the_model_and_the_device():
    system = EdgeDevices(seed=0)
    system.bind(2, seed=0, costs=costs(training=101e6))
    system.client_types = torch.tensor([0, 1])
    mean = system.mean_iteration_seconds(torch.tensor([0, 1]), torch.tensor([64.0, 64.0]))
    expected = [64 * 101e6 / (1e9 * DEVICE_GFLOPS[t]) for t in ("jetson_nx", "jetson_agx")]
    assert mean.tolist() == pytest.approx(expected, rel=1e-12)


def test_asynchronous_times_use_the_mean_speed_and_the_middle_uplink():
    system = EdgeDevices(device_types=["a", "b"], device_gflops=[1.0, 4.0], uplink_mbps=[2, 6], seed=0)
    split = SimpleNamespace(
        training_flops=3e9, forward_flops=1e9, backward_flops=2e9, sends_activations=True, model_bytes=1000,
        activation_row_bits=800.0,
    )  # fmt: skip
    system.bind(2, seed=0, costs=split)
    system.client_types = torch.tensor([0, 1])
    times = system.client_times(torch.tensor([2, 4]), concurrency=2)
    assert times.forward.tolist() == pytest.approx([2 * 1e9 / 1e9, 4 * 1e9 / 4e9])
    assert times.backward.tolist() == pytest.approx([2 * 2e9 / 1e9, 4 * 2e9 / 4e9])
    assert times.activation_upload.tolist() == pytest.approx([2 * 800 / 4e6, 4 * 800 / 4e6])
    assert times.model_upload.tolist() == pytest.approx([8000 / 4e6] * 2)


def test_state_dict_keeps_the_device_types():
    system = EdgeDevices(seed=4)
    system.bind(12, seed=0, costs=costs())
    restored = EdgeDevices()  # a resumed run keeps the checkpoint's devices (its seed, not the data's)
    restored.load_state_dict(system.state_dict())
    restored.bind(12, seed=9, costs=costs())
    assert torch.equal(restored.client_types, system.client_types) and restored.seed == 4
    with pytest.raises(ConfigError, match="other system options, or another torch version"):
        EdgeDevices(device_share=[1, 5]).load_state_dict(system.state_dict())  # other shares: other devices


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"device_types": ["tx2"]}, "device_types ['tx2'] have no default throughput"),
        ({"device_gflops": [1.0]}, "device_gflops has 1 values; device_types has 2"),
        ({"uplink_mbps": [8, 2]}, "uplink_mbps=[8, 2] must be [low, high] with 0 < low <= high"),
        ({"barrier": "never"}, "barrier='never' must be one of: iteration, round"),
        ({"device_cv": -1.0}, "device_cv=[-1.0, -1.0] must be >= 0"),
        ({"server_gflops": 0}, "server_gflops=0 must be > 0"),
    ],
)
def test_bad_settings_name_the_argument(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        EdgeDevices(**kwargs)


def test_semi_sfl_fit_on_edge_devices_logs_the_clock(tmp_path):
    """The CLI selects the system model with --clock; each round's time is the server's phase plus the clients'."""
    from lightning_sfl.lightning_cli import SFLCLI

    args = [
        "fit",
        "--config",
        str(REPO / "configs/digits/semi_sfl.yaml"),
        "--clock",
        "EdgeDevices",
        "--trainer.max_epochs=2",
        f"--trainer.default_root_dir={tmp_path}",
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.save_dir={tmp_path}",
        "--trainer.enable_progress_bar=false",
        "--run_name=",
    ]
    cli = SFLCLI(args=args)
    system = cli.model.federation.system
    assert isinstance(system, EdgeDevices)
    rows = list(csv.DictReader(open(next(tmp_path.rglob("metrics.csv")))))
    seconds = [float(r["clock/round_seconds"]) for r in rows if r.get("clock/round_seconds")]
    elapsed = [float(r["clock/elapsed_seconds"]) for r in rows if r.get("clock/elapsed_seconds")]
    assert len(seconds) == 2 and elapsed == pytest.approx([seconds[0], seconds[0] + seconds[1]])
    server = 30 * 32 * system.costs.full_training_flops / system.server_flops  # K_s = 30 steps of 32 rows
    assert all(s > server > 0 for s in seconds)
    assert all(math.isfinite(s) for s in seconds)


@pytest.mark.parametrize("kind", ["edge", "wireless"])
def test_a_checkpoint_keeps_the_seed_and_k_of_the_draws_not_k_numbers_and_a_resume_draws_them_again(kind):
    """The system model's state holds no ``[K]`` tensor (a checkpoint's size does not grow with ``K``); restoring it
    draws the same clients again, checked against the digest; draws that differ (another torch) are refused."""
    make = (lambda: EdgeDevices(seed=5)) if kind == "edge" else (lambda: WirelessCell(seed=5))  # noqa: E731
    system = make()
    system.bind(10_000, seed=0, costs=costs())
    state = system.state_dict()
    assert not any(torch.is_tensor(v) for v in state.values()) and state["num_clients"] == 10_000
    restored = make()
    restored.load_state_dict(state)
    for name in ("client_types",) if kind == "edge" else ("distances_m", "capacities"):
        assert torch.equal(getattr(restored, name), getattr(system, name))
    with pytest.raises(ConfigError, match="differ from what these options draw with this torch"):
        make().load_state_dict({**state, "draws": "0" * 40})
