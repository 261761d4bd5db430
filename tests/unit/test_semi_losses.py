"""Semi-SFL's losses (eqs. 1, 3, 5), its EMA teacher and the K_s controller (eq. 9) against loops written here."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.ks_control import SupervisedSteps
from lightning_sfl.losses.semi import (
    contrastive_loss,
    ema_decay,
    ema_update,
    pseudo_label_loss,
    queue_positives,
    same_label_positives,
)


def _unit(n, d, seed):
    return nn.functional.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(seed)).double(), dim=1)


def test_supervised_contrastive_equals_eq3_by_loops():
    """Eq. 3 over one batch: A(j) = all references but j, P(j) = those with the same label."""
    z, labels, kappa = _unit(7, 4, 0), torch.tensor([0, 1, 0, 2, 1, 0, 3]), 0.2
    got = contrastive_loss(z, z, *same_label_positives(labels), kappa)
    for j in range(7):
        others = [a for a in range(7) if a != j]
        positives = [p for p in others if labels[p] == labels[j]]
        denominator = sum(math.exp(float(z[j] @ z[a]) / kappa) for a in others)
        want = (
            -sum(math.log(math.exp(float(z[j] @ z[p]) / kappa) / denominator) for p in positives) / len(positives)
            if positives
            else 0.0
        )
        assert float(got[j]) == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_clustering_regularisation_equals_eq5_by_loops():
    """Eq. 5 against a queue: the denominator runs over the filled slots only; positives are filled, confident slots
    with the anchor's pseudo-label; an anchor without positives gives 0."""
    anchors, queue = _unit(5, 3, 1), _unit(9, 3, 2)
    anchor_labels = torch.tensor([0, 1, 2, 0, 3])
    queue_labels = torch.tensor([0, 1, 1, 2, 0, 0, 1, 2, 3])
    confident = torch.tensor([True, True, False, True, True, False, True, False, False])
    filled = torch.tensor([True] * 7 + [False, False])  # two empty slots: never in the denominator
    kappa = 0.5
    got = contrastive_loss(anchors, queue, *queue_positives(anchor_labels, queue_labels, confident, filled), kappa)
    for j in range(5):
        slots = [a for a in range(9) if filled[a]]
        positives = [p for p in slots if confident[p] and queue_labels[p] == anchor_labels[j]]
        denominator = sum(math.exp(float(anchors[j] @ queue[a]) / kappa) for a in slots)
        terms = [math.log(math.exp(float(anchors[j] @ queue[p]) / kappa) / denominator) for p in positives]
        want = -sum(terms) / len(terms) if terms else 0.0
        assert float(got[j]) == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert float(got[4]) == 0.0  # label 3's only slot is empty


def test_pseudo_label_loss_is_eq1_averaged_over_all_rows():
    g = torch.Generator().manual_seed(3)
    student, teacher = torch.randn(6, 4, generator=g).double(), 3 * torch.randn(6, 4, generator=g).double()
    loss, labels, mask = pseudo_label_loss(student, teacher, 0.8)
    probs = teacher.softmax(dim=1)
    want = 0.0
    for j in range(6):
        y = int(probs[j].argmax())
        assert labels[j] == y and bool(mask[j]) == (float(probs[j].max()) > 0.8)
        if probs[j].max() > 0.8:
            want += -math.log(float(student[j].softmax(0)[y]))
    assert float(loss) == pytest.approx(want / 6, rel=1e-12)  # masked rows count in the mean
    assert 0 < int(mask.sum()) < 6  # the case exercises both branches
    _, _, at_threshold = pseudo_label_loss(student, torch.zeros(6, 4).double(), 0.25, strict=False)
    assert at_threshold.all() and not pseudo_label_loss(student, torch.zeros(6, 4).double(), 0.25)[2].any()


def test_ema_teacher_follows_the_recurrence_with_warm_up():
    torch.manual_seed(0)
    student = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    teacher = copy.deepcopy(student)
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(1.0)  # the first update (decay 0) must erase this
    reference = [p.detach().clone() for p in teacher.parameters()]
    for t in range(5):
        with torch.no_grad():
            for p in student.parameters():
                p.add_(0.1 * torch.randn_like(p))
        student.train()(torch.randn(8, 3))  # moves the BN statistics
        decay = ema_decay(t, 0.99)
        assert decay == min(1 - 1 / (t + 1), 0.99)
        ema_update(teacher, student, decay)
        reference = [decay * r + (1 - decay) * s.detach() for r, s in zip(reference, student.parameters())]
        for r, p in zip(reference, teacher.parameters()):
            torch.testing.assert_close(p, r)
    assert ema_decay(0, 0.99) == 0.0 and ema_decay(10_000, 0.99) == 0.99
    assert not torch.equal(teacher[1].running_mean, torch.zeros(2))  # BN statistics averaged too


def test_ks_controller_applies_eq9_only_at_milestones_within_bounds():
    control = SupervisedSteps(initial=10, window=3, milestone_every=6, max_steps=20)
    ks = [control.observe(1.0 - 0.1 * h) for h in range(6)]  # falling 0.1 a round: |Δ| = 0.3 > ϱ2 at h = 6
    assert ks == [10] * 5 + [20]
    ks = [control.observe(0.4 - 0.1 * h) for h in range(6)]  # still falling, but at the bound
    assert ks[-1] == 20
    flat = [control.observe(0.0) for _ in range(12)]  # flat (Δ = 0 at rounds 18 and 24): halved at each milestone
    assert flat == [20] * 5 + [10] * 6 + [5]
    fixed = SupervisedSteps(initial=10, adaptive=False, window=1, milestone_every=1)
    assert [fixed.observe(v) for v in (5.0, 0.0, 9.0)] == [10, 10, 10]
    resumed = SupervisedSteps(initial=10, window=3, milestone_every=6, max_steps=20)
    resumed.load_state_dict(control.state_dict())
    assert resumed.steps == control.steps and resumed.delta() == control.delta()


def test_ks_controller_delta_is_the_difference_of_two_window_means():
    control = SupervisedSteps(initial=4, window=2, milestone_every=100)
    for v in (3.0, 1.0, 2.0, 6.0):
        control.observe(v)
    assert control.delta() == pytest.approx((2.0 + 6.0) / 2 - (3.0 + 1.0) / 2)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"initial": 0}, "initial=0 must be a whole number >= 1"),
        ({"low": 0.1, "high": 0.05}, "need 0 < low < high"),
        ({"initial": 5, "min_steps": 6}, "min_steps <= initial <= max_steps"),
        ({"window": 0}, "window=0 must be a whole number >= 1"),
    ],
)
def test_bad_controller_settings_are_one_line_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SupervisedSteps(**kwargs)
