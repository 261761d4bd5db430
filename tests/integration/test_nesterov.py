"""Nesterov momentum (``--model.nesterov``) for every method: it reaches the one SGD of clients and server, changes
the trajectory against heavy-ball momentum, runs the same on both client banks, and bad settings are one-line errors."""

from __future__ import annotations

import pytest
import torch
from test_algorithms import _assert_same, global_weights, train

from lightning_sfl.algorithms import ALGORITHMS, ASYNC_METHODS
from lightning_sfl.errors import ConfigError


@pytest.mark.parametrize("name", ["splitfedv1", "scala", "fedavg", "semi_sfl"])
def test_nesterov_reaches_the_optimiser_and_changes_the_run(name):
    heavy, _ = train(name, momentum=0.5)
    nesterov, trainer = train(name, momentum=0.5, nesterov=True)
    groups = trainer.optimizers[0].param_groups
    assert groups and all(g["nesterov"] and g["momentum"] == 0.5 for g in groups)
    assert torch.isfinite(global_weights(nesterov)).all()
    assert not torch.allclose(global_weights(heavy), global_weights(nesterov))


@pytest.mark.parametrize("name", ["scala", "fedavg", "sfl_local_loss"])
def test_nesterov_gives_the_same_model_on_the_stacked_and_the_sequential_bank(name):
    assert name not in ASYNC_METHODS  # their steps leave clients out: the stacked bank takes plain SGD only
    a, _ = train(name, client_bank="sequential", momentum=0.5, nesterov=True)
    b, _ = train(name, client_bank="stacked", momentum=0.5, nesterov=True)
    _assert_same(a, b, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"nesterov": True}, "nesterov=True must be true or false, and true needs momentum > 0"),
        ({"nesterov": "yes", "momentum": 0.9}, "nesterov='yes' must be true or false"),
    ],
)
def test_bad_nesterov_settings_are_one_line_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ALGORITHMS["scala"](**kwargs)


def test_fednova_refuses_nesterov():
    with pytest.raises(ConfigError, match=r"^nesterov=True: FedNova's ‖a_i‖₁ \(eq. 7\) is derived for heavy-ball"):
        ALGORITHMS["fednova"](momentum=0.9, nesterov=True)
    ALGORITHMS["fednova"](momentum=0.9)  # heavy-ball momentum stays
