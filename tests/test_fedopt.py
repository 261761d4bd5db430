"""FedOpt family (FedAvgM, FedAdagrad, FedAdam, FedYogi): the server step by hand, one round against FedAvg's
pseudo-gradient, and the neutral FedAvgM equals FedAvg."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from _helpers import quiet_trainer

from lightning_sfl.algorithms.fedavg import FedAvg
from lightning_sfl.algorithms.fedopt import FedAdagrad, FedAdam, FedAvgM, FedYogi, server_step
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.errors import ConfigError


def _fit(cls, rounds: int, **kwargs):
    """``(initial, trained)`` models of ``rounds`` rounds of 2 local iterations from seed 0 on digits."""
    torch.manual_seed(0)
    model = cls(local_iters=2, lr=0.1, **kwargs)
    model0 = copy.deepcopy(model)
    dm = FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)
    trainer = quiet_trainer(rounds, limit_val_batches=0)
    trainer.fit(model, dm)
    return model0, model


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.client.net.parameters()])


def _reference(kind: str, x, d, m, v, lr, b1, b2, tau):
    """The server step of one coordinate in plain floats (Reddi et al. 2021, Algorithm 2; Hsu et al. 2019)."""
    if kind == "momentum":
        m = b1 * m + d
        return x + lr * m, m, v
    m = b1 * m + (1 - b1) * d
    if kind == "adagrad":
        v = v + d * d
    elif kind == "adam":
        v = b2 * v + (1 - b2) * d * d
    else:  # yogi
        s = (v > d * d) - (v < d * d)
        v = v - (1 - b2) * d * d * s
    return x + lr * m / (math.sqrt(v) + tau), m, v


@pytest.mark.parametrize("kind", ["momentum", "adagrad", "adam", "yogi"])
def test_server_step_by_hand(kind):
    x, d = [1.0, -2.0, 0.3], [0.5, -0.1, 0.2]
    m, v = [0.2, 0.0, -0.1], [0.01, 0.04, 0.01]  # yogi: v > Δ², v < Δ² and v < Δ² again
    got = server_step(kind, *(torch.tensor(t, dtype=torch.float64) for t in (x, d, m, v)), 0.3, 0.9, 0.99, 1e-3)
    for i in range(3):
        want = _reference(kind, x[i], d[i], m[i], v[i], 0.3, 0.9, 0.99, 1e-3)
        assert [float(t[i]) for t in got] == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_neutral_fedavgm_equals_fedavg():
    _, ref = _fit(FedAvg, 2)
    _, same = _fit(FedAvgM, 2, server_momentum=0.0, server_lr=1.0)
    torch.testing.assert_close(_flat(same), _flat(ref), rtol=0, atol=1e-6)
    _, other = _fit(FedAvgM, 2, server_momentum=0.9, server_lr=1.0)
    assert (_flat(other) - _flat(ref)).abs().max() > 1e-4


@pytest.mark.parametrize(
    "cls,kind,kwargs",
    [
        (FedAdam, "adam", {}),
        (FedYogi, "yogi", {}),
        (FedAdagrad, "adagrad", {"server_lr": 0.05}),
        (FedAvgM, "momentum", {"server_momentum": 0.5, "server_lr": 0.7}),
    ],
    ids=["FedAdam", "FedYogi", "FedAdagrad", "FedAvgM"],
)
def test_one_round_is_the_server_step_on_fedavgs_pseudo_gradient(cls, kind, kwargs):
    """Round 1 trains the clients exactly as FedAvg does, so ``Δ`` is FedAvg's average minus the initial model."""
    x0, avg = (_flat(m) for m in _fit(FedAvg, 1))
    _, model = _fit(cls, 1, **kwargs)
    delta = (avg - x0).double()
    lr, b1, b2, tau = model.server_lr, model.beta1, model.beta2, model.tau
    if kind == "momentum":
        m, v, step = delta, torch.zeros_like(delta), lr * delta
    else:
        m = (1 - b1) * delta
        v0 = torch.full_like(delta, tau**2)  # v_{-1} = τ²
        v = {"adam": b2 * v0 + (1 - b2) * delta**2, "adagrad": v0 + delta**2}.get(kind)
        if v is None:  # yogi
            v = v0 - (1 - b2) * delta**2 * torch.sign(v0 - delta**2)
        step = lr * m / (v.sqrt() + tau)
    torch.testing.assert_close(_flat(model).double(), x0.double() + step, rtol=0, atol=2e-6)
    torch.testing.assert_close(model.server_m.double(), m, rtol=0, atol=1e-7)
    if kind != "momentum":
        torch.testing.assert_close(model.server_v.double(), v, rtol=1e-5, atol=1e-12)
    assert {"server_m", "server_v"} <= set(model.state_dict())  # checkpointed


@pytest.mark.parametrize(
    "cls,kwargs,text",
    [
        (FedAdam, {"server_lr": 0}, "server_lr=0 must be > 0"),
        (FedAdam, {"beta1": 1.0}, "beta1=1.0 must be in [0, 1)"),
        (FedYogi, {"beta2": -0.1}, "beta2=-0.1 must be in [0, 1)"),
        (FedAdagrad, {"tau": 0.0}, "tau=0.0 must be > 0"),
        (FedAvgM, {"server_momentum": 1.5}, "server_momentum=1.5 must be in [0, 1)"),
    ],
)
def test_bad_settings_are_one_line(cls, kwargs, text):
    with pytest.raises(ConfigError, match=text.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        cls(**kwargs)
