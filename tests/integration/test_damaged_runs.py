"""Damaged runs say what is wrong, and nothing is lost: a ``last.ckpt`` that is truncated, empty, dangling or a link
out of its folder is named as such, with the newest intact checkpoint of the run; ``fit --ckpt_path last`` resumes
from that one and says so (exactly: the rounds it trains again give the uninterrupted run's numbers), or stops with one
line when none is intact — never training from round 0 into the run's logs. A run folder (or its ``checkpoints/``)
that links out of where it should be is refused. A kill while a checkpoint is written leaves the previous one.

The commands run through the real entry point, one after another (:mod:`cli_in_one_process`), each on
its own copy of one 3-round run; the kill is a real ``SIGKILL`` of a fit in a process of its own (started as
``python -m lightning_sfl.cli``)."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import REPO
from cli_in_one_process import run_command, run_in_one_process

CONFIG = str(REPO / "configs" / "digits" / "scala.yaml")
ROUNDS = 3
ENV = {**os.environ, "WANDB_MODE": "disabled"}


def _fit(root: Path, *more: str, command: str = "fit") -> list[str]:
    return [command, "--config", CONFIG, f"--trainer.default_root_dir={root}", "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false", *more]  # fmt: skip


def _of(run: Path) -> str:
    """The option that names the run folder of a copy of a run (its name holds the ``default_root_dir``'s hash)."""
    return f"--run_name={run.name}"


def _accuracies(run: Path) -> dict[int, str]:
    """Round -> test accuracy in a run's CSV log (a round logged twice fails: nothing is trained twice into a log)."""
    out: dict[int, str] = {}
    with open(run / "csv" / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row.get("test/acc"):
                assert int(float(row["round"])) not in out, "a round logged twice"
                out[int(float(row["round"]))] = row["test/acc"]
    return out


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A 3-round fit of the digits config: its run folder (``runs/<name>``), which keeps rounds 2 and 3."""
    root = tmp_path_factory.mktemp("finished")
    (run,) = run_in_one_process([(root, _fit(root / "runs", f"--trainer.max_epochs={ROUNDS}"))], env=ENV)
    assert run.code == 0, run.stderr[-2000:]
    (folder,) = (root / "runs").iterdir()
    return folder


def _copy(finished: Path, where: Path) -> Path:
    """A copy of the finished run under ``where/runs`` (links kept as links)."""
    run = where / "runs" / finished.name
    shutil.copytree(finished, run, symlinks=True)
    (run / ".lock").unlink(missing_ok=True)
    return run


def _damaged(finished: Path, tmp_path: Path) -> tuple[dict[str, Path], list]:
    """Copies of the finished run, each damaged in its own way, and the commands run on them (case -> its copy)."""
    cases = {case: _copy(finished, tmp_path / case) for case in (
        "truncated", "empty", "dangling", "dangling-none-left", "foreign", "validate", "attack", "no-checkpoint",
        "checkpoints-link", "target", "csv-garbled", "checkpoints-file")}  # fmt: skip
    ckpts = {case: run / "checkpoints" for case, run in cases.items()}
    whole = (finished / "checkpoints" / "last.ckpt").read_bytes()
    (ckpts["truncated"] / "epoch=2-step=15.ckpt").write_bytes(whole[:999])
    for case in ("empty", "validate", "attack"):
        (ckpts[case] / "epoch=2-step=15.ckpt").write_bytes(b"")
    (ckpts["dangling"] / "epoch=2-step=15.ckpt").unlink()
    for name in ("epoch=2-step=15.ckpt", "epoch=1-step=10.ckpt"):
        (ckpts["dangling-none-left"] / name).unlink()
    (tmp_path / "elsewhere.ckpt").write_bytes(whole)
    (ckpts["foreign"] / "last.ckpt").unlink()
    (ckpts["foreign"] / "last.ckpt").symlink_to(tmp_path / "elsewhere.ckpt")
    shutil.rmtree(ckpts["no-checkpoint"])  # stopped before its first round ended
    shutil.move(ckpts["checkpoints-link"], tmp_path / "elsewhere")
    ckpts["checkpoints-link"].symlink_to(tmp_path / "elsewhere")
    (cases["csv-garbled"] / "csv" / "metrics.csv").write_bytes(b"\x00\x01garbage\xff")
    shutil.rmtree(ckpts["checkpoints-file"])
    ckpts["checkpoints-file"].write_text("not a folder")
    (tmp_path / "run-link" / "runs").mkdir(parents=True)
    (tmp_path / "run-link" / "runs" / finished.name).symlink_to(cases["target"])
    name = _of(finished)
    commands = [(tmp_path / case, _fit(tmp_path / case / "runs", f"--trainer.max_epochs={ROUNDS}", "--ckpt_path=last",
                                       name)) for case in ("truncated", "empty", "dangling", "dangling-none-left",
                                                           "foreign", "checkpoints-link", "run-link", "csv-garbled",
                                                           "checkpoints-file")]  # fmt: skip
    commands += [
        (tmp_path / "validate", _fit(tmp_path / "validate" / "runs", "--ckpt_path=last", name, command="validate")),
        (tmp_path / "attack", ["attack", "--config", CONFIG, "--ckpt_path", "last", "--", name,
                               f"--trainer.default_root_dir={tmp_path / 'attack' / 'runs'}"]),
        (tmp_path / "run-link", _fit(tmp_path / "run-link" / "runs", "--ckpt_path=last", name, command="validate")),
        (tmp_path / "no-checkpoint", _fit(tmp_path / "no-checkpoint" / "runs", "--trainer.max_epochs=1",
                                          "--ckpt_path=last", name)),
    ]  # fmt: skip
    return cases, commands


def test_damaged_runs_say_what_is_wrong_and_lose_nothing(finished, tmp_path):
    names = sorted(p.name for p in (finished / "checkpoints").iterdir())  # the previous round's kept beside the latest
    assert names == ["epoch=1-step=10.ckpt", "epoch=2-step=15.ckpt", "last.ckpt"]
    assert os.readlink(finished / "checkpoints" / "last.ckpt") == "epoch=2-step=15.ckpt"
    assert not list(finished.rglob("*.partial"))
    uninterrupted = _accuracies(finished)
    cases, commands = _damaged(finished, tmp_path)
    outside = {p: p.read_bytes() for p in [*(tmp_path / "elsewhere").rglob("*"), *cases["target"].rglob("*")]
               if p.is_file()}  # fmt: skip
    before_no_checkpoint = (cases["no-checkpoint"] / "csv" / "metrics.csv").read_text()
    runs = run_in_one_process(commands, env=ENV)
    truncated, empty, dangling, none_left, foreign, link, run_link, garbled, ckpt_file = runs[:9]
    validate, attack, run_link_v, fresh = runs[9:]
    shown = f"runs/{finished.name}"
    for run, case, why in (
        (truncated, "truncated", "is damaged (truncated, or not a checkpoint: no whole archive)"),
        (empty, "empty", "is damaged (empty: 0 bytes)"),
        (dangling, "dangling", "is a dangling link (to epoch=2-step=15.ckpt, which does not exist)"),
    ):
        assert run.code == 0, (case, run.stderr[-2000:])
        line = f"resuming {shown}: last.ckpt {why}; from round 2's checkpoint (epoch=1-step=10.ckpt)"
        assert line in run.stdout.splitlines(), (case, run.stdout)
        assert run.stdout.splitlines()[-1] == f"final test accuracy: {float(uninterrupted[ROUNDS]):.4f} after 3 rounds"
        assert _accuracies(cases[case]) == uninterrupted  # round 3 again, exactly; rounds 1-2 once each
        names = sorted(p.name for p in (cases[case] / "checkpoints").iterdir())
        kept = ["epoch=2-step=15.ckpt.damaged"] if case != "dangling" else []  # nothing deleted
        assert names == sorted(["epoch=1-step=10.ckpt", "epoch=2-step=15.ckpt", "last.ckpt", *kept]), (case, names)
    for run, case, text in (
        (none_left, "dangling-none-left", "checkpoints/last.ckpt is a dangling link (to epoch=2-step=15.ckpt, which "
         "does not exist), and no intact checkpoint of the run is left: nothing to resume"),
        (foreign, "foreign", f"checkpoints/last.ckpt is a link out of its folder (to {tmp_path / 'elsewhere.ckpt'}): "
         "not followed"),
        (link, "checkpoints-link", f"checkpoints is a link to {tmp_path / 'elsewhere'}, outside the run folder: "
         "refused (not followed)"),
        (run_link, "target", f"is a link to {cases['target']}, outside {tmp_path / 'run-link' / 'runs'}: refused"),
        (run_link_v, "target", f"is a link to {cases['target']}, outside {tmp_path / 'run-link' / 'runs'}: refused"),
        (validate, "validate", "checkpoints/last.ckpt is damaged (empty: 0 bytes); the newest intact checkpoint beside "
         "it is epoch=1-step=10.ckpt (round 2): give it with --ckpt_path"),
        (attack, "attack", "checkpoints/last.ckpt is damaged (empty: 0 bytes); the newest intact checkpoint"),
        (garbled, "csv-garbled", "csv/metrics.csv is damaged (not a CSV log of the run: 'utf-8' codec can't decode"),
        (ckpt_file, "checkpoints-file", "checkpoints is a file, not a folder (the run's checkpoints/ is damaged)"),
    ):  # fmt: skip
        assert run.code == 2 and run.stderr.count("\n") == 1 and text in run.stderr, (case, run.stderr[-2000:])
        if case not in ("checkpoints-link", "csv-garbled"):
            assert _accuracies(cases[case]) == uninterrupted  # its logs as they were: nothing trained from round 0
    assert [p.name for p in (tmp_path / "dangling-none-left" / "runs").iterdir()] == [finished.name]  # no new run
    after = {p: p.read_bytes() for p in [*(tmp_path / "elsewhere").rglob("*"), *cases["target"].rglob("*")]
             if p.is_file()}  # fmt: skip
    assert after == outside  # nothing written through a link
    # the latest run holds no checkpoint: a new run beside it, said so; its folder untouched
    assert fresh.code == 0, fresh.stderr[-2000:]
    assert f"{shown} holds no checkpoint (no round of it finished): a new run instead" in fresh.stdout
    assert f"run folder: {shown}-v2" in fresh.stdout
    assert (cases["no-checkpoint"] / "csv" / "metrics.csv").read_text() == before_no_checkpoint


#: Kills this process as its round-2 checkpoint is being written: its ``.partial`` file cut to half, before the rename.
KILL_WHILE_WRITING = """
import os, signal
_replace, _seen = os.replace, []
def replace(source, target, *args, **kwargs):
    if str(source).endswith(".ckpt.partial"):
        _seen.append(source)
        if len(_seen) == 2:
            with open(source, "r+b") as f:
                f.truncate(os.path.getsize(source) // 2)
            os.kill(os.getpid(), signal.SIGKILL)
    return _replace(source, target, *args, **kwargs)
os.replace = replace
"""


def test_a_kill_while_a_checkpoint_is_written_leaves_the_previous_one(tmp_path):
    """A real ``SIGKILL`` while round 2's checkpoint is written (half of it on the disk): round 1's stays the run's
    checkpoint, and ``--ckpt_path last`` continues from it (each round logged once; round 2 trained again gives the
    numbers it gave before)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(KILL_WHILE_WRITING)
    args = [sys.executable, "-m", "lightning_sfl.cli", *_fit(tmp_path / "runs", f"--trainer.max_epochs={ROUNDS}")]
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(hook), ENV.get("PYTHONPATH", "")])}
    killed = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr[-2000:]
    (run,) = (tmp_path / "runs").iterdir()
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["epoch=0-step=5.ckpt", "epoch=1-step=10.ckpt.partial", "last.ckpt"], names
    first = _accuracies(run)  # (round 2 was logged before its checkpoint was written)
    assert sorted(first) == [1, 2]
    resumed = run_command([*args[3:], "--ckpt_path=last"], cwd=tmp_path, env=ENV)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert resumed.stdout.splitlines()[-1].startswith("final test accuracy: ")
    again = _accuracies(run)
    assert sorted(again) == [1, 2, 3] and again[1] == first[1] and again[2] == first[2]  # round 2 again, exactly
    assert not list(run.rglob("*.partial"))
