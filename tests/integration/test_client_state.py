"""Per-client state kept on disk beyond a memory budget (:mod:`lightning_sfl.client_store`) resumes exactly: from a
checkpoint that is not the last (the run went on and wrote files after it) and after a run that died mid-round
(it had written rows the checkpoint does not name), for every method with per-client state."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from _helpers import data_kwargs, method_kwargs
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_sfl import client_store
from lightning_sfl.algorithms import ALGORITHMS
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.runtime.state import dense_client_states

#: Each method's settings in :mod:`test_resume` (SCALA-PE's regulariser on from the first step, FedMatch's λ_L2).
FIXED = {
    "scala_pe": {
        "defences": [
            {
                "class_path": "lightning_sfl.defences.InversionRegulariser",
                "init_args": {"threshold": 0.0, "warmup_epochs": 1},
            }
        ]
    },
    "fedmatch": {"l2_weight": 1.0},
}


class Crash(L.Callback):
    """Stops the run with an error after round ``round`` trained and aggregated, before its checkpoint (a process
    killed there: the round's rows are written, some to files, and no checkpoint names them)."""

    def __init__(self, round: int) -> None:
        self.round = round

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch == self.round and not trainer.sanity_checking:
            raise RuntimeError("killed mid-round")


def fit(name: str, rounds: int, folder, ckpt_path=None, callbacks=()):
    torch.manual_seed(0)
    model = ALGORITHMS[name](**method_kwargs(name, local_iters=2, lr=0.05, momentum=0.5, **FIXED.get(name, {})))
    trainer = L.Trainer(
        max_epochs=rounds,
        logger=False,
        callbacks=[ModelCheckpoint(dirpath=folder, save_top_k=-1, save_last=True), *callbacks],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    dm = FederatedDataModule(
        dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1, **data_kwargs(name)
    )
    trainer.fit(model, dm, ckpt_path=ckpt_path)
    return model


def weights_and_state(model) -> dict[str, torch.Tensor]:
    return {**model.state_dict(), **dense_client_states(model)}


#: ``-m extended`` (~10-25 s each on two cores): in CI, the stores' records after later writes, a kill and a fork are
#: checked against a dense tensor (tests/unit/test_client_store.py), and SCAFFOLD's exact resume compares its store
#: (test_resume.py).
@pytest.mark.parametrize(
    "name",
    [
        pytest.param("feddyn", marks=pytest.mark.extended),
        pytest.param("scala_pe", marks=pytest.mark.extended),
        pytest.param("scaffold", marks=pytest.mark.extended),
        pytest.param("ca2fl", marks=pytest.mark.extended),
        pytest.param("fedmatch", marks=pytest.mark.extended),
        pytest.param("splitfedv3", marks=pytest.mark.extended),
    ],
)
def test_state_on_disk_resumes_exactly_from_an_earlier_checkpoint_after_a_kill_mid_round(name, tmp_path, monkeypatch):
    want = weights_and_state(fit(name, 4, tmp_path / "reference"))  # in memory: the budget is 1 GiB
    row_bytes = max(s.default.numel() * s.default.element_size() for s in fit_stores(name, tmp_path))
    monkeypatch.setitem(client_store._budget, "bytes", 2 * row_bytes)  # two rows: every round spills to disk
    run = tmp_path / "run"
    assert_same(weights_and_state(fit(name, 4, run)), want, name)  # on disk, the same run
    assert list((run / "client_state").rglob("*.pt")), "rows past the budget are in files beside the checkpoints"
    earlier = next(run.glob("epoch=1-*.ckpt"))  # after round 2 of 4: the run wrote files after it
    files = set((run / "client_state").rglob("*.pt"))
    with pytest.raises(RuntimeError, match="killed mid-round"):
        fit(name, 4, run, ckpt_path=earlier, callbacks=[Crash(round=2)])  # writes rows, dies before a checkpoint
    assert set((run / "client_state").rglob("*.pt")) > files, "the killed run wrote rows no checkpoint names"
    assert_same(weights_and_state(fit(name, 4, run, ckpt_path=earlier)), want, name)


def fit_stores(name, tmp_path):
    return client_store.client_stores(fit(name, 1, tmp_path / "sizes")).values()


def assert_same(got: dict, want: dict, name: str) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert key.startswith("client_banks.") or torch.equal(got[key], value), f"{name}: {key} differs"
