"""``missing_class_floor``: the finite version of the logit adjustments for classes a client lacks (public code's
choice) next to the equations' limit (``−∞`` logits), by hand and in training."""

from __future__ import annotations

import math

import pytest
import torch
from _helpers import quiet_trainer

from lightning_sfl.algorithms import LLASFL, SCALA, FedLC, FedLogit
from lightning_sfl.algorithms.fedavg import fedlc_margin
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.errors import ConfigError
from lightning_sfl.losses import log_prior, logit_adjusted_cross_entropy


def test_floored_log_prior_and_loss_by_hand():
    prior = torch.tensor([0.5, 0.5, 0.0])
    logits = torch.tensor([[1.0, 0.0, 3.0]], requires_grad=True)
    floor = 0.1
    got = logit_adjusted_cross_entropy(logits, torch.tensor([0]), prior, "mean", floor)
    a = [1.0 + math.log(0.6), 0.0 + math.log(0.6), 3.0 + math.log(0.1)]  # log(P + floor) on every class
    assert got.item() == pytest.approx(-(a[0] - math.log(sum(math.exp(v) for v in a))), rel=1e-6)
    got.backward()
    assert logits.grad[0, 2] > 0  # the missing class is pushed down ...
    logits.grad = None
    logit_adjusted_cross_entropy(logits, torch.tensor([0]), prior).backward()
    assert logits.grad[0, 2] == 0  # ... while with the limit it has no gradient at all
    assert log_prior(prior)[2] == float("-inf")
    with pytest.raises(ValueError, match="floor=-1 must be >= 0"):
        log_prior(prior, -1)


def test_a_vanishing_floor_gives_the_limit():
    logits = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    prior = torch.tensor([0.25, 0.0, 0.75, 0.0])
    y = torch.tensor([0, 2, 2, 0, 0, 2])
    torch.testing.assert_close(
        logit_adjusted_cross_entropy(logits, y, prior, "none", 1e-30),
        logit_adjusted_cross_entropy(logits, y, prior, "none"),
    )


def test_fedlc_margin_with_a_floor_by_hand():
    counts = torch.tensor([16.0, 0.0, 81.0])
    got = fedlc_margin(counts, tau=2.0, floor=1e-8)  # 2·16^{-1/4}, 2·(1e-8)^{-1/4} = 2·100, 2·81^{-1/4}
    torch.testing.assert_close(got, torch.tensor([1.0, 200.0, 2.0 / 3.0]))
    assert fedlc_margin(counts, tau=2.0)[1] == float("inf")


def _dm() -> FederatedDataModule:
    return FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)


def _weights(cls, **kwargs) -> torch.Tensor:
    torch.manual_seed(0)
    model = cls(local_iters=2, lr=0.05, **kwargs)
    quiet_trainer(1, limit_val_batches=0).fit(model, _dm())
    return torch.cat([p.detach().reshape(-1) for p in model.client.parameters()])


@pytest.mark.parametrize("cls", [FedLC, FedLogit, LLASFL, SCALA])
def test_the_floor_reaches_each_methods_loss(cls):
    """α=2: every client lacks classes, so a floor changes the training; a vanishing one does not."""
    limit = _weights(cls)
    assert (_weights(cls, missing_class_floor=0.5) - limit).abs().max() > 1e-4
    floor = 1e-60 if cls is FedLC else 1e-30  # FedLC: a count; (1e-60)^{-1/4} = 1e15, far beyond any logit
    torch.testing.assert_close(_weights(cls, missing_class_floor=floor), limit, rtol=0, atol=1e-5)


@pytest.mark.parametrize("cls", [FedLC, FedLogit, LLASFL, SCALA])
def test_a_negative_floor_is_refused(cls):
    with pytest.raises(ConfigError, match=r"missing_class_floor=-1 must be a number >= 0"):
        cls(missing_class_floor=-1)
