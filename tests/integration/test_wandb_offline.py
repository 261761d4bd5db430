"""What :mod:`lightning_sfl.wandb.offline` relies on from W&B's own reader (``wandb leet inspect --json``), pinned
on a run written by the W&B SDK itself: if a W&B release changes any of it, this test says what."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from lightning_sfl.wandb.offline import find_offline_runs, inspect_log, read_offline_run

SCRIPT = textwrap.dedent(
    """
    import wandb

    run = wandb.init(project="pin", dir=".", config={"lr": 0.1, "model": {"arch": "cnn"}}, tags=["t1"], group="g")
    run.define_metric("round")
    run.define_metric("*", step_metric="round", step_sync=True)
    for r in (1, 2, 3):
        run.log({"round": r, "test/acc": r / 10, "dissimilarity/client.0.weight": 2.5 * r, "note": None})
    table = wandb.Table(columns=["class", "accuracy"], data=[[0, 0.5], [1, 1.0]])
    run.log({"round": 4, "per_class/table": table, "chart": wandb.plot.bar(table, "class", "accuracy")})
    run.summary["best"] = 0.3
    run.config.update({"seed": 7, "extra": {"depth": 2}})
    print(run.id)
    run.finish()
    """
)


@pytest.fixture(scope="module")
def sdk_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pin")
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")
    env.update({k: str(out / k.lower()) for k in ("WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR")})
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=out, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = find_offline_runs(out)
    return run_dir, proc.stdout.split()[-1]


def test_records_are_json_lines_with_a_type(sdk_run):
    run_dir, run_id = sdk_run
    records = inspect_log(run_dir)
    assert [r["num"] for r in records] == list(range(1, len(records) + 1))
    types = [r["type"] for r in records]
    assert types[0] == "header" and types.count("run") == 1 and types.count("history") == 4 and types[-1] == "exit"
    assert all(r["type"] in r or r["type"] == "exit" for r in records)


def test_history_summary_config_and_metrics(sdk_run):
    run_dir, run_id = sdk_run
    run = read_offline_run(run_dir)
    assert run.run_id == run_id and run.run["tags"] == ["t1"] and run.run["run_group"] == "g"
    assert [r["round"] for r in run.history] == [1, 2, 3, 4]
    assert [r["test/acc"] for r in run.rows_with("test/acc")] == [0.1, 0.2, 0.3]
    # a key with dots stays one key; None survives; a logged object is one dict
    assert [r["dissimilarity/client.0.weight"] for r in run.rows_with("test/acc")] == [2.5, 5.0, 7.5]
    assert all(r["note"] is None for r in run.rows_with("test/acc"))
    ref = run.last("per_class/table")
    assert ref["_type"] == "table-file" and ref["nrows"] == 2 and ref["path"] in run.tables
    assert run.load_table(ref)["data"] == [[0, 0.5], [1, 1.0]]
    assert run.summary["test/acc"] == 0.3 and run.summary["best"] == 0.3 and run.summary["round"] == 4
    assert run.summary["per_class/table"]["_type"] == "table-file"
    assert run.config["lr"] == 0.1 and run.config["seed"] == 7
    assert run.config["model"] == {"arch": "cnn"} and run.config["extra"] == {"depth": 2}
    chart = run.config["_wandb"]["visualize"]["chart"]  # a config update of a nested key
    assert chart["panel_config"]["panelDefId"] == "wandb/bar/v0" and run.last("chart_table")["_type"] == "table-file"
    assert {"name": "round"}.items() <= run.metrics[0].items()
    glob = next(m for m in run.metrics if m.get("glob_name") == "*")
    assert glob["step_metric"] == "round" and glob["options"]["step_sync"] is True


def test_a_log_cut_short_reads_up_to_its_last_complete_record(sdk_run, tmp_path):
    run_dir, _ = sdk_run
    (log,) = run_dir.glob("run-*.wandb")
    data = log.read_bytes()
    cut = tmp_path / log.name
    cut.write_bytes(data[: len(data) * 2 // 3])  # a process killed mid-write
    records = inspect_log(cut)
    full = inspect_log(log)
    assert 0 < len(records) < len(full)
    assert [json.dumps(r, sort_keys=True) for r in records] == [
        json.dumps(r, sort_keys=True) for r in full[: len(records)]
    ]


def test_not_a_log_is_one_clear_error(tmp_path):
    bad = tmp_path / "run-x.wandb"
    bad.write_bytes(b"not a transaction log")
    with pytest.raises(ValueError, match="wandb leet inspect could not read"):
        read_offline_run(bad)
