"""Each part of a method saves its own entry of ``checkpoint["lightning_sfl"]`` and keeps the others': what a
checkpoint holds does not depend on the order of the parts (issue 55: ``MethodState`` used to replace the entry, so
the federation's state was saved only because ``FederationMember`` came first among the bases)."""

from __future__ import annotations

import lightning as L
import torch

from lightning_sfl.algorithms.federated import FederationMember
from lightning_sfl.algorithms.state import MethodState


class _Federation:
    """What ``FederationMember`` saves of a federation."""

    def state_dict(self) -> dict:
        return {"time": 12.5, "round": 3}


def _method(*parts: type) -> L.LightningModule:
    cls = type("Method", (*parts, L.LightningModule), {})
    method = cls()
    method.federation = _Federation()
    return method


def test_the_saved_entries_are_the_same_whatever_the_order_of_the_parts():
    saved = []
    for parts in ((FederationMember, MethodState), (MethodState, FederationMember)):
        checkpoint = {"state_dict": {"w": torch.zeros(1)}, "lightning_sfl": {"earlier": "kept"}}
        _method(*parts).on_save_checkpoint(checkpoint)
        saved.append(checkpoint["lightning_sfl"])
    assert saved[0] == saved[1]
    assert saved[0]["federation"] == {"time": 12.5, "round": 3}
    assert saved[0]["algorithm"].endswith(".Method") and saved[0]["earlier"] == "kept"
