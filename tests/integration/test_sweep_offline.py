"""``lightning-sfl sweep``: W&B sweep files run offline. The parameter space against W&B's definitions, and the
real console script end to end (offline W&B runs tagged with the sweep, the metric from the run, resumption)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from _helpers import REPO

from lightning_sfl.errors import ConfigError
from lightning_sfl.sweep.space import (
    check_sweep,
    distribution_of,
    expand_command,
    grid_points,
    optuna_space,
    random_generator,
    sample,
)
from lightning_sfl.wandb.offline import find_offline_runs, read_offline_run


# ----------------------------------------------------------------------------- the space, by W&B's definitions
def _draws(spec: dict, n: int = 4000) -> np.ndarray:
    return np.array([sample({"p": spec}, random_generator(7, i))["p"] for i in range(n)], dtype=float)


def test_distributions_sample_what_wandb_defines():
    u = _draws({"distribution": "uniform", "min": 2.0, "max": 4.0})
    assert u.min() >= 2 and u.max() <= 4 and abs(u.mean() - 3) < 0.05
    i = _draws({"min": 1, "max": 3})  # integer bounds: int_uniform, both ends included
    assert set(i) == {1.0, 2.0, 3.0}
    lv = _draws({"distribution": "log_uniform_values", "min": 1e-3, "max": 1e-1})
    assert lv.min() >= 1e-3 and lv.max() <= 1e-1 and abs(np.median(np.log10(lv)) + 2) < 0.1  # uniform in log
    le = _draws({"distribution": "log_uniform", "min": 0.0, "max": 2.0})  # bounds are natural logs
    assert le.min() >= 1.0 and le.max() <= math.e**2 and abs(np.median(np.log(le)) - 1) < 0.1
    q = _draws({"distribution": "q_uniform", "min": 0.0, "max": 10.0, "q": 2.5})
    assert set(q) <= {0.0, 2.5, 5.0, 7.5, 10.0}
    inv = _draws({"distribution": "inv_log_uniform_values", "min": 0.01, "max": 1.0})
    assert inv.min() >= 0.01 and inv.max() <= 1.0
    n = _draws({"distribution": "normal", "mu": 5.0, "sigma": 2.0})
    assert abs(n.mean() - 5) < 0.1 and abs(n.std() - 2) < 0.1
    weighted = {"p": {"values": ["a", "b"], "probabilities": [0.9, 0.1]}}
    picks = [sample(weighted, random_generator(1, i))["p"] for i in range(2000)]
    assert 0.85 < picks.count("a") / 2000 < 0.95
    # the same trial draws the same point (a resumed sweep), another trial another point
    space = {"lr": {"distribution": "uniform", "min": 0.0, "max": 1.0}}
    assert sample(space, random_generator(0, 3)) == sample(space, random_generator(0, 3))
    assert sample(space, random_generator(0, 3)) != sample(space, random_generator(0, 4))


def test_grid_enumerates_in_order_and_the_command_expands_like_the_agent():
    points = grid_points({"a": {"values": [1, 2]}, "b": {"values": ["x", "y"]}, "c": {"value": 0.5}})
    assert points == [
        {"a": 1, "b": "x", "c": 0.5},
        {"a": 1, "b": "y", "c": 0.5},
        {"a": 2, "b": "x", "c": 0.5},
        {"a": 2, "b": "y", "c": 0.5},
    ]
    params = {"model.lr": 0.1, "data.seed": 2, "flag": True}
    cmd = ["${env}", "${interpreter}", "${program}", "--x", "${args}", "${args_no_hyphens}", "${args_json}"]
    assert expand_command(cmd, params, program="train.py") == [
        "train.py",
        "--x",
        "--model.lr=0.1",
        "--data.seed=2",
        "--flag=true",
        "model.lr=0.1",
        "data.seed=2",
        "flag=true",
        json.dumps(params),
    ]


@pytest.mark.parametrize(
    "sweep,message",
    [
        ({"method": "hyperband"}, "method='hyperband' is not one of: grid, random, bayes"),
        ({"method": "bayes", "parameters": {"a": {"values": [1]}}}, "metric.name is required for method bayes"),
        (
            {"method": "grid", "metric": {"name": "m", "goal": "up"}},
            "metric.goal='up' is not one of: maximize, minimize",
        ),
        ({"method": "grid", "parameters": {}}, "parameters must be a non-empty mapping"),
        ({"method": "grid", "parameters": {"a": {"min": 0.0, "max": 1.0}}}, "method grid needs value or values"),
        (
            {"method": "random", "parameters": {"a": {"distribution": "beta", "min": 0, "max": 1}}},
            "distribution='beta'",
        ),
        ({"method": "random", "parameters": {"a": {"min": 2.0, "max": 1.0}}}, "min=2.0 must be <= max=1.0"),
        (
            {"method": "random", "parameters": {"a": {"distribution": "log_uniform_values", "min": 0, "max": 1}}},
            "needs min > 0",
        ),
        ({"method": "random", "parameters": {"a": {"values": [1]}}}, "command must be a list"),
        ({"method": "random", "parameters": {"a": {"values": [1]}}, "command": ["x"], "run_cap": 0}, "run_cap=0"),
    ],
)
def test_bad_sweep_files_get_one_line_errors(sweep, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_sweep(sweep)


def test_bayes_space_maps_to_optuna_and_refuses_unbounded_distributions():
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    dists, constants = optuna_space(
        {
            "lr": {"distribution": "log_uniform_values", "min": 1e-3, "max": 1e-1},
            "T": {"min": 1, "max": 5},
            "opt": {"values": ["sgd", "adam"]},
            "seed": {"value": 0},
        }
    )
    assert dists["lr"] == FloatDistribution(1e-3, 1e-1, log=True) and dists["T"] == IntDistribution(1, 5)
    assert dists["opt"] == CategoricalDistribution(["sgd", "adam"]) and constants == {"seed": 0}
    with pytest.raises(ConfigError, match="distribution normal is not supported with method bayes"):
        optuna_space({"x": {"distribution": "normal"}})
    assert distribution_of("x", {"min": 1, "max": 2.5}) == "uniform"


# ----------------------------------------------------------------------------- the console script, offline
def _sweep(*args: str, cwd: Path = REPO, trust: bool = True) -> subprocess.CompletedProcess:
    """``lightning-sfl sweep ARGS`` (with ``--trust_command`` unless not ``trust``: the sweep files here are ours and
    some run a small program of their own)."""
    cmd = [sys.executable, "-m", "lightning_sfl.cli", "sweep", *args, *(["--trust_command"] * trust)]
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("WANDB_")}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=cwd, env=env)


FAST = ["--", "--trainer.max_epochs=2", "--trainer.enable_progress_bar=false"]


@pytest.mark.extended  # ~45 s on two cores; in CI: test_sweep_resume.py's sweeps
def test_digits_sweep_runs_offline_prints_its_table_and_resumes(tmp_path):
    out = tmp_path / "sweep"
    proc = _sweep("sweeps/digits_lr.yaml", "--count", "2", "--out", str(out), *FAST)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| trial | status | test/acc | model.lr |" in proc.stdout
    state = json.loads((out / "sweep.json").read_text())["trials"]
    assert sorted(state) == ["0", "1"] and all(t["status"] == "finished" for t in state.values())
    for k, trial in state.items():
        (run_folder,) = (out / f"trial-{k}" / "runs").iterdir()  # the trial's run folder
        (run_dir,) = find_offline_runs(run_folder)  # an offline W&B run per trial
        run = read_offline_run(run_dir)  # named, grouped and tagged by the sweep; tagged by the run too
        assert run.run["display_name"] == f"scala-digits-lr-trial-{k}" and run.run["run_group"] == "scala-digits-lr"
        assert run.run["tags"][0] == "sweep-scala-digits-lr" and {"SCALA", "digits"} <= set(run.run["tags"])
        assert trial["metric"] == pytest.approx(run.summary["test/acc"])  # what a W&B sweep would read
        assert 0.003 <= trial["params"]["model.lr"] <= 0.5
        assert f"--model.lr={trial['params']['model.lr']}" in trial["command"]
        assert f"| {k} | finished | {trial['metric']:.4f} |" in proc.stdout
    again = _sweep("sweeps/digits_lr.yaml", "--count", "3", "--out", str(out), *FAST)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "3 trials, 2 already finished, 1 to run" in again.stdout  # finished trials are not re-run
    assert len(json.loads((out / "sweep.json").read_text())["trials"]) == 3


@pytest.mark.extended  # ~25 s on two cores; in CI: test_sweep_resume.py's sweeps (console script, resume)
def test_grid_and_random_sweeps_through_the_console_script(tmp_path):
    base = {
        "metric": {"name": "test/acc", "goal": "maximize"},
        "command": ["lightning-sfl", "fit", "--config", str(REPO / "configs/digits/fedavg.yaml"), "${args}"],
    }
    grid = {**base, "name": "g", "method": "grid", "parameters": {"model.local_iters": {"values": [1, 2]}}}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(grid))
    proc = _sweep(str(tmp_path / "g.yaml"), "--out", str(tmp_path / "g"), "--jobs", "2", *FAST, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    trials = json.loads((tmp_path / "g" / "sweep.json").read_text())["trials"]
    assert [trials[k]["params"] for k in ("0", "1")] == [{"model.local_iters": 1}, {"model.local_iters": 2}]
    bad = _sweep(str(tmp_path / "g.yaml"), "--out", str(tmp_path / "g"), "--seed", "1", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "holds another sweep" in bad.stderr
    missing = _sweep("nope.yaml", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr == "error: sweep='nope.yaml' does not exist\n"
    rnd = {**base, "name": "r", "method": "random", "parameters": {"model.lr": {"min": 0.01, "max": 0.1}}}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(rnd))
    no_end = _sweep(str(tmp_path / "r.yaml"), cwd=tmp_path)
    assert no_end.returncode == 2 and "--count is required" in no_end.stderr


# ----------------------------------------------------------------------------- bad input: one line, nothing written
GOOD = {"name": "g", "method": "grid", "parameters": {"x": {"values": [1]}}, "command": ["true", "${args}"]}


@pytest.mark.parametrize(
    "content, expected",
    [
        ("method: grid\nparameters: {x: [1, 2\ncommand: [x]\n", "error: sweep='s.yaml' is not valid YAML (expected ',' "
         "or ']', but got ':' at line 3, column 8)"),
        ("", "error: sweep='s.yaml': a sweep file must be a YAML mapping (method, metric, parameters, command), found "
         "an empty file"),
        ("- method: grid\n", "error: sweep='s.yaml': a sweep file must be a YAML mapping (method, metric, parameters, "
         "command), found a YAML list"),
        (b"\xff\xfe\x00bad", "error: sweep='s.yaml' is not a text file (not UTF-8)"),
        ({**GOOD, "method": "hyperband"}, "error: sweep='s.yaml': method='hyperband' is not one of: grid, random, "
         "bayes"),
    ],
    ids=["broken-yaml", "empty", "list", "binary", "bad-key"],
)  # fmt: skip
def test_a_sweep_file_that_cannot_be_used_is_one_line_and_nothing_is_written(tmp_path, content, expected):
    path = tmp_path / "s.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    proc = _sweep("s.yaml", "--count", "1", cwd=tmp_path)
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, expected + "\n", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]  # no runs/sweeps/<name>


def test_an_out_or_a_record_that_cannot_be_used_is_one_line(tmp_path):
    """``--out`` that cannot be made (``/proc`` is "writable" to root by ``os.access``), a folder given as the sweep
    file, a broken ``sweep.json`` and a bad ``--seed``: one ``error:`` line, exit code 2, nothing written."""
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(GOOD))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "sweep.json").write_text("{not json")
    cases = [
        (["s.yaml", "--out", "/proc/nope/x"], "error: --out='/proc/nope/x' "),
        (["broken"], "error: sweep='broken' is not a file"),
        (["s.yaml", "--out", "broken"], "error: broken/sweep.json is not a sweep's record (JSONDecodeError"),
        (["s.yaml", "--seed", "-1"], "error: --seed=-1 must be in [0, 4294967295]"),
    ]  # fmt: skip
    for args, expected in cases:
        proc = _sweep(*args, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stdout == "", (args, proc.stdout, proc.stderr)
        assert proc.stderr.startswith(expected) and proc.stderr.count("\n") == 1, (args, proc.stderr)
    assert not Path("/proc/nope").exists()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["broken", "s.yaml", "sweep.json"]
