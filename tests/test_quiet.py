"""A normal run prints no warnings: ``lightning-sfl fit`` of the main job with Python's warnings on (the tests' own
``PYTHONWARNINGS`` left out), W&B offline, every default logger and callback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: What a warning looks like on stderr: Python's ``file:line: XWarning``/``Deprecat…``, W&B's ``wandb: WARNING``,
#: Lightning's tips and recommendations.
WARNING = re.compile(r"Warning\b|WARNING|[Dd]eprecat|💡|It is recommended")


def test_a_default_fit_prints_no_warning(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env["WANDB_MODE"] = "offline"
    cmd = [sys.executable, "-m", "lightning_sfl.cli", "fit", "--config", str(REPO / "configs/digits/scala.yaml")]
    proc = subprocess.run([*cmd, "--trainer.max_epochs=2"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "final test accuracy:" in proc.stdout
    noise = [line for line in (proc.stdout + proc.stderr).splitlines() if WARNING.search(line)]
    assert not noise, noise
