"""SCALA-PE's inversion regulariser as a defence of other split methods: each selected client's decoder steps once
every ``every`` local iterations whatever the method (SplitFedV2 runs the split iteration once per client),
and the methods whose clients keep their own halves refuse it in one line (SCALA-PE's own tests:
tests/integration/test_scala_pe.py; exact resume with it on: tests/integration/test_unsplit.py)."""

from __future__ import annotations

import pytest
import torch
from _helpers import quiet_trainer, small_digits

from lightning_sfl.algorithms import SplitFedV1, SplitFedV2, SplitFedV3
from lightning_sfl.callbacks.splitguard import probes
from lightning_sfl.client_store import client_stores
from lightning_sfl.defences import InversionRegulariser
from lightning_sfl.errors import ConfigError


@pytest.mark.parametrize("cls", [SplitFedV1, SplitFedV2])
def test_each_selected_client_steps_its_decoder_every_inversion_every_iterations(cls):
    torch.manual_seed(0)
    model = cls(local_iters=4, lr=0.05, defences=[InversionRegulariser(gamma=0.3, every=2, warmup_epochs=0)])
    quiet_trainer(1).fit(model, small_digits())
    steps = model.defences.inversion.steps.dense()
    assert sorted(steps.tolist()) == [0, 0, 0, 0, 2, 2, 2, 2], steps  # 4 of 8 clients a round, iterations 1 and 3
    assert model.defences.goes_back_through_activations
    assert [k.removeprefix("defences.inversion.") for k in model.state_dict() if k.startswith("defences.")] == [
        f"decoder.{k}" for k in model.defences.inversion.decoder.state_dict()
    ]  # its own entry of the checkpoint; the per-client decoders are stores, whose records the checkpoint keeps
    assert list(client_stores(model.defences.inversion)) == ["weights", "statistics", "exp_avg", "exp_avg_sq", "steps"]


def test_methods_whose_clients_keep_their_halves_refuse_it():
    with pytest.raises(ConfigError, match=r"^InversionRegulariser needs a split method .* SplitFedV3's clients keep"):
        SplitFedV3(defences=[InversionRegulariser()])
    assert not probes(SplitFedV3())
