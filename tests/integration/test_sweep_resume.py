"""``lightning-sfl sweep`` never tries a parameter set twice: a resumed sweep goes on where it stopped (its sampler's
random state continues), a draw or proposal equal to another trial's is drawn again, and a space with fewer sets
than asked for runs each once and says so in one line. The trials are a tiny program that writes its metric (the
sweep reads it as it reads a fit's CSV log), so every check runs the real console script in seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

#: A trial: writes ``score`` (best at lr = 0.05) where the sweep reads a fit's CSV log.
PROGRAM = """import math, os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
x = math.log10(float(args["lr"])) if "lr" in args else float(args["x"])
os.makedirs("runs/csv/version_0", exist_ok=True)
with open("runs/csv/version_0/metrics.csv", "w") as f:
    f.write(f"score\\n{-(x + 1.3) ** 2}\\n")
"""
LOG_LR = {"distribution": "log_uniform_values", "min": 0.001, "max": 0.5}


def _sweep_file(folder: Path, method: str, parameters: dict, name: str = "toy") -> Path:
    (folder / "score.py").write_text(PROGRAM)
    sweep = {
        "name": name,
        "method": method,
        "metric": {"name": "score", "goal": "maximize"},
        "parameters": parameters,
        "command": [sys.executable, str(folder / "score.py"), "${args}"],
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def _sweep(path: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lightning_sfl.cli", "sweep", str(path), "--out", str(out), "--trust_command", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=path.parent, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


def _params(out: Path) -> list[dict]:
    trials = json.loads((out / "sweep.json").read_text())["trials"]
    return [trials[k]["params"] for k in sorted(trials, key=int)]


@pytest.mark.parametrize(
    "method, parameters, seed",
    [
        ("bayes", {"lr": LOG_LR}, "0"),  # before: the resumed sampler's first draw was trial 0's again
        ("random", {"x": {"values": [-3, -2, -1, 0, 1, 2]}}, "0"),  # seed 0 draws 2, 0, 2, 0 from these six
        ("bayes", {"x": {"values": [-3, -2, -1, 0, 1, 2]}}, "0"),  # the sampler's random start-up repeats values too
    ],
    ids=["bayes", "random-values", "bayes-values"],
)
def test_a_resumed_sweep_tries_no_parameter_set_twice(tmp_path, method, parameters, seed):
    """Run 2 trials, resume to 4; and 4 at once: the same first two, and no parameter set twice in either."""
    path = _sweep_file(tmp_path, method, parameters)
    _sweep(path, tmp_path / "resumed", "--count", "2", "--seed", seed)
    again = _sweep(path, tmp_path / "resumed", "--count", "4", "--seed", seed)
    assert "4 trials, 2 already finished, 2 to run" in again.stdout
    _sweep(path, tmp_path / "at_once", "--count", "4", "--seed", seed)
    resumed, at_once = _params(tmp_path / "resumed"), _params(tmp_path / "at_once")
    assert len(resumed) == len(at_once) == 4
    assert resumed[:2] == at_once[:2]
    for trials in (resumed, at_once):
        assert len({json.dumps(p, sort_keys=True) for p in trials}) == 4, trials
    if method == "random":  # a random sweep draws trial k from the same generator, resumed or not
        assert resumed == at_once


@pytest.mark.parametrize("method", ["random", "bayes", "grid"])
def test_a_space_with_fewer_sets_than_count_runs_each_once_and_says_so(tmp_path, method):
    path = _sweep_file(tmp_path, method, {"x": {"values": [-2, -1, 0]}, "y": {"value": 1}})
    proc = _sweep(path, tmp_path / "out", "--count", "5")
    assert "[sweep toy] the space holds 3 parameter sets: 3 trials, each tried once (not 5)" in proc.stdout
    trials = _params(tmp_path / "out")
    assert sorted(p["x"] for p in trials) == [-2, -1, 0] and all(p["y"] == 1 for p in trials)
    assert proc.stdout.rstrip().splitlines()[-1].startswith("| ")  # the table is the last thing printed
    assert proc.stderr == ""


def test_draws_that_keep_repeating_fall_back_to_the_sets_left(tmp_path):
    """A value of tiny probability is still reached once the likely ones are taken (no endless redraws)."""
    path = _sweep_file(tmp_path, "random", {"x": {"values": [-1, 0], "probabilities": [0.999999, 0.000001]}})
    _sweep(path, tmp_path / "out", "--count", "2")
    assert sorted(p["x"] for p in _params(tmp_path / "out")) == [-1, 0]
