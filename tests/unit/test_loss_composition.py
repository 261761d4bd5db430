"""Loss hooks compose (issue 55): a method that changes the loss overrides ``cross_entropy`` once and keeps every
adjustment its base makes through its priors. Label smoothing on SCALA keeps SCALA's logit adjustment (eqs. 14-15):
checked against an independent computation with ``torch.nn.functional.cross_entropy`` on ``s + log(P + floor)``.
Smoothing needs ``missing_class_floor > 0``: with the exact ``log 0 = −∞`` of a class a client lacks, the target's
``ε / N`` on that class makes the loss infinite (the run stops at its first step, as the guard says)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from _helpers import make_step, quiet_trainer, small_digits
from typing_extensions import override

from lightning_sfl.algorithms import SCALA, FedLogit
from lightning_sfl.losses import logit_adjusted_cross_entropy, row_label_distribution

EPS = 0.1
FLOOR = 1e-12


class SmoothedSCALA(SCALA):
    """SCALA with label smoothing ε on every loss it is made of."""

    @override
    def cross_entropy(self, logits, labels, prior=None, reduction="none"):
        return logit_adjusted_cross_entropy(logits, labels, prior, reduction, self.missing_class_floor, EPS)


def _trained(cls):
    torch.manual_seed(0)
    model = cls(local_iters=1, lr=0.05, missing_class_floor=FLOOR)
    quiet_trainer(1).fit(model, small_digits())
    return model


def test_label_smoothing_on_scala_keeps_its_logit_adjustment():
    model = _trained(SmoothedSCALA)
    step = make_step([1, 6], [3, 2])
    y = torch.tensor([0, 1, 1, 2, 3])
    step = step.replace(y=y, owner=torch.tensor([0, 0, 0, 1, 1]), label_counts=torch.bincount(y, minlength=10))
    logits = torch.randn(5, 10, generator=torch.Generator().manual_seed(0))
    server_prior, client_prior = model.server_prior(step), model.client_prior(step)
    assert server_prior is not None and client_prior is not None  # SCALA adjusts both losses

    def smoothed(prior):  # written out: CE with smoothing of s + log P
        return F.cross_entropy(logits + (prior + FLOOR).log(), step.y, reduction="none", label_smoothing=EPS)

    torch.testing.assert_close(model.server_loss(logits, step), smoothed(server_prior).mean())
    rows = smoothed(client_prior)
    want = rows[:3].mean() + rows[3:].mean()  # each client's mean over its own rows, summed (eq. 15)
    torch.testing.assert_close(model.client_loss(logits, step), want)
    plain = F.cross_entropy(logits + (server_prior + FLOOR).log(), step.y)
    unadjusted = F.cross_entropy(logits, step.y, label_smoothing=EPS)
    got = model.server_loss(logits, step)
    assert not torch.isclose(got, plain) and not torch.isclose(got, unadjusted)  # both the smoothing and the prior


def test_the_fl_methods_row_loss_goes_through_the_same_hook():
    """FedLogit's per-row loss is ``cross_entropy`` with each row's client prior: overriding the hook changes it."""
    step = make_step([1, 6], [3, 2])
    step = step.replace(y=torch.tensor([0, 1, 1, 2, 3]), owner=torch.tensor([0, 0, 0, 1, 1]))
    logits = torch.randn(5, 10, generator=torch.Generator().manual_seed(1))
    smoothed_cls = type("SmoothedFedLogit", (FedLogit,), {"cross_entropy": SmoothedSCALA.cross_entropy})
    plain, smoothed = _trained(FedLogit), _trained(smoothed_cls)
    prior = row_label_distribution(plain.label_dist, step)
    torch.testing.assert_close(
        plain.row_loss(logits, step), F.cross_entropy(logits + (prior + FLOOR).log(), step.y, reduction="none")
    )
    want = F.cross_entropy(logits + (prior + FLOOR).log(), step.y, reduction="none", label_smoothing=EPS)
    torch.testing.assert_close(smoothed.row_loss(logits, step), want)
