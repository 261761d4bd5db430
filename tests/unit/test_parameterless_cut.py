"""A cut that leaves the clients no weights (the logistic model's ``s1``): ``cuts`` describes it, a split method
refuses it in one line, an FL method trains the whole model."""

from __future__ import annotations

import pytest

from lightning_sfl.errors import ConfigError
from lightning_sfl.models import build_model
from lightning_sfl.runtime.halves import split_halves
from lightning_sfl.system.flops import cut_costs


def test_cut_costs_of_a_client_half_without_weights():
    costs = cut_costs(build_model("logistic", 10, (60, 1, 1)))
    assert list(costs) == ["s1"]
    assert costs["s1"].activation_bytes == 60 * 4 and costs["s1"].model_bytes == 0


def test_a_split_method_refuses_a_client_half_without_weights():
    with pytest.raises(ConfigError, match=r"split_point='s1' of model 'logistic' leaves the clients no parameters"):
        split_halves(build_model("logistic", 10, (60, 1, 1)), "s1", has_server_half=True)
    # FL: the whole model
    client, server = split_halves(build_model("logistic", 10, (60, 1, 1)), "s1", has_server_half=False)
    assert sum(p.numel() for p in client.parameters()) == 61 * 10 and len(server) == 0
