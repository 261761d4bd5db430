"""Wireless/compute system model (channel.py, flops.py, the WirelessCell) and the SimulatedClock callback that logs
its times."""

from __future__ import annotations

import csv
import doctest
import math
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from _helpers import round_steps
from lightning.pytorch.loggers import CSVLogger
from torch import nn

import lightning_sfl.system.channel as channel_module
import lightning_sfl.system.flops as flops_module
from lightning_sfl.algorithms import SCALA, FedAvg
from lightning_sfl.callbacks.comm_bytes import CommunicationBytes
from lightning_sfl.callbacks.simulated_clock import SimulatedClock
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.loop import Federation
from lightning_sfl.system.channel import (
    bandwidth_per_client,
    channel_gain,
    compute_capacities,
    noise_psd_w_per_hz,
    path_loss_db,
    place_clients,
    uplink_rates,
)
from lightning_sfl.system.flops import training_flops_per_sample
from lightning_sfl.system.wireless import WirelessCell


def test_module_doctests_pass():
    for module in (channel_module, flops_module):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


# ---------------------------------------------------------------------- channel
def test_path_loss_and_gain():
    assert float(path_loss_db(1.0)) == pytest.approx(128.1, abs=1e-12)  # log10(1 km) = 0
    assert float(path_loss_db(0.1)) == pytest.approx(128.1 - 37.6, abs=1e-12)
    assert float(path_loss_db(torch.tensor([2.0]))[0]) == pytest.approx(128.1 + 37.6 * 0.30102999566, abs=1e-9)
    assert float(channel_gain(1000.0)) == pytest.approx(10**-12.81, rel=1e-12)  # metres in, -PL/10 dB
    assert noise_psd_w_per_hz(-174.0) == pytest.approx(3.981e-21, rel=1e-3)  # the GAS code's N


def test_distance_guard_keeps_the_origin_finite():
    at_zero, at_min = channel_gain(torch.tensor([0.0, 1.0]))
    assert torch.isfinite(at_zero) and at_zero == at_min  # clamped to 1 m instead of log10(0) = -inf
    assert torch.isfinite(uplink_rates(torch.tensor([0.0]), 1e6)).all()


def test_rate_hand_example():
    # r = 500 m, W = 1 MHz, p = 0.2 W, N0 = -174 dBm/Hz, evaluated by hand:
    # PL = 128.1 + 37.6*log10(0.5) = 116.78127 dB -> g = 10^(-11.678127) = 2.0983251e-12
    # N0 = 10^(-20.4) W/Hz = 3.9810717e-21 -> N0*W = 3.9810717e-15 W
    # SNR = 0.2 * 2.0983251e-12 / 3.9810717e-15 = 105.41509 -> rate = 1e6 * log2(106.41509) = 6.7335589e6 bit/s
    assert 1e6 * math.log2(1 + 105.41509) == pytest.approx(6.7335589e6, rel=1e-7)  # the arithmetic above
    rate = uplink_rates(torch.tensor([500.0]), bandwidth_hz_per_client=1e6)
    assert float(rate[0]) == pytest.approx(6.7335589e6, rel=1e-7)
    explicit = uplink_rates(torch.tensor([500.0]), 1e6, tx_power_w=0.2, noise_dbm_per_hz=-174.0)
    assert float(explicit[0]) == float(rate[0])
    # 4x the power at the same bandwidth: log2(1 + 4*105.41509)
    assert float(uplink_rates(torch.tensor([500.0]), 1e6, tx_power_w=0.8)[0]) == pytest.approx(
        1e6 * math.log2(1 + 4 * 105.41509), rel=1e-7
    )


def test_bandwidth_is_shared_equally_and_rates_fall_with_distance():
    assert bandwidth_per_client(10e6, 4) == 2.5e6
    with pytest.raises(ValueError):
        bandwidth_per_client(10e6, 0)
    rates = uplink_rates(torch.tensor([100.0, 500.0, 1000.0]), bandwidth_per_client(10e6, 5))
    assert (rates[:-1] > rates[1:]).all()
    # less bandwidth each: lower rate, but higher spectral efficiency (less noise in the band)
    narrow = uplink_rates(torch.tensor([500.0]), 1e6)
    wide = uplink_rates(torch.tensor([500.0]), 2e6)
    assert narrow < wide and narrow / 1e6 > wide / 2e6


def test_clients_are_uniform_in_the_disc():
    g = torch.Generator().manual_seed(3)
    r = place_clients(200_000, radius_m=1000.0, generator=g)
    assert r.dtype == torch.float64 and r.shape == (200_000,)
    assert (r >= 0).all() and (r < 1000.0).all()
    # uniform in area: P(r <= R/2) = 1/4 (std of the estimate ~1e-3), P(r <= R/sqrt(2)) = 1/2
    assert float((r <= 500.0).double().mean()) == pytest.approx(0.25, abs=5e-3)
    assert float((r <= 1000.0 / math.sqrt(2)).double().mean()) == pytest.approx(0.5, abs=5e-3)
    assert (place_clients(100, radius_m=50.0, generator=g) < 50.0).all()


def test_capacities_in_range_and_deterministic_per_seed():
    def draw(seed: int) -> torch.Tensor:
        return compute_capacities(10_000, 1e9, 5e9, generator=torch.Generator().manual_seed(seed))

    caps = draw(0)
    assert ((caps >= 1e9) & (caps <= 5e9)).all()
    assert float(caps.mean()) == pytest.approx(3e9, rel=0.02)
    assert torch.equal(caps, draw(0)) and not torch.equal(caps, draw(1))
    gas = compute_capacities(1000, 1e9, 1e10, generator=torch.Generator().manual_seed(0))
    assert ((gas >= 1e9) & (gas <= 1e10)).all() and gas.max() > 5e9


# ---------------------------------------------------------------------- FLOPs
def test_linear_flops_per_sample_match_the_hand_count():
    # FlopCounterMode counts matrix products only (2 FLOPs per multiply-add), not the bias add or its gradient.
    # Linear(10, 5): forward 2*10*5 = 100; backward: weight gradient 2*10*5 = 100; no input gradient (data).
    assert training_flops_per_sample(nn.Linear(10, 5), (10,)) == 200.0
    # A second layer also back-propagates into its input: 2*5*3 forward + 2*(2*5*3) backward.
    two = nn.Sequential(nn.Linear(10, 5), nn.ReLU(), nn.Linear(5, 3))
    assert training_flops_per_sample(two, (10,)) == 200.0 + 3 * 30.0
    # per sample: the batch size does not matter
    assert training_flops_per_sample(nn.Linear(10, 5), (10,), batch_size=7) == 200.0


def test_flop_counting_leaves_the_module_untouched():
    net = nn.Sequential(nn.Linear(10, 5), nn.BatchNorm1d(5), nn.Dropout(0.5), nn.Linear(5, 3))
    net[0].weight.grad = torch.randn(5, 10)  # a pending gradient must survive; the others stay None
    net.eval()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    grads = {n: None if p.grad is None else p.grad.clone() for n, p in net.named_parameters()}
    rng = torch.get_rng_state()
    flops = training_flops_per_sample(net, (10,))
    assert flops == 200.0 + 3 * 30.0  # batch norm and dropout are not counted
    after = net.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # weights and BN running stats
    for n, p in net.named_parameters():
        assert (p.grad is None) if grads[n] is None else torch.equal(p.grad, grads[n]), n
    assert not net.training and torch.equal(torch.get_rng_state(), rng)


# ---------------------------------------------------------------------- the callback
def _hand_clock(seed: int, num_clients: int):
    """Placement and speeds as documented: one generator, distances R*sqrt(U) first, then U[1e9, 5e9]."""
    g = torch.Generator().manual_seed(seed)
    d = [1000.0 * math.sqrt(u) for u in torch.rand(num_clients, generator=g, dtype=torch.float64).tolist()]
    f = [1e9 + 4e9 * u for u in torch.rand(num_clients, generator=g, dtype=torch.float64).tolist()]
    return d, f


def _hand_rate(d_m: float, w_hz: float) -> float:
    pl = 128.1 + 37.6 * math.log10(d_m / 1000.0)
    return w_hz * math.log2(1 + 0.2 * 10 ** (-pl / 10) / (10 ** (-20.4) * w_hz))


def test_client_seconds_formula_and_downlink():
    clock = WirelessCell(seed=5)
    clock.draw_system(6)
    clock.costs = SimpleNamespace(training_flops=1e6)
    d, f = _hand_clock(5, 6)
    assert clock.distances_m.tolist() == pytest.approx(d, rel=1e-12)
    assert clock.capacities.tolist() == pytest.approx(f, rel=1e-12)
    clients, sizes = torch.tensor([1, 4]), torch.tensor([3, 9])
    up, down = torch.tensor([10_000, 20_000]), torch.tensor([5_000, 7_000])
    t = clock.client_seconds(clients, 4 * sizes, up, down)  # T = 4 iterations of B_k rows
    for j, k in enumerate(clients.tolist()):
        rate = _hand_rate(d[k], 10e6 / 2)
        compute = 4 * int(sizes[j]) * 1e6 / f[k]
        assert float(t[j]) == pytest.approx(compute + 8 * int(up[j]) / rate, rel=1e-12)
        clock.include_downlink = True
        both = clock.client_seconds(clients, 4 * sizes, up, down)
        clock.include_downlink = False
        assert float(both[j]) == pytest.approx(compute + 8 * int(up[j] + down[j]) / rate, rel=1e-12)


def _read_metrics(logger: CSVLogger) -> list[dict[str, str]]:
    with open(f"{logger.log_dir}/metrics.csv") as fh:
        return list(csv.DictReader(fh))


def _fit(tmp_path, model, clock: WirelessCell, max_epochs: int):
    dm = FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)
    Federation.build(model, dm, system=clock)
    logger = CSVLogger(tmp_path)
    trainer = L.Trainer(
        max_epochs=max_epochs,
        logger=logger,
        callbacks=[SimulatedClock(), CommunicationBytes()],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
        accelerator="cpu",
        default_root_dir=tmp_path,
    )
    trainer.fit(model, datamodule=dm)
    rows = [r for r in _read_metrics(logger) if r.get("clock/round_seconds")]
    return dm, rows


def test_simulated_clock_on_a_scala_fit(tmp_path):
    clock = WirelessCell()
    model = SCALA(local_iters=2, lr=0.05)
    dm, rows = _fit(tmp_path, model, clock, max_epochs=2)
    assert [int(r["epoch"]) for r in rows] == [0, 1]

    # Ledger-equivalent numbers of cnn_small cut at s2 on 1x8x8 digits, by hand:
    # client half = Conv2d(1, 32, 3, p=1) -> ReLU -> Conv2d(32, 64, 3, p=1) -> ReLU -> MaxPool2d(2): [64, 4, 4]
    conv1, conv2 = 2 * 32 * 8 * 8 * (1 * 9), 2 * 64 * 8 * 8 * (32 * 9)  # forward FLOPs per sample
    flops_per_sample = 2 * conv1 + 3 * conv2  # conv1: + weight grad; conv2: + weight and input grads
    act_row, label_row = 64 * 4 * 4 * 4, 8  # float32 activations, int64 labels
    client_half = 4 * (32 * 1 * 9 + 32 + 64 * 32 * 9 + 64)  # float32 weights and biases
    assert clock.costs.training_flops == flops_per_sample
    d, f = _hand_clock(0, 8)
    T = 2

    elapsed = 0.0
    for r, row in enumerate(rows):
        batch = round_steps(dm, r)[0]
        clients, sizes = batch.clients.tolist(), batch.sizes.tolist()
        w = 10e6 / len(clients)
        up = [T * b * (act_row + label_row) + client_half for b in sizes]
        times = [T * b * flops_per_sample / f[k] + 8 * u / _hand_rate(d[k], w) for k, b, u in zip(clients, sizes, up)]
        elapsed += max(times)
        assert float(row["comm/up_bytes"]) == sum(up)  # the ledger agrees with the hand count
        assert float(row["clock/round_seconds"]) == pytest.approx(max(times), rel=1e-6)
        assert float(row["clock/elapsed_seconds"]) == pytest.approx(elapsed, rel=1e-6)
        assert max(times) > 0
    assert model.federation.elapsed_seconds == pytest.approx(elapsed, rel=1e-12)
    assert float(rows[1]["clock/elapsed_seconds"]) == pytest.approx(
        float(rows[0]["clock/round_seconds"]) + float(rows[1]["clock/round_seconds"]), rel=1e-6
    )

    state = model.federation.state_dict()
    other = WirelessCell(seed=123)
    other.load_state_dict(state["system"])
    assert state["elapsed_seconds"] == model.federation.elapsed_seconds and other.seed == 0
    assert torch.equal(other.distances_m, clock.distances_m) and torch.equal(other.capacities, clock.capacities)


def test_simulated_clock_on_plain_fl(tmp_path):
    clock = WirelessCell(seed=2, include_downlink=True)
    _, rows = _fit(tmp_path, FedAvg(local_iters=2, lr=0.05), clock, max_epochs=1)
    assert len(rows) == 1
    t = float(rows[0]["clock/round_seconds"])
    assert math.isfinite(t) and t > 0 and float(rows[0]["clock/elapsed_seconds"]) == pytest.approx(t, rel=1e-6)
    assert t == pytest.approx(float(clock.last_client_seconds.max()), rel=1e-6)
    assert clock.costs.training_flops > 7151616  # the whole model, not only the layers before s2
