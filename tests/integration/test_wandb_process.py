"""W&B in a process of its own (:mod:`lightning_sfl.wandb.process`, :class:`lightning_sfl.wandb.logger.WandbLogger`):
the run it writes is the run Lightning's own WandbLogger writes (read from W&B's offline files), the training process
does not import W&B, errors in the worker reach the training process, and a killed training process keeps what it
logged."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _helpers import REPO
from cli_in_one_process import run_command

from lightning_sfl.callbacks.partition_report import PNG_NAME
from lightning_sfl.wandb.offline import read_offline_run

FIT = [
    sys.executable, "-m", "lightning_sfl.cli", "fit", "--config", str(REPO / "configs/digits/scala.yaml"),
    "--trainer.max_epochs=3", "--dissimilarity.every_n_rounds=2", "--trainer.enable_progress_bar=false",
]  # fmt: skip
LIGHTNING_LOGGERS = """\
trainer:
  logger:
    - class_path: lightning.pytorch.loggers.WandbLogger
      init_args: {project: lightning-sfl, save_dir: runs, offline: true}
    - class_path: lightning.pytorch.loggers.CSVLogger
      init_args: {save_dir: runs, name: csv}
"""
#: What differs between two runs of the same calls: wall-clock times and the random client ids of table artifacts.
VOLATILE = {"_timestamp", "_runtime", "_wandb.runtime", "_latest_artifact_path", "artifact_path"}


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_CACHE_DIR": str(tmp_path / "cache"),
        "WANDB_CONFIG_DIR": str(tmp_path / "config"),
        "WANDB_DATA_DIR": str(tmp_path / "data"),
    }


def _stable(value):
    """``value`` without :data:`VOLATILE` keys, at any depth."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _console(run) -> list[tuple[str, str]]:
    """The run's console lines; the hash naming the run folder (of a configuration that names its logger) left out."""
    lines = [(r["output_raw"]["line"], r["output_raw"].get("output_type")) for r in run.records if "output_raw" in r]
    return [(re.sub(r"-[0-9a-f]{10}\b", "-<key>", line), kind) for line, kind in lines]


def test_the_cli_logger_writes_the_run_lightnings_logger_writes(tmp_path):
    """The same fit with the CLI's logger (W&B in its own process) and with Lightning's WandbLogger in the training
    process: the same history rows (tables, charts, scalars, ``round``), metric definitions, config, summary, media
    files and console log."""
    runs = {}
    for name, extra in (("ours", []), ("lightning", ["--config", str(tmp_path / "lightning.yaml")])):
        (tmp_path / "lightning.yaml").write_text(LIGHTNING_LOGGERS)
        cwd = tmp_path / name
        cwd.mkdir()
        proc = run_command([*FIT[3:], *extra], cwd=cwd, env=_env(tmp_path))
        assert proc.returncode == 0, proc.stderr[-3000:]
        (run_folder,) = (cwd / "runs").iterdir()
        assert len(list((run_folder / "wandb").glob("offline-run-*"))) == 1
        runs[name] = read_offline_run(run_folder)
    ours, theirs = runs["ours"], runs["lightning"]
    assert len(ours.history) == len(theirs.history) == 10  # partition, then per round: train, eval (+report)
    assert _stable(ours.history) == _stable(theirs.history)
    assert any("per_class/table" in row for row in ours.history)
    # the same config, but for the resolved command line each recorded: it names its own logger (and so its own
    # checkpoint folder, named by the configuration)
    resolved = ours.config.pop("config"), theirs.config.pop("config")
    assert resolved[0]["trainer"]["logger"] != resolved[1]["trainer"]["logger"]
    assert {k: v for k, v in resolved[0].items() if k not in ("trainer", "checkpoint")} == {
        k: v for k, v in resolved[1].items() if k not in ("trainer", "checkpoint")
    }
    assert ours.metrics == theirs.metrics and ours.config == theirs.config
    assert _stable(ours.summary) == _stable(theirs.summary)
    assert ours.media_files == theirs.media_files and ours.media_files
    assert _console(ours) == _console(theirs) and any("Trainer.fit` stopped" in line for line, _ in _console(ours))
    assert not any(line.startswith(("run saved: ", "final test accuracy")) for line, _ in _console(ours))
    pngs = [next((tmp_path / name / "runs").glob(f"*/csv/**/{PNG_NAME}")).read_bytes() for name in runs]
    assert pngs[0] == pngs[1]  # the heatmap file of the log dir, drawn by W&B's process for ours
    # the same records in the same order, but for system metrics ("stats"), which W&B samples on a timer of its own
    kinds = [[r["type"] for r in run.records if r["type"] != "stats"] for run in (ours, theirs)]
    last = max(i for i, kind in enumerate(kinds[1]) if kind == "history")
    assert kinds[0][: last + 1] == kinds[1][: last + 1]
    assert kinds[0][-1] == "exit"  # ours also ends the run explicitly (exit code 0) when the process ends


@pytest.mark.extended  # ~20 s on two cores (a speed property); in CI: the CLI's logger writes Lightning's run (above)
def test_the_training_process_neither_imports_wandb_nor_waits_for_a_second_worker(tmp_path):
    """``lightning-sfl fit`` pre-starts the worker before importing Lightning; its logger takes that worker, and W&B
    is never imported by the training process."""
    script = textwrap.dedent(
        f"""
        import sys
        import lightning_sfl.wandb.process as wp
        started = []
        original = wp.WandbProcess.__init__
        def counted(self):
            started.append(1)
            original(self)
        wp.WandbProcess.__init__ = counted
        from lightning_sfl.cli import main
        main({FIT[3:]!r})
        print("wandb imported:", "wandb" in sys.modules, "workers:", len(started), "spare:", wp._spare)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "wandb imported: False workers: 1 spare: None" in proc.stdout
    (run_folder,) = (tmp_path / "runs").iterdir()
    run = read_offline_run(run_folder)
    assert [row["round"] for row in run.rows_with("test/acc")] == [1, 2, 3]


def test_errors_in_the_worker_reach_the_training_process(tmp_path, monkeypatch):
    from lightning_sfl.wandb.process import RemoteRun, WandbProcess, WandbProcessError, generate_run_id

    monkeypatch.chdir(tmp_path)
    process = WandbProcess()
    run_id = generate_run_id()
    process.init({"project": "t", "dir": str(tmp_path), "id": run_id}, offline=True)
    run = RemoteRun(process, run_id)
    run.config.update({"lr": 0.1})
    run.config.update({"lr": 0.2})  # W&B refuses to change a config value: reported at the next call
    assert run.project == "t" and run.id == run_id  # (a call that waits: the worker has made the ones before)
    with pytest.raises(WandbProcessError, match="lr"):
        run.log({"x": 1.0})
    with pytest.raises(WandbProcessError, match="AttributeError"):  # a call that waits fails at once
        _ = run.no_such_method
    run.log({"x": 2.0})
    run.summary["best"] = 3.0
    run.finish()
    assert process.closed and process._proc.returncode == 0
    with pytest.raises(WandbProcessError, match="finished"):
        run.log({"x": 3.0})
    offline = read_offline_run(tmp_path / "wandb")
    assert offline.run_id == run_id and offline.config["lr"] == 0.1
    assert [row["x"] for row in offline.rows_with("x")] == [2.0] and offline.summary["best"] == 3.0


@pytest.mark.extended  # ~15 s on two cores; in CI: a finished run's files (above)
def test_a_killed_training_process_keeps_what_it_logged(tmp_path):
    """The training process exits without finishing the run (``os._exit``): the worker sees the pipe close,
    finishes the run with exit code 1, and every row logged before is in the offline files."""
    script = textwrap.dedent(
        f"""
        import os
        from lightning_sfl.wandb.logger import WandbLogger
        logger = WandbLogger(project="t", save_dir={str(tmp_path)!r}, offline=True)
        for step in range(5):
            logger.log_metrics({{"loss": 1.0 / (step + 1)}}, step=step)
        print(logger._process._proc.pid, flush=True)
        os._exit(3)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    pid = int(proc.stdout.split()[-1])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the W&B worker did not exit after its training process")
    run = read_offline_run(tmp_path / "wandb")
    assert [row["loss"] for row in run.rows_with("loss")] == [1.0, 0.5, 1 / 3, 0.25, 0.2]
    assert [row["trainer/global_step"] for row in run.rows_with("loss")] == [0, 1, 2, 3, 4]
    exits = [r["exit"] for r in run.records if r["type"] == "exit"]
    assert exits and exits[-1].get("exit_code") == 1


def test_built_payloads_prefix_and_step(tmp_path, monkeypatch):
    """``log_built`` builds the per-class payload in the worker; ``prefix`` and ``step`` apply as ``log_metrics``
    applies them."""
    from lightning_sfl.wandb.logger import WandbLogger
    from lightning_sfl.wandb.payloads import per_class_payload

    monkeypatch.chdir(tmp_path)
    logger = WandbLogger(project="t", save_dir=str(tmp_path), offline=True, prefix="p")
    logger.log_built(per_class_payload, ([0.5, 1.0], [[1, 1], [0, 2]], 4), step=7)
    logger.finish()
    run = read_offline_run(tmp_path / "wandb")
    (row,) = run.rows_with("p-per_class/table")
    assert row["trainer/global_step"] == 7 and row["p-round"] == 4.0
    assert run.load_table(row["p-per_class/table"])["data"] == [[0, 0.5, 2], [1, 1.0, 2]]


def test_version_is_known_at_once_and_survives_pickling(tmp_path, monkeypatch):
    from lightning_sfl.wandb.logger import WandbLogger
    from lightning_sfl.wandb.process import WandbProcessError, prestart, take

    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    logger = WandbLogger(save_dir=str(tmp_path), offline=True)
    assert re.fullmatch(r"[a-z0-9]{8}", logger.version)
    copy = pickle.loads(pickle.dumps(logger))
    assert copy.version == logger.version and copy._process is None and copy._experiment is None
    with pytest.raises(WandbProcessError, match="watch"):
        logger.watch(None)
    logger.finish()  # no run was started: the worker just exits
    assert logger._process._proc.returncode == 0 and not list(tmp_path.glob("wandb/offline-run-*"))
    assert WandbLogger(save_dir=str(tmp_path), id="given").version == "given"
    monkeypatch.setenv("WANDB_RUN_ID", "fromenv1")
    assert WandbLogger(save_dir=str(tmp_path)).version == "fromenv1"
    prestart()
    spare = take()
    assert take() is not spare  # taken once
    spare.close()
    monkeypatch.setenv("LOCAL_RANK", "1")
    import lightning_sfl.wandb.process as wp

    prestart()
    assert wp._spare is None  # only rank zero starts a worker early
