"""The main command gives the numbers the README and the documentation report (the command itself:
``tests/integration/test_cli.py``)."""

from __future__ import annotations

import csv
import re

import pytest
from _helpers import REPO


@pytest.mark.extended  # 100 rounds, ~40 s on two cores; in CI: test_results.py's
def test_the_readmes_main_command_gives_the_numbers_the_readme_reports(tmp_path):
    """``lightning-sfl fit --config configs/digits/scala.yaml``, as the README, the "Get started" page and the
    framework benchmark's page report it: the final test accuracy to within 5 of the 360 test images (torch's CPU
    kernels differ in the last bit per instruction set), the first round at >= 0.93 to within a round, and the line
    ``fit`` ends with."""
    import os
    import subprocess
    import sys

    readme = (REPO / "README.md").read_text()
    final = float(re.search(r"`final test accuracy: ([0-9.]+) after 100 rounds`", readme)[1])
    assert f"\nfinal test accuracy: {final:.4f} after 100 rounds\n" in (REPO / "docs" / "get-started.md").read_text()
    framework = (REPO / "docs" / "benchmarks" / "framework.md").read_text()
    first = int(re.search(r"Its first round with test accuracy ≥ 0\.93 is round (\d+)\.", framework)[1])
    cmd = [sys.executable, "-m", "lightning_sfl.cli", "fit", "--config", str(REPO / "configs/digits/scala.yaml")]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = float(re.search(r"final test accuracy: ([0-9.]+) after 100 rounds", proc.stdout)[1])
    assert abs(got - final) * 360 <= 5 + 1e-6, (got, final)
    (metrics,) = tmp_path.glob("runs/*/csv/metrics.csv")
    accs = [(int(float(r["round"])), float(r["test/acc"])) for r in csv.DictReader(metrics.open()) if r.get("test/acc")]
    assert abs(next(r for r, a in accs if a >= 0.93) - first) <= 1, accs[:20]
