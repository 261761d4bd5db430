"""FedNova's normalised averaging against hand-derived values and the identity with FedAvg for equal step counts."""

from __future__ import annotations

import copy

import lightning as L
import pytest
import torch
from _helpers import flat_params, quiet_trainer, small_digits

from lightning_sfl.algorithms.fedavg import FedAvg, FedProx
from lightning_sfl.algorithms.fednova import FedNova, fednova_average, momentum_norm
from lightning_sfl.errors import ConfigError


def test_equal_step_counts_give_fedavgs_weighted_average():
    x = torch.randn(5, dtype=torch.float64)
    ys = torch.randn(3, 5, dtype=torch.float64)
    w = torch.tensor([10.0, 30.0, 60.0])
    for rho in (0.0, 0.9):
        got = fednova_average(x, ys, torch.tensor([4, 4, 4]), w, rho)
        torch.testing.assert_close(got, (w[:, None].double() * ys).sum(0) / w.sum(), rtol=0, atol=1e-12)


def test_unequal_step_counts_by_hand():
    # x = 2, y_1 = 0 after 1 step, y_2 = 1 after 3 steps, p = (1/4, 3/4):
    # d = (2/1, 1/3), τ_eff = 1/4 + 9/4 = 2.5, x' = 2 − 2.5·(1/4·2 + 3/4·1/3) = 2 − 2.5·0.75 = 0.125
    got = fednova_average(torch.tensor([2.0]), torch.tensor([[0.0], [1.0]]), torch.tensor([1, 3]), torch.tensor([1, 3]))
    assert got.item() == pytest.approx(0.125)


def test_momentum_norm_is_the_sum_of_the_momentum_coefficients():
    """``‖a‖₁ = Σ_{t=0}^{τ−1} (1 − ρ^{t+1})/(1 − ρ)``: step t applies the gradient of step s with weight ρ^{t−s}."""
    for tau in (1, 2, 5):
        for rho in (0.0, 0.5, 0.9):
            want = sum(sum(rho**j for j in range(t + 1)) for t in range(tau))
            assert momentum_norm(torch.tensor([tau]), rho).item() == pytest.approx(want, rel=1e-12)


# ---------------------------------------------------------------------------------------------- in training
EPOCHS = {"local_epochs": 1.0, "local_batch_size": 16}  # digits, 8 clients: |D_k| from ~60 to ~300, τ_k 4..19


class _SlotTrace(L.Callback):
    """Every slot's parameters after every training step: ``[steps, S, P]``."""

    def __init__(self) -> None:
        self.trace: list[torch.Tensor] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.trace.append(torch.stack([flat_params(slot) for slot in pl_module.bank.slots]))


def _fit(cls, rounds: int = 1, callbacks=None, **kwargs):
    torch.manual_seed(0)
    model = cls(lr=0.05, **kwargs)
    model0 = copy.deepcopy(model)
    quiet_trainer(rounds, limit_val_batches=0, callbacks=callbacks).fit(model, small_digits())
    return model0, model


def test_fednova_with_equal_step_counts_is_fedavg():
    _, ref = _fit(FedAvg, 2, local_iters=3)
    _, nova = _fit(FedNova, 2, local_iters=3)
    torch.testing.assert_close(flat_params(nova.client.net), flat_params(ref.client.net), rtol=0, atol=1e-6)


def test_local_epochs_give_unequal_steps_and_a_finished_client_does_not_move():
    trace = _SlotTrace()
    _, model = _fit(FedProx, callbacks=[trace], momentum=0.9, weight_decay=1e-3, **EPOCHS)  # all three would drift
    step = small_digits().plan(0, model.schedule)[-1]  # the closing "aggregate" step lists the round's clients
    assert step.kind == "aggregate" and step.round_end and int(step.sizes.sum()) == 0
    taus = model.local_steps(step.clients)
    sizes = model.client_sizes[step.clients]
    assert taus.tolist() == [-(-int(n) // 16) for n in sizes] and len(set(taus.tolist())) > 1
    states = torch.stack(trace.trace)  # [local steps + 1, S, P]
    assert len(states) == int(taus.max()) + 1
    for k, tau in enumerate(taus.tolist()):
        assert not torch.equal(states[0, k], states[tau - 1, k])  # it trained ...
        for t in range(tau, len(states)):
            assert torch.equal(states[t, k], states[tau - 1, k]), (k, t)  # ... and stopped after τ_k steps


def test_one_round_of_fednova_is_its_average_of_fedavgs_client_models():
    x0, fedavg = _fit(FedAvg, **EPOCHS)  # same local training: the rounds differ only in the server step
    _, nova = _fit(FedNova, **EPOCHS)
    step = small_digits().plan(0, fedavg.schedule)[-1]
    ys = torch.stack([flat_params(fedavg.bank.slots[k]) for k in step.slots_tensor.tolist()])
    taus, sizes = fedavg.local_steps(step.clients), fedavg.client_sizes[step.clients]
    want = fednova_average(flat_params(x0.client.net), ys, taus, sizes)
    torch.testing.assert_close(flat_params(nova.client.net), want, rtol=0, atol=1e-6)
    assert (flat_params(nova.client.net) - flat_params(fedavg.client.net)).abs().max() > 1e-5  # unequal τ: not FedAvg


def test_local_epoch_settings_are_checked():
    with pytest.raises(ConfigError, match="local_epochs=0 must be > 0"):
        FedAvg(local_epochs=0)
    with pytest.raises(ConfigError, match="local_batch_size=0 must be a whole number >= 1"):
        FedAvg(local_epochs=1, local_batch_size=0)


def test_local_epochs_on_the_stacked_bank_equal_the_sequential_bank():
    """Steps that leave finished clients out, with momentum and weight decay: the stacked bank keeps those slots still
    (``StackedBank.steps_only``) and ends where the sequential bank does (once refused with a ConfigError)."""
    kwargs = dict(momentum=0.9, weight_decay=1e-3)
    _, sequential = _fit(FedProx, 2, client_bank="sequential", **kwargs, **EPOCHS)
    _, stacked = _fit(FedProx, 2, client_bank="stacked", **kwargs, **EPOCHS)
    # float32 kernels of the two banks sum in different orders (2e-5 seen after 2 rounds); a slot that moved when it
    # should not would be off by a learning-rate step (~1e-2)
    torch.testing.assert_close(flat_params(stacked.client.net), flat_params(sequential.client.net), rtol=0, atol=1e-4)
