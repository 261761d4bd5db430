"""Exact resume at round boundaries, for every registered algorithm: an interrupted run continued from its
last checkpoint ends with exactly the weights and metrics of an uninterrupted run."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import lightning as L
import pytest
import torch
from _helpers import REPO, csv_rounds, data_kwargs, extended_params, method_kwargs
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from lightning_sfl.algorithms import ALGORITHMS
from lightning_sfl.callbacks import CommunicationBytes
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.runtime.state import banks_left_out, dense_client_states

METHODS = ALGORITHMS
#: Settings that otherwise follow max_epochs (FedConcat's stage split: half of max_epochs), fixed so that the
#: interrupted run (max_epochs=2) and the full one (4) are the same run; the resume lands on the head stage.
#: SCALA-PE: its regulariser on from the first step (hinge at 0), so that the decoders' state shapes the weights; no
#: bottleneck, whose linear Conv-Conv-Conv chain diverges in round 4 at this test's lr 0.05 with momentum 0.5; 2
#: warm-up passes of each decoder over its client's shard instead of 30 (the warm-up's state is the same, and cheap).
#: FedMatch: λ_L2 = 1 (the code's 10 goes with lr 1e-3; at this lr the clients' pull of ψ toward σ diverges in round 4).
#: GAS: cut at s5 (128-dim activations), so that its full covariances (the paper's) stay small: at s2 (512 dims) their
#: float64 second moments made this the slowest resume test by 10×.
FIXED = {
    "fedconcat": {"encoder_rounds": 2},
    "scala_pe": {
        "defences": [
            {
                "class_path": "lightning_sfl.defences.InversionRegulariser",
                "init_args": {"threshold": 0.0, "warmup_epochs": 2},
            }
        ]
    },
    "fedmatch": {"l2_weight": 1.0},
    "gas": {"split_point": "s5"},
}


def _dm(**kw) -> FederatedDataModule:
    return FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1, **kw)


def _fit(name: str, rounds: int, folder: Path, ckpt_path: str | None = None):
    torch.manual_seed(0)
    kwargs = method_kwargs(name, local_iters=2, lr=0.05, momentum=0.5, **FIXED.get(name, {}))  # momentum: its state
    model = METHODS[name](**kwargs)
    trainer = L.Trainer(
        max_epochs=rounds,
        logger=CSVLogger(folder, name="csv", version=0),
        callbacks=[ModelCheckpoint(dirpath=folder / "ckpt", save_last=True), CommunicationBytes()],
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,  # as the CLI's trainer: a round has fewer steps than Lightning's default 50
    )
    trainer.fit(model, _dm(**data_kwargs(name)), ckpt_path=ckpt_path)
    return model, trainer


#: Resumed with ``-m extended`` only (~85 s of CI on two cores). CI resumes one or more methods of each family, each
#: with state of its own kind: SCALA, CS-SFL (the class-balanced selection), S²FL (its sliding split), FedAvg, SCAFFOLD
#: (control variates), FedAdam (server moments), FedNova, GAS (the asynchronous clock), supervised-only (the
#: semi-supervised family; the own tests of Semi-SFL and CA²FL, FedBuff's variant, resume them too). A method added
#: since runs in CI.
RESUME_EXTENDED = set(
    "async_sfl ca2fl ca_sfl fedadagrad fedavgm fedbuff fedcbs fedconcat feddecorr feddyn fedlc fedlogit "
    "fedmatch fedprox fedrs fedswitch fedswitch_sl fedyogi fsha lla_sfl minibatch_sfl scala_pe semi_sfl "
    "semifl sfl_local_loss splitfedv1 splitfedv2 splitfedv3".split()
)


@pytest.mark.parametrize("name", extended_params(sorted(METHODS), RESUME_EXTENDED))
def test_resume_at_round_boundary_is_exact(name, tmp_path):
    full, _ = _fit(name, 4, tmp_path / "full")
    _fit(name, 2, tmp_path / "part")  # "interrupted" after round 2
    resumed, trainer = _fit(name, 4, tmp_path / "part", ckpt_path=str(tmp_path / "part" / "ckpt" / "last.ckpt"))
    assert trainer.current_epoch == 4
    transient = banks_left_out(full)  # slots rebuilt every round: not part of what a resume must restore
    for (n, a), b in zip(full.state_dict().items(), resumed.state_dict().values()):
        assert n.startswith(transient) or torch.equal(a, b), f"{name}: {n} differs after resume"
    stores = dense_client_states(resumed)  # per-client state (FedDyn's ∇L_k, SCAFFOLD's c_k, decoders...)
    for n, a in dense_client_states(full).items():
        assert torch.equal(a, stores[n]), f"{name}: {n} differs after resume"
    want, got = csv_rounds(tmp_path / "full"), csv_rounds(tmp_path / "part")
    for epoch in (2, 3):
        assert {"test/acc", "comm/cumulative_bytes"} <= set(want[epoch])
        for key in ("test/acc", "comm/cumulative_bytes", "train/server_loss", "train/client_loss"):
            assert got[epoch].get(key) == want[epoch].get(key), (name, epoch, key)


def _cli(*args: str, config: str = "scala") -> list[str]:
    import sys

    config = REPO / "configs" / "digits" / f"{config}.yaml"
    return [
        sys.executable,
        "-m",
        "lightning_sfl.cli",
        "fit",
        "--config",
        str(config),
        "--trainer.max_epochs=30",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        *args,
    ]


def _csv_rounds(folder: Path, pattern: str = "csv/version_*/metrics.csv") -> dict[int, str]:
    out: dict[int, str] = {}
    for path in sorted(folder.glob(pattern)):
        with open(path) as f:
            for row in csv.DictReader(f):
                if row.get("test/acc"):
                    out[int(float(row["round"]))] = row["test/acc"]
    return out


#: ``-m extended`` only: GAS (asynchronous, 10 rounds, ~60 s on two cores) and SCALA's 30 rounds (~60 s); an exact
#: resume from the last checkpoint runs in CI above, per method.
@pytest.mark.parametrize(
    "config,rounds",
    [pytest.param("scala", 30, marks=pytest.mark.extended), pytest.param("gas", 10, marks=pytest.mark.extended)],
)
def test_kill_minus_9_then_resume_gives_the_uninterrupted_metrics(config, rounds, tmp_path):
    """A real SIGKILL of a training process, then ``--ckpt_path last``: same per-round accuracy as a run that
    was never interrupted (GAS: the asynchronous clock, in-flight clients' slots, buffers and statistics too)."""
    import signal
    import subprocess
    import time

    def loggers(folder):
        return [
            "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
            f"--trainer.logger.save_dir={folder}",
            "--trainer.logger.name=csv",
            f"--checkpoint.dirpath={folder / 'ckpt'}",
        ]

    def cli(*args):
        return _cli(*args, f"--trainer.max_epochs={rounds}", config=config)

    subprocess.run(cli(*loggers(tmp_path / "full")), check=True, capture_output=True, timeout=600, cwd=tmp_path)
    part = tmp_path / "part"
    proc = subprocess.Popen(cli(*loggers(part)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    deadline = time.time() + 300
    while time.time() < deadline:
        ckpts = list((part / "ckpt").glob("epoch=*.ckpt"))
        if ckpts and max(int(p.name.split("=")[1].split("-")[0]) for p in ckpts) >= 4:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    saved = max(int(p.name.split("=")[1].split("-")[0]) for p in (part / "ckpt").glob("epoch=*.ckpt"))
    assert 4 <= saved < rounds - 1, "the kill must land mid-run"
    subprocess.run(cli(*loggers(part), "--ckpt_path=last"), check=True, capture_output=True, timeout=600, cwd=tmp_path)
    full, resumed = _csv_rounds(tmp_path / "full"), _csv_rounds(part)
    assert sorted(resumed) == list(range(1, rounds + 1))
    assert resumed == full


@pytest.mark.extended  # ~45 s on two cores; kill -9 and resume run in CI with GAS above
def test_cluster_resume_finds_last_and_continues_the_same_wandb_run_after_kill_minus_9(tmp_path):
    """A preempted job re-runs the same command with ``--ckpt_path last`` (no hand-chosen checkpoint folder): it
    finds the run's latest checkpoint and continues the same W&B run, so the round axis is unbroken."""
    import os
    import signal
    import subprocess
    import time

    from lightning_sfl.wandb.offline import find_offline_runs, read_offline_run

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}}
    args = _cli("--trainer.default_root_dir=root")  # the CLI's default loggers: W&B (offline) and CSV, under root/
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:  # until last.ckpt links to a checkpoint of round 5 or later (the link follows the
        lasts = [p for p in tmp_path.glob("root/*/checkpoints/last.ckpt") if p.exists()]  # numbered file: wait for it)
        if lasts and int(lasts[0].resolve().name.split("=")[1].split("-")[0]) >= 4:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (run_folder,) = tmp_path.glob("root/*")  # named by the command's config, not by the W&B run
    folder = run_folder / "checkpoints"
    saved = torch.load(folder / "last.ckpt", weights_only=True)
    done = saved["epoch"] + 1
    assert 4 <= done < 30, "the kill must land mid-run"
    again = subprocess.run([*args, "--ckpt_path=last"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    assert list(tmp_path.glob("root/*")) == [run_folder]  # --ckpt_path last continues the same run folder
    first, resumed = (read_offline_run(d) for d in find_offline_runs(run_folder))
    ids = [run.run_id for run in (first, resumed)]
    assert ids[0] == ids[1] == saved["lightning_sfl"]["wandb_id"]  # one W&B run
    rounds = [[int(r["round"]) for r in run.rows_with("test/acc")] for run in (first, resumed)]
    # W&B's writer is asynchronous: a SIGKILLed process loses the rounds it had not yet written (not so on SIGTERM)
    assert rounds[0] == list(range(1, len(rounds[0]) + 1)) and len(rounds[0]) <= done + 1
    assert rounds[1] == list(range(done + 1, 31))  # continues right after the checkpoint's round
    # one CSV log, continued: the rounds the killed process had flushed, none twice, then the resumed ones
    assert [p.name for p in run_folder.rglob("*.csv")] == ["metrics.csv"]
    with open(run_folder / "csv" / "metrics.csv") as f:
        logged = [int(float(r["round"])) for r in csv.DictReader(f) if r.get("test/acc")]
    assert logged == sorted(set(logged)) and logged[-(30 - done) :] == list(range(done + 1, 31))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[int, str]:
    """Test accuracy per round of a 40-round CLI fit (default loggers) that nobody interrupts."""
    import subprocess

    folder = tmp_path_factory.mktemp("uninterrupted")
    subprocess.run(_cli("--trainer.max_epochs=40"), cwd=folder, check=True, capture_output=True, timeout=600)
    return _csv_rounds(next(folder.glob("runs/*")), "csv/metrics.csv")


#: ``-m extended`` only: SIGTERM (a cluster's preemption; ~60 s on two cores, with its 40-round uninterrupted run) and
#: Ctrl-C (SIGINT, the same path with exit code 130); an exact resume from the last checkpoint runs in CI above.
@pytest.mark.parametrize(
    "signal_name,exit_code",
    [pytest.param("SIGTERM", 143, marks=pytest.mark.extended), pytest.param("SIGINT", 130, marks=pytest.mark.extended)],
)
def test_sigterm_or_ctrl_c_says_one_line_and_the_same_command_continues_exactly(
    signal_name, exit_code, request, tmp_path
):
    """A scheduler's SIGTERM (or Ctrl-C) reaches every process of the job (here: the process group, W&B's worker
    included): the command ends with the signal's exit code and one line naming the kept round and how to continue,
    no traceback from any process; after SIGTERM the same command with ``--ckpt_path last`` gives the uninterrupted
    run's accuracy in every round, in one CSV log (after Ctrl-C Lightning stops the same way: not run again here,
    to keep CI short)."""
    import os
    import signal
    import subprocess
    import time

    args = _cli("--trainer.max_epochs=40")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    # as from a terminal: SIGINT at its default (a shell's background job inherits it ignored, and Python then
    # installs no Ctrl-C handler; the test must not depend on how its runner was started)
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=default_sigint)  # fmt: skip
    deadline = time.time() + 300
    while time.time() < deadline and not [p for p in tmp_path.glob("runs/*/checkpoints/epoch=*.ckpt")
                                          if int(p.name.split("=")[1].split("-")[0]) >= 2]:  # fmt: skip
        time.sleep(0.05)
    os.killpg(proc.pid, getattr(signal, signal_name))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == exit_code, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    (line,) = [ln for ln in err.splitlines() if "interrupted" in ln.lower()]
    cause = "SIGTERM" if signal_name == "SIGTERM" else "Ctrl-C"
    kept = re.fullmatch(rf"interrupted \({cause}\) in round (\d+); round (\d+)'s checkpoint is kept \((\S+)\): "
                        "continue with the same command and --ckpt_path last", line)  # fmt: skip
    assert kept and int(kept.group(2)) < 40 and (tmp_path / kept.group(3)).exists(), line
    if signal_name == "SIGINT":
        return
    uninterrupted = request.getfixturevalue("uninterrupted")
    again = subprocess.run([*args, "--ckpt_path=last"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    (run_folder,) = tmp_path.glob("runs/*")
    assert _csv_rounds(run_folder, "csv/metrics.csv") == uninterrupted and len(uninterrupted) == 40


def test_an_interrupt_between_the_round_checkpoint_and_its_link_keeps_the_round(tmp_path):
    """Lightning replaces ``last.ckpt`` after every round's checkpoint by removing the old link, then making the new
    one; a Ctrl-C in between left no ``last.ckpt`` ("no round had finished"). The interrupt's handler points it at the
    newest round checkpoint that loads, passing over one written only in part."""
    from _helpers import trained_checkpoint

    from lightning_sfl.algorithms import SCALA
    from lightning_sfl.run_placement import relink_last

    last = trained_checkpoint(SCALA, tmp_path)
    (saved,) = tmp_path.glob("epoch=*.ckpt")
    last.unlink()
    (tmp_path / "epoch=7-step=16.ckpt").write_bytes(saved.read_bytes()[:1000])  # a newer one, cut short
    relink_last(last)
    assert last.is_symlink() and last.resolve() == saved.resolve()
    empty = tmp_path / "empty"
    empty.mkdir()
    relink_last(empty / "last.ckpt")  # nothing to point at: nothing made
    assert not (empty / "last.ckpt").exists()
