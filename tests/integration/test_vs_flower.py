"""``benchmarks/vs_flower.py`` runs: our side alone (``--ours-only``), a one-line exit 2 when Flower cannot be imported,
and, where ``flwr[simulation]`` is installed (the ``bench`` extra), both sides on the smallest setting with the same
arithmetic (equal test accuracy after one round)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from _helpers import REPO

SCRIPT = REPO / "benchmarks" / "vs_flower.py"
SMALL = ["--settings", "20x5", "--rounds", "2", "--repeats", "1"]


def _run(args: list[str], env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env
    )


@pytest.mark.extended
def test_ours_only_times_our_side(tmp_path):
    out = tmp_path / "ours.json"
    proc = _run(["--ours-only", *SMALL, "--json", str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ours/round" in proc.stdout and "flower" not in proc.stdout, proc.stdout
    report = json.loads(out.read_text())
    assert report["sides"] == ["ours"] and report["flower"] is None and "target" not in report
    (row,) = report["settings"]
    assert (row["clients"], row["per_round"], row["participation"]) == (20, 5, 0.25)
    assert row["ours"]["one_round_s"] > 0 and row["ours"]["long_run_s"] > 0
    assert 0 <= row["ours"]["accuracy_long_run"][0] <= 1


def test_without_flower_it_exits_2_with_one_line(tmp_path):
    fake = tmp_path / "flwr"  # shadows an installed Flower
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = _run(["--quick"], env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "flwr is not importable" in lines[0] and "--ours-only" in lines[0], proc.stderr


@pytest.mark.skipif(
    importlib.util.find_spec("flwr") is None or importlib.util.find_spec("ray") is None,
    reason="needs flwr[simulation] (pip install -e '.[bench]')",
)
def test_flower_and_ours_do_the_same_arithmetic(tmp_path):
    out = tmp_path / "both.json"
    proc = _run([*SMALL, "--json", str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "same arithmetic (equal test accuracy after 1 round in every setting): yes" in proc.stdout, proc.stdout
    assert "target: no setting with 50 clients per round was run" in proc.stdout
    report = json.loads(out.read_text())
    (row,) = report["settings"]
    assert row["ours"]["accuracy_one_round"] == row["flower"]["accuracy_one_round"]
    assert row["flower"]["in_process_per_round_s"] > 0 and row["flower"]["one_round_s"] > 0
