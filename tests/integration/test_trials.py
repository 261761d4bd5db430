"""The trial pool that ``compare`` and ``sweep`` share (:mod:`lightning_sfl.trials`): a trial in a warm worker gives
what it gives in a process of its own, after another trial in the same worker; a failure, even one that ends the
worker, is that trial's outcome alone; the process is put back after a trial; submitit's local executor runs the
same trial (the code path of ``--launcher slurm`` without a cluster)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest
import torch
from _helpers import REPO

from lightning_sfl.trials import Trial, TrialPool
from lightning_sfl.trials.options import launcher_of, slurm_parameters

CSV = ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir=runs"]


def _fit(folder: Path, *extra: str, **env) -> Trial:
    args = ["fit", "--config", str(REPO / "configs/digits/scala.yaml"), "--trainer.max_epochs=2",
            "--trainer.enable_progress_bar=false", *CSV, *extra]  # fmt: skip
    return Trial(args, cwd=folder, log=folder / "log.txt", env=env)


def _metrics(folder: Path) -> list[dict[str, str]]:
    (path,) = folder.glob("runs/*/lightning_logs/version_0/metrics.csv") or folder.glob("runs/**/metrics.csv")
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.extended  # ~25 s on two cores; in CI: compare's subprocess jobs
def test_a_warm_trial_equals_the_same_trial_in_a_process_of_its_own(tmp_path):
    with TrialPool(jobs=1) as pool:
        first = pool.run(_fit(tmp_path / "before", "--model=fedavg", "--seed_everything=3", "--data.seed=3"))
        warm = pool.run(_fit(tmp_path / "warm", "--torch_threads=1"))
    with TrialPool(jobs=1, launcher="isolate") as pool:
        alone = pool.run(_fit(tmp_path / "alone", "--torch_threads=1"))
    assert first.ok and warm.ok and alone.ok, (first, warm, alone)
    got, want = _metrics(tmp_path / "warm"), _metrics(tmp_path / "alone")
    accs = [row["test/acc"] for row in want if row.get("test/acc")]
    assert len(accs) == 2 and got == want  # every logged number, bit for bit (wall-clock columns aside: none)


def test_a_failure_is_its_trials_outcome_alone(tmp_path):
    env = {"PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    with TrialPool(jobs=1) as pool:
        bad = pool.run(_fit(tmp_path / "bad", "--data.alpha=11"))
        (worker,) = pool._workers
        crash = pool.run(_fit(tmp_path / "crash", "--model=toy_methods.ExitsItsProcess", **env))
        after = pool.run(_fit(tmp_path / "after"))
        (replacement,) = pool._workers
    assert bad.exit_code == 2 and "alpha=11 must be a whole number" in bad.error
    assert crash.exit_code == 7 and "worker process died" in crash.error
    assert after.ok and replacement is not worker
    assert len([r for r in _metrics(tmp_path / "after") if r.get("test/acc")]) == 2


def test_a_trial_in_this_process_leaves_it_as_it_was(tmp_path):
    """What a trial changes (folder, environment, threads, warning filters) is put back; its output went to its
    log, and its environment (a ``None`` removes a variable) was the trial's while it ran."""
    from lightning_sfl.trials.worker import run_here

    os.environ["TRIAL_TEST_REMOVED"] = "here"
    before = (os.getcwd(), dict(os.environ), torch.get_num_threads(), list(__import__("warnings").filters))
    trial = _fit(tmp_path / "t", "--torch_threads=1", "--run_name=${oc.env:TRIAL_TEST_NAME}",
                 TRIAL_TEST_NAME="x", TRIAL_TEST_REMOVED=None)  # fmt: skip
    try:
        outcome = run_here(trial)
    finally:
        os.environ.pop("TRIAL_TEST_REMOVED", None)
    after = (os.getcwd(), {**os.environ, "TRIAL_TEST_REMOVED": "here"}, torch.get_num_threads(),
             list(__import__("warnings").filters))  # fmt: skip
    assert outcome.ok, outcome
    assert after == before
    assert "final test accuracy" in (tmp_path / "t" / "log.txt").read_text()


@pytest.mark.extended  # ~20 s on two cores; the local pool runs in CI
def test_submitits_local_executor_runs_a_trial(tmp_path):
    pytest.importorskip("submitit")
    with TrialPool(jobs=1, launcher="submitit-local", folder=tmp_path / "jobs") as pool:
        outcome = pool.run(_fit(tmp_path / "job"))
    assert outcome.ok, outcome
    assert len([r for r in _metrics(tmp_path / "job") if r.get("test/acc")]) == 2
    assert any((tmp_path / "jobs").iterdir())  # submitit's own files: the job really went through it


@pytest.mark.parametrize(
    "launcher,isolate,slurm,expected",
    [
        ("warm", True, [], "isolate"),
        ("slurm", False, ["timeout_min=5"], "slurm"),
        ("slurm", True, [], "--isolate contradicts --launcher slurm"),
        ("warm", False, ["timeout_min=5"], "--slurm sets submitit's parameters"),
    ],
)
def test_launcher_options(launcher, isolate, slurm, expected):
    from argparse import Namespace

    args = Namespace(launcher=launcher, isolate=isolate, slurm=slurm)
    if expected.startswith("--"):
        with pytest.raises(ValueError, match=expected):
            launcher_of(args)
    else:
        assert launcher_of(args) == expected


def test_slurm_parameters_need_key_value():
    with pytest.raises(ValueError, match="is not KEY=VALUE"):
        slurm_parameters(["gpu"])


@pytest.mark.extended  # ~20 s on two cores; compare's W&B runs run in CI (test_compare_wandb.py)
def test_a_warm_workers_wandb_process_serves_its_next_trial_with_that_trials_name_folder_and_log(tmp_path):
    """A warm worker tells W&B to finish a trial's run and goes on; once written, the W&B process is taken back and
    serves the next trial's run: written in that trial's folder (not the first trial's), under its name, with its
    messages in that run's ``wandb/messages.log`` (not in the trial's log), and the same summary as the trial's CSV
    log."""
    import time

    from lightning_sfl.trials.worker import run_here
    from lightning_sfl.wandb import process as wandb_process
    from lightning_sfl.wandb.offline import find_offline_runs, read_offline_run

    def trial(name: str) -> Trial:
        args = ["fit", "--config", str(REPO / "configs/digits/scala.yaml"), "--trainer.max_epochs=2",
                "--trainer.enable_progress_bar=false"]  # fmt: skip
        return Trial(args, cwd=tmp_path / name, log=tmp_path / name / "log.txt",
                     env={"WANDB_MODE": "offline", "WANDB_NAME": name, "WANDB_SILENT": None})  # fmt: skip

    try:
        assert run_here(trial("first"), wait_for_wandb=False).ok
        (first,) = wandb_process._finishing
        deadline = time.monotonic() + 60
        while not first.finished() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert run_here(trial("second"), wait_for_wandb=False).ok
        assert wandb_process._finishing == [first]  # the same W&B process, taken back for the second run
    finally:
        wandb_process.reap()
    for name in ("first", "second"):
        (run_folder,) = (tmp_path / name / "runs").iterdir()
        (run_dir,) = find_offline_runs(run_folder)
        run = read_offline_run(run_dir)
        with open(next(run_folder.glob("csv/metrics.csv"))) as f:
            accs = [float(r["test/acc"]) for r in csv.DictReader(f) if r.get("test/acc")]
        assert run.run["display_name"] == name and run.summary["test/acc"] == pytest.approx(accs[-1])
        assert "wandb: Run summary" in (run_folder / "wandb" / "messages.log").read_text()  # W&B's own, in its run
        assert "wandb:" not in (tmp_path / name / "log.txt").read_text()
