"""Label differential privacy by randomised response (:mod:`lightning_sfl.defences.labels`): RR_ε's probabilities
counted over many rows, one draw per row kept across steps and processes, and the counts of ``P_s``."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from lightning_sfl.defences import RandomisedLabels
from lightning_sfl.defences.labels import keep_probability, randomised_response
from lightning_sfl.errors import ConfigError


def test_randomised_response_keeps_with_e_eps_over_e_eps_plus_n_minus_1_and_spreads_the_rest_evenly():
    n, classes, eps = 200_000, 10, math.log(4.0)  # keep 4 / 13
    labels = torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(0))
    out = randomised_response(labels, eps, classes, torch.Generator().manual_seed(1))
    kept = (out == labels).double().mean()
    assert float(kept) == pytest.approx(4 / 13, abs=0.005) == pytest.approx(keep_probability(eps, classes), abs=0.005)
    shift = (out - labels) % classes  # 0: kept; 1..9: the other classes
    counts = torch.bincount(shift[shift > 0], minlength=classes)[1:].double()
    assert float(counts.max() / counts.min()) < 1.05  # uniform over the other N - 1 classes
    assert torch.equal(randomised_response(labels, float("inf"), classes, torch.Generator()), labels)


def _step(rows, y, local_rows=None):
    return SimpleNamespace(rows=rows, y=y, local_rows=local_rows, label_counts=torch.zeros(10, dtype=torch.long))


def test_each_row_gets_one_draw_for_the_whole_run_on_every_process():
    torch.manual_seed(0)
    rows = torch.randperm(500)[:300]  # the training rows the clients hold, in any order
    labels = torch.randint(0, 10, (300,))
    defence = RandomisedLabels(epsilon=0.5)
    defence.randomise(labels, rows, 10, seed=3)
    first = defence.training_labels(_step(rows[:40], labels[:40]))
    assert torch.equal(defence.training_labels(_step(rows[:40], labels[:40])), first)  # a later round: the same
    again = RandomisedLabels(epsilon=0.5)
    order = torch.randperm(300)
    again.randomise(labels[order], rows[order], 10, seed=3)  # the rows given in another order: the same draws
    assert torch.equal(again.noisy, defence.noisy)
    half = _step(rows[:40], labels[:40][1::2], local_rows=rows[:40][1::2])  # process 1 of 2: its rows
    assert torch.equal(defence.training_labels(half), first[1::2])
    counts = defence.label_counts(_step(rows[:40], labels[:40]))
    assert torch.equal(counts, torch.bincount(first, minlength=10))
    assert not torch.equal(first, labels[:40])  # ε = 0.5 over ten classes keeps about a fifth


def test_a_bad_epsilon_is_one_line():
    with pytest.raises(ConfigError, match="RandomisedLabels: epsilon=0 must be a number > 0"):
        RandomisedLabels(epsilon=0)
