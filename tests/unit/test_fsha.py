"""FSHA (feature-space hijacking by the server): the gradient penalty against its closed form for a linear critic and
one-line errors; the registry's tests run it too (two rounds, exact resume, its digits config, both client banks). The
hijack's progress over rounds, with the task left untrained, and a noised client leaking less, against the README's
numbers: ``tests/studies/test_fsha_documented.py``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lightning_sfl.algorithms import FSHA
from lightning_sfl.errors import ConfigError
from lightning_sfl.privacy.hijacking import gradient_penalty


def test_gradient_penalty_of_a_linear_critic_is_its_closed_form():
    """For ``D(z) = w·z + b`` the gradient is ``w`` everywhere: the penalty is ``(‖w‖ − 1)²`` whatever the points."""
    critic = nn.Sequential(nn.Flatten(), nn.Linear(12, 1)).double()
    g = torch.Generator().manual_seed(0)
    real, fake = torch.randn(5, 3, 2, 2, generator=g, dtype=torch.float64), torch.randn(5, 3, 2, 2, dtype=torch.float64)
    want = (critic[1].weight.norm() - 1) ** 2
    got = gradient_penalty(critic, real, fake, torch.Generator().manual_seed(1)).detach()
    assert float(got) == pytest.approx(float(want.detach()))


def test_bad_fsha_settings_are_one_line_errors():
    with pytest.raises(ConfigError, match="client_optimizer='rmsprop' must be one of: adam, sgd"):
        FSHA(client_optimizer="rmsprop")
    with pytest.raises(ConfigError, match="penalty=0 must be > 0"):
        FSHA(penalty=0)
    with pytest.raises(ConfigError, match="FSHA needs a convolutional cut"):
        FSHA(split_point="s5")
