"""SCAFFOLD (option II): control variates after a round by hand, the corrected local step of the next round by
hand, zero control variates with one local step equal FedAvg, and the control variates' traffic."""

from __future__ import annotations

import copy

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from _helpers import flat_params, quiet_trainer, round_steps, small_digits
from torch.func import functional_call

from lightning_sfl.algorithms.fedavg import FedAvg
from lightning_sfl.algorithms.scaffold import Scaffold
from lightning_sfl.callbacks import CommunicationBytes
from lightning_sfl.errors import ConfigError

LR = 0.1


def dense(t: torch.Tensor):
    """A copy of ``t``, ``[K, P]`` for a per-client store."""
    return t.dense() if hasattr(t, "dense") else t.clone()


class _Globals(L.Callback):
    """The global model and the control variates at the start of every round."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        flat = torch.cat([p.detach().reshape(-1) for p in pl_module.client.net.parameters()]).clone()
        states = getattr(pl_module, "scaffold_c", None), getattr(pl_module, "scaffold_client_c", None)
        self.seen.append((flat, *(None if t is None else dense(t) for t in states)))


def _fit(cls, rounds: int, local_iters: int, **kwargs):
    torch.manual_seed(0)
    model = cls(local_iters=local_iters, lr=LR, **kwargs)
    model0 = copy.deepcopy(model)
    seen = _Globals()
    quiet_trainer(rounds, limit_val_batches=0, callbacks=[seen, CommunicationBytes()]).fit(model, small_digits())
    return model0, model, seen.seen


def test_zero_control_variates_and_one_local_step_equal_fedavg():
    _, ref, _ = _fit(FedAvg, 1, 1)
    _, same, _ = _fit(Scaffold, 1, 1, average="size")
    torch.testing.assert_close(flat_params(same.client.net), flat_params(ref.client.net), rtol=0, atol=1e-7)


def test_control_variates_after_a_round_by_hand():
    model0, model, _ = _fit(Scaffold, 1, 2)
    (step,) = round_steps(small_digits(), 0, local_iters=2)[:1]
    x = flat_params(model0.client.net)
    expected_ci = torch.zeros_like(model.scaffold_client_c.dense())
    for k, client in enumerate(step.clients.tolist()):
        y = flat_params(model.bank.slots[int(step.slots_tensor[k])])  # the client's model after its K = 2 steps
        expected_ci[client] = (x - y) / (2 * LR)
    torch.testing.assert_close(model.scaffold_client_c.dense(), expected_ci, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model.scaffold_c, expected_ci.sum(0) / 8, rtol=1e-5, atol=1e-7)
    mean = torch.stack([flat_params(model.bank.slots[int(s)]) for s in step.slots_tensor]).mean(0)  # uniform average
    torch.testing.assert_close(flat_params(model.client.net), mean, rtol=0, atol=1e-6)


def test_the_next_round_steps_with_the_correction_by_hand():
    """Round 2, one local step: ``y_k = x − η(∇F_k(x) + c − c_k)`` with the state left by round 1."""
    _, model, seen = _fit(Scaffold, 2, 1)
    x1, c, c_client = seen[1]
    dm = small_digits()
    step = round_steps(dm, 1, local_iters=1)[0]
    net = model.client.net
    names = [n for n, _ in net.named_parameters()]
    shapes = [p.shape for p in net.parameters()]
    chunks = dict(zip(names, (t.view(s) for t, s in zip(x1.split([s.numel() for s in shapes]), shapes))))
    xs, ys = dm.splits.to_float(step.x).split(step.sizes.tolist()), step.y.split(step.sizes.tolist())
    for k, client in enumerate(step.clients.tolist()):
        params = {n: v.clone().requires_grad_(True) for n, v in chunks.items()}
        loss = F.cross_entropy(functional_call(net, params, (xs[k],)), ys[k])
        grad = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(params.values()))])
        want = x1 - LR * (grad + c - c_client[client])
        got = flat_params(model.bank.slots[int(step.slots_tensor[k])])
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert (c_client[step.clients] != 0).any() or (c != 0).any(), "round 1 left non-zero control variates"


def test_control_variates_travel_both_ways():
    _, model, _ = _fit(Scaffold, 1, 1)
    params = sum(p.numel() * p.element_size() for p in model.client.net.parameters())
    totals = model.ledger.totals()
    assert totals["down/control_variates"] == totals["up/control_variates"] == 4 * params  # 4 clients per round
    with pytest.raises(ConfigError, match="average='mean' is not one of: uniform, size"):
        Scaffold(average="mean")
