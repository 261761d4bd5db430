"""Several processes: ``--trainer.strategy ddp --trainer.devices 2`` (gloo on CPU, real processes) gives the
weights and metrics of the one-process run with the same seed."""

from __future__ import annotations

import csv
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _helpers import REPO

from lightning_sfl.client_store import ClientStore


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(method: str, devices: int, folder: Path, rounds: int = 3, extra=()) -> tuple[dict, dict[int, float]]:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WANDB_MODE": "disabled"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), *filter(None, [os.environ.get("PYTHONPATH")])])
    cmd = [
        sys.executable,
        "-m",
        "lightning_sfl.cli",
        "fit",
        "--config",
        str(REPO / "configs" / "digits" / f"{method}.yaml"),
        f"--trainer.max_epochs={rounds}",
        "--trainer.accelerator=cpu",
        "--trainer.strategy=ddp",
        f"--trainer.devices={devices}",
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.save_dir={folder}",
        "--trainer.logger.name=csv",
        f"--checkpoint.dirpath={folder / 'ckpt'}",
        "--trainer.enable_progress_bar=false",
        "--model.momentum=0.5",
        "--dissimilarity.every_n_rounds=1",
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=folder.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    checkpoint = torch.load(folder / "ckpt" / "last.ckpt", weights_only=True)
    state = checkpoint["state_dict"]
    for key, record in checkpoint["lightning_sfl"].get("client_state", {}).items():  # per-client stores, [K, P]
        store = ClientStore(key, record["num_clients"], record["default"])
        store.load(record)
        state[key] = store.dense()
    metrics: dict[int, dict[str, float]] = {}
    with open(next(folder.glob("csv/version_*/metrics.csv"))) as f:
        for row in csv.DictReader(f):
            if row.get("epoch"):
                metrics.setdefault(int(row["epoch"]), {}).update({k: float(v) for k, v in row.items() if v})
    return state, metrics


TINY_CLIENTS = ("--data.num_clients=50", "--data.participation=0.5", "--data.batch_size=30")  # B_k = 1 or 2
# In float32, FedProx/FedDyn runs differ by up to 1e-3: summation-order rounding flips a few max-pool/ReLU
# decisions and the trajectories part. In float64 they agree to ~1e-16, which shows the math is the same.
FLOAT64 = ("--trainer.precision=64-true",)


#: Compressors of every row crossing that draw nothing (those that draw are one process's: refused under DDP), and of
#: the model exchange with its per-client residuals (the same draws on every process). In float64: in float32 the
#: processes' summation order flips a few top-k choices and the trajectories part (as FedProx's max-pool decisions).
COMPRESSED_ROWS = (
    *FLOAT64, "--model.compression+=TopK", "--model.compression.ratio=0.2",
    "--model.compression+=Quantise", "--model.compression.bits=8", "--model.compression.crossing=gradients",
)  # fmt: skip
COMPRESSED_MODELS = (
    *FLOAT64, "--model.compression+=QSGD", "--model.compression.levels=4", "--model.compression.crossing=model",
    "--model.compression.error_feedback=true",
)  # fmt: skip

#: Plain SCALA and FedAvg have no case of their own (each case costs ~30-45 s of CI on 2 cores): SCALA runs in the
#: tiny-clients case (the same method, plus clients with no rows on a process), FedAvg's aggregation in FedDyn,
#: FedNova and FedAdam (FedAvg plus a regulariser and per-client state, a step-count normalisation, server moments).
#: FedProx (FedAvg plus a parameter-only regulariser) has none either: FedDyn's case runs an FL regulariser, and the
#: last case a split method's parameter-only one. CI runs one case (SCALA, ~20 s on two cores); the other nine are
#: ``extended`` (``pytest -m extended``: ~6 min more on two cores; FedAdam's alone ~50 s).
@pytest.mark.parametrize(
    "method,extra",
    [
        pytest.param("splitfedv2", (), marks=pytest.mark.extended),
        pytest.param("sfl_local_loss", (), marks=pytest.mark.extended),
        ("scala", TINY_CLIENTS),
        pytest.param("feddyn", FLOAT64, marks=pytest.mark.extended),
        pytest.param("fednova", (), marks=pytest.mark.extended),
        pytest.param("scaffold", FLOAT64, marks=pytest.mark.extended),
        pytest.param("fedadam", (), marks=pytest.mark.extended),
        pytest.param("fedconcat", (), marks=pytest.mark.extended),
        pytest.param("s2fl", (), marks=pytest.mark.extended),
        pytest.param(
            "minibatch_sfl", (*FLOAT64, "--model=toy_methods.ProximalSFL", "--model.mu=1.0"), marks=pytest.mark.extended
        ),
        pytest.param(
            "scala", ("--model.tail_point=s4", "--model.pooled_label_counts=true"), marks=pytest.mark.extended
        ),
        pytest.param(
            "scala", ("--model.defences+=RandomisedLabels", "--model.defences.epsilon=2"), marks=pytest.mark.extended
        ),
        pytest.param("scala", COMPRESSED_ROWS, marks=pytest.mark.extended),
        pytest.param("fedavg", COMPRESSED_MODELS, marks=pytest.mark.extended),
    ],
    ids=[
        "splitfedv2",
        "sfl_local_loss",
        "scala-clients-with-no-rows-on-a-process",
        "feddyn-float64",
        "fednova-local-epochs-unequal-steps",
        "scaffold-float64-control-variates",
        "fedadam-server-moments",
        "fedconcat-clusters-then-head-rounds",
        "s2fl-label-balanced-groups",
        "split-method-with-a-parameter-only-regulariser",
        "scala-u-shaped-pooled-label-counts",
        "scala-randomised-labels-each-process-its-rows",
        "scala-top-k-up-8-bit-gradients-down",
        "fedavg-qsgd-updates-with-error-feedback",
    ],
)
def test_two_processes_equal_one(method, extra, tmp_path):
    one_state, one = _run(method, 1, tmp_path / "one", extra=extra)
    two_state, two = _run(method, 2, tmp_path / "two", extra=extra)
    assert one_state.keys() == two_state.keys()
    for k, v in one_state.items():
        if v.is_floating_point():
            torch.testing.assert_close(two_state[k], v, rtol=1e-4, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}")
    assert sorted(one) == sorted(two) == [0, 1, 2]
    for epoch in one:  # same evaluated accuracy, traffic and (rank-synced) per-class metrics
        for key in (
            "test/acc",
            "comm/cumulative_bytes",
            "train/server_loss",
            "test/acc_class_3",
            "clock/elapsed_seconds",
        ):
            assert two[epoch][key] == pytest.approx(one[epoch][key], rel=1e-4, abs=1e-5), (epoch, key)
        assert two[epoch]["dissimilarity/total"] == pytest.approx(one[epoch]["dissimilarity/total"], rel=1e-3)


POISON = """
import os
import lightning as L
import torch
from lightning_sfl.algorithms import SCALA
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.errors import NonFiniteError


class Poison(L.Callback):  # process 0 corrupts its rows of the step's second client in round 2
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.current_epoch == 1 and batch_idx == 1 and trainer.global_rank == 0:
            batch.x[batch.owner == 1] = float("nan")


if __name__ == "__main__":
    torch.set_num_threads(1)
    dm = FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", strategy="ddp", devices=2, logger=False,
                        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                        callbacks=[Poison()])
    try:
        trainer.fit(SCALA(local_iters=2, lr=0.05), dm)
    except NonFiniteError as e:
        print(f"rank {trainer.global_rank}: {e}", flush=True)
        os._exit(3)  # no interpreter teardown: gloo's threads may abort it ("terminate called ...")
    print(f"rank {trainer.global_rank}: finished", flush=True)
"""


@pytest.mark.extended  # ~15 s on two cores; one DDP run (SCALA) in CI
def test_nan_on_one_process_stops_both(tmp_path):
    """A NaN in one process's rows stops every process in the same step (the NaN/Inf guard's flags are summed over
    processes): the process holding the rows names the client, the other says the rows are on another process; none
    waits forever in a collective."""
    script = tmp_path / "poison.py"
    script.write_text(POISON)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 3, proc.stderr[-3000:]
    head = "non-finite activations in round 2, local iteration 2, client"
    assert re.search(rf"rank 0: {head}\(s\) \[\d+\]", proc.stdout), proc.stdout
    assert f"rank 1: {head}(s) on another process" in proc.stdout, proc.stdout
    assert "finished" not in proc.stdout


@pytest.mark.extended  # ~35 s on two cores; ddp (SCALA) equals one process in CI
def test_ddp_spawn_trains_reports_its_rounds_and_equals_one_process(tmp_path):
    """``--trainer.strategy ddp_spawn`` (the method, with its federation, is pickled to the processes): the final line
    names the rounds trained and the accuracy of the one-process run."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "lightning_sfl.cli", "fit", "--config", str(REPO / "configs/digits/scala.yaml")]
    cmd += ["--trainer.max_epochs=2", "--trainer.logger=false", "--trainer.enable_checkpointing=false"]
    cmd += ["--trainer.enable_progress_bar=false", "--dissimilarity.every_n_rounds=0", "--trainer.accelerator=cpu"]
    lines = []
    for extra in ([], ["--trainer.strategy=ddp_spawn", "--trainer.devices=2"]):
        proc = subprocess.run([*cmd, *extra], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        lines.append(re.search(r"final test accuracy: [0-9.]+ after \d+ rounds", proc.stdout).group(0))
    assert lines[1] == lines[0] and lines[0].endswith("after 2 rounds"), lines
