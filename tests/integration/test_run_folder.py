"""One folder per run (:mod:`lightning_sfl.run_folder`): versions never overwrite, the latest is found, a live
process holds its folder against a second one (one line naming it), a dead one's lock is taken over, and a resumed
run's CSV log continues in one file."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time

import pytest
from _helpers import REPO

from lightning_sfl.errors import ConfigError
from lightning_sfl.run_folder import ContinuingCSVLogger, RunLock, claim_new, latest_run, next_run, trim_rounds


def test_new_runs_take_the_next_version_and_the_latest_is_found(tmp_path):
    assert latest_run(tmp_path, "scala-x") is None
    names = []
    for _ in range(3):
        folder = next_run(tmp_path, "scala-x")
        claim_new(folder)
        names.append(folder.name)
    (tmp_path / "scala-x-other").mkdir()  # another name with the same beginning is not a version
    assert names == ["scala-x", "scala-x-v2", "scala-x-v3"]
    assert latest_run(tmp_path, "scala-x") == tmp_path / "scala-x-v3"
    with pytest.raises(ConfigError, match="was just created by another process"):
        claim_new(tmp_path / "scala-x-v2")


def test_a_live_holder_is_named_and_a_dead_ones_lock_is_taken_over(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / ".lock").write_text(
            f'{{"pid": {sleeper.pid}, "host": "{os.uname().nodename}", "command": "lightning-sfl fit", "since": 0}}'
        )
        with pytest.raises(ConfigError, match=rf"is in use by process {sleeper.pid} on .*lightning-sfl fit"):
            RunLock(tmp_path).acquire()
    finally:
        sleeper.kill()
        sleeper.wait()
    lock = RunLock(tmp_path, command="again")
    lock.acquire()  # its holder is gone
    assert lock.holder()["pid"] == os.getpid() and lock.holder()["command"] == "again"
    lock.release()
    assert not (tmp_path / ".lock").exists()


def test_a_requeued_slurm_job_takes_over_the_lock_of_its_earlier_start_on_another_node(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    (tmp_path / ".lock").write_text('{"pid": 1, "host": "node-a", "job": "4242", "since": 0}')
    RunLock(tmp_path).acquire()  # the earlier start of this job
    (tmp_path / ".lock").write_text('{"pid": 1, "host": "node-a", "job": "7", "since": 0}')
    with pytest.raises(ConfigError, match="in use by process 1 on node-a"):  # another job, elsewhere: maybe alive
        RunLock(tmp_path).acquire()


def test_the_csv_log_continues_in_one_file_without_the_rounds_logged_again(tmp_path):
    first = ContinuingCSVLogger(tmp_path, name="csv")
    for epoch in range(3):
        first.log_metrics({"loss": 1.0 / (epoch + 1), "epoch": epoch}, step=epoch)
    first.save()
    assert trim_rounds(tmp_path / "csv" / "metrics.csv", 2) == 1  # the checkpoint holds rounds 0 and 1
    again = ContinuingCSVLogger(tmp_path, name="csv")
    again.log_metrics({"loss": 0.2, "acc": 0.9, "epoch": 2}, step=2)  # a new column too
    again.save()
    with open(tmp_path / "csv" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["epoch"], r["acc"]) for r in rows] == [("0", ""), ("1", ""), ("2", "0.9")]
    assert [p.name for p in tmp_path.rglob("*.csv")] == ["metrics.csv"]


@pytest.mark.extended  # ~25 s on two cores; the lock's rules run in CI above
def test_a_second_process_cannot_write_a_run_folder_a_live_one_holds(tmp_path):
    """While a fit runs, the same command with ``--ckpt_path last`` (a requeued job started twice) stops with one line
    naming the holder, before anything is written; the first run is not disturbed."""
    cmd = [sys.executable, "-m", "lightning_sfl.cli", "fit", "--config", str(REPO / "configs/digits/scala.yaml")]
    cmd += ["--trainer.enable_progress_bar=false", "--trainer.max_epochs=200", "--trainer.logger=false"]
    env = {**os.environ, "WANDB_MODE": "offline"}
    first = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while not list(tmp_path.glob("runs/*/checkpoints/last.ckpt")) and time.time() < deadline:
            time.sleep(0.1)
        (folder,) = tmp_path.glob("runs/*")
        second = subprocess.run([*cmd, "--ckpt_path=last"], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert second.returncode == 2 and first.poll() is None
        (error,) = [line for line in second.stderr.splitlines() if "error" in line.lower()]  # one line, no traceback
        assert error.startswith(f"error: run folder runs/{folder.name} is in use by process {first.pid}")
        assert "Traceback" not in second.stderr and "lightning-sfl fit --config" in error
        assert list(tmp_path.glob("runs/*")) == [folder] and RunLock(folder).holder()["pid"] == first.pid
    finally:
        first.kill()
        first.wait()


@pytest.mark.extended  # ~35 s on two cores; the folder's life runs in CI above
def test_a_cli_built_without_running_leaves_no_empty_run_folder(tmp_path):
    """``SFLCLI(run=False)`` claims the run folder for the caller's fit; a caller that never fits leaves nothing behind
    (the empty folder and the ``runs/`` it created go when the process ends), one that fits keeps its run."""
    config = REPO / "configs" / "digits" / "scala.yaml"
    script = (
        "import sys\nfrom lightning_sfl.lightning_cli import SFLCLI\n"
        f"cli = SFLCLI(args=['--config', {str(config)!r}, '--trainer.max_epochs=1', '--trainer.logger=false'], "
        "run=False)\nprint(cli.run_folder)\n"
        "if sys.argv[1] == 'fit':\n    cli.trainer.fit(cli.model, cli.datamodule)\n"
    )
    env = {**os.environ, "WANDB_MODE": "disabled"}
    for mode in ("build", "fit"):
        cwd = tmp_path / mode
        cwd.mkdir()
        out = subprocess.run([sys.executable, "-c", script, mode], cwd=cwd, env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        folder = cwd / out.stdout.strip().splitlines()[0]
        assert folder.parent.name == "runs", folder
        if mode == "build":
            assert not (cwd / "runs").exists(), list((cwd / "runs").rglob("*"))
        else:
            assert (folder / "checkpoints" / "last.ckpt").exists(), list(folder.rglob("*"))
