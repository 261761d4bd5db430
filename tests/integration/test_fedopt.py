"""FedOpt family (FedAvgM, FedAdagrad, FedAdam, FedYogi): the server step by hand, one round against FedAvg's
pseudo-gradient, and the neutral FedAvgM equals FedAvg."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from _helpers import quiet_trainer

from lightning_sfl.algorithms.fedavg import FedAvg
from lightning_sfl.algorithms.fedopt import (
    FedAdagrad,
    FedAdam,
    FedAvgM,
    FedYogi,
    flower_bias_corrected_lr,
    server_step,
)
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
        (FedAdam, "adam", {"tau": 1e-9, "initial_second_moment": 0.0, "bias_correction": True}),
        (FedYogi, "yogi", {}),
        (FedAdagrad, "adagrad", {"server_lr": 0.05}),
        (FedAvgM, "momentum", {"server_momentum": 0.5, "server_lr": 0.7}),
    ],
    ids=["FedAdam", "FedAdam-Flower", "FedYogi", "FedAdagrad", "FedAvgM"],
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
        v0 = torch.full_like(delta, kwargs.get("initial_second_moment", tau**2))  # v_{-1} = τ² unless given
        if kwargs.get("bias_correction"):  # Flower's FedAdam, first round: η·√(1 − β2²)/(1 − β1²)
            lr = lr * math.sqrt(1 - b2**2) / (1 - b1**2)
        v = {"adam": b2 * v0 + (1 - b2) * delta**2, "adagrad": v0 + delta**2}.get(kind)
        if v is None:  # yogi
            v = v0 - (1 - b2) * delta**2 * torch.sign(v0 - delta**2)
        step = lr * m / (v.sqrt() + tau)
    torch.testing.assert_close(_flat(model).double(), x0.double() + step, rtol=0, atol=2e-6)
    torch.testing.assert_close(model.server_m.double(), m, rtol=0, atol=1e-7)
    if kind != "momentum":
        torch.testing.assert_close(model.server_v.double(), v, rtol=1e-5, atol=1e-12)
    assert {"server_m", "server_v", "server_steps"} <= set(model.state_dict()) and int(model.server_steps) == 1


def test_the_uniform_average_is_algorithm_2s_pseudo_gradient():
    """``average="uniform"``: ``Δ`` of round 1 is the unweighted mean of the clients' models minus the initial model,
    which SCAFFOLD's uniform average (its control variates are 0 in round 1) computes independently; on these
    quantity-skewed shards it differs from the ``|D_k|``-weighted ``Δ``."""
    from lightning_sfl.algorithms.scaffold import Scaffold

    x0, uniform = (_flat(m).double() for m in _fit(Scaffold, 1, average="uniform"))
    _, sized = (_flat(m).double() for m in _fit(Scaffold, 1, average="size"))
    delta = uniform - x0
    assert (delta - (sized - x0)).abs().max() > 1e-4  # the two averages differ here
    _, model = _fit(FedAvgM, 1, server_momentum=0.5, server_lr=0.7, average="uniform")
    torch.testing.assert_close(_flat(model).double(), x0 + 0.7 * delta, rtol=0, atol=2e-6)
    torch.testing.assert_close(model.server_m.double(), delta, rtol=0, atol=1e-7)
    _, model = _fit(FedAdam, 1, average="uniform")
    m, v = 0.1 * delta, 0.99 * model.tau**2 + 0.01 * delta**2
    torch.testing.assert_close(_flat(model).double(), x0 + model.server_lr * m / (v.sqrt() + model.tau), rtol=0,
                               atol=2e-6)  # fmt: skip


@pytest.mark.parametrize(
    "cls,kwargs,text",
    [
        (FedAdam, {"server_lr": 0}, "server_lr=0 must be > 0"),
        (FedAdam, {"beta1": 1.0}, "beta1=1.0 must be in [0, 1)"),
        (FedYogi, {"beta2": -0.1}, "beta2=-0.1 must be in [0, 1)"),
        (FedAdagrad, {"tau": 0.0}, "tau=0.0 must be > 0"),
        (FedAvgM, {"server_momentum": 1.5}, "server_momentum=1.5 must be in [0, 1)"),
        (FedYogi, {"bias_correction": True}, "bias_correction=True is Flower's FedAdam's: it applies to FedAdam only"),
        (FedAdam, {"initial_second_moment": -1.0}, "initial_second_moment=-1.0 must be >= 0"),
        (FedYogi, {"average": "mean"}, "average='mean' is not one of: uniform, size"),
    ],
)
def test_bad_settings_are_one_line(cls, kwargs, text):
    with pytest.raises(ConfigError, match=text.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        cls(**kwargs)


def _flower(kind: str, x, deltas, eta, beta_1, beta_2, tau):
    """Flower's ``FedAdam``/``FedYogi``/``FedAdagrad.aggregate_fit`` update lines, in NumPy, over the rounds'
    pseudo-gradients (``server_round`` = 1, 2, …; ``m_t``, ``v_t`` start at 0)."""
    import numpy as np

    m_t, v_t = np.zeros_like(x), np.zeros_like(x)
    for server_round, delta_t in enumerate(deltas, start=1):
        m_t = np.multiply(beta_1, m_t) + (1 - beta_1) * delta_t
        if kind == "adam":
            v_t = beta_2 * v_t + (1 - beta_2) * np.multiply(delta_t, delta_t)
            eta_norm = (
                eta * np.sqrt(1 - np.power(beta_2, server_round + 1.0)) / (1 - np.power(beta_1, server_round + 1.0))
            )
        elif kind == "yogi":
            v_t = v_t - (1.0 - beta_2) * np.multiply(delta_t, delta_t) * np.sign(v_t - np.multiply(delta_t, delta_t))
            eta_norm = eta
        else:
            v_t = v_t + np.multiply(delta_t, delta_t)
            eta_norm = eta
        x = x + eta_norm * m_t / (np.sqrt(v_t) + tau)
    return x


@pytest.mark.parametrize(
    "cls,kind,flower",
    [
        (FedAdam, "adam", {"server_lr": 0.1, "beta1": 0.9, "beta2": 0.99, "tau": 1e-9, "bias_correction": True}),
        (FedYogi, "yogi", {"server_lr": 0.01, "beta1": 0.9, "beta2": 0.99, "tau": 1e-3}),
        (FedAdagrad, "adagrad", {"server_lr": 0.1, "beta1": 0.0, "tau": 1e-9}),
    ],
    ids=["FedAdam", "FedYogi", "FedAdagrad"],
)
def test_with_flowers_settings_the_server_steps_are_flowers(cls, kind, flower):
    """Four rounds of pseudo-gradients (many below 10⁻², where ``v_{−1}`` matters) through the method's own server
    step (its checkpointed state and round counter) against Flower's update lines; Algorithm 2's defaults differ."""
    import numpy as np

    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(50, generator=g, dtype=torch.float64)
    deltas = [torch.randn(50, generator=g, dtype=torch.float64) * 10.0 ** -torch.randint(1, 4, (50,), generator=g)
              for _ in range(4)]  # fmt: skip
    b2 = flower.get("beta2", 0.0)
    want = _flower(kind, x0.numpy(), [d.numpy() for d in deltas], flower["server_lr"], flower["beta1"], b2,
                   flower["tau"])  # fmt: skip

    def steps(model):
        x = x0.clone()
        for delta in deltas:  # what aggregate does with FedAvg's Δ, on the model's own state
            model.server_steps += 1
            lr = model.server_lr
            if model.bias_correction:
                lr = flower_bias_corrected_lr(lr, model.beta1, model.beta2, int(model.server_steps))
            x, m, v = server_step(kind, x, delta, model.server_m, model.server_v, lr, model.beta1, model.beta2,
                                  model.tau)  # fmt: skip
            model.server_m, model.server_v = m, v
        return x

    def fresh(**kwargs):  # the method's states as a fit builds them, for 50 parameters
        model = cls(**kwargs)
        model.server_m = torch.zeros(50, dtype=torch.float64)
        model.server_v = torch.full((50,), model.initial_second_moment, dtype=torch.float64)
        model.server_steps = torch.zeros((), dtype=torch.long)
        return model

    np.testing.assert_allclose(steps(fresh(**flower, initial_second_moment=0.0)).numpy(), want, rtol=1e-12, atol=1e-12)
    ours = steps(fresh())  # the library's defaults (Algorithm 2: v_{−1} = τ², τ = 10⁻³, no bias correction)
    assert np.abs(ours.numpy() - want).max() > 1e-4
