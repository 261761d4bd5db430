"""A normal run prints no warnings: ``lightning-sfl fit`` of the main job, ``validate --ckpt_path last`` of it, an
``attack`` on its checkpoint, a ``compare`` and a 2-process DDP fit, with Python's warnings on (the tests' own
``PYTHONWARNINGS`` left out), W&B offline, every default logger and callback; on a machine that looks like it has 16
cores (Lightning suggests data-loader workers from the core count, which a 2-core machine never reaches). The commands
but the DDP fit run through the entry point one after another in one process per test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import REPO
from cli_in_one_process import Run, run_in_one_process

#: What a warning looks like on stderr: Python's ``file:line: XWarning``/``Deprecat…``, Lightning's ``file.py:line:
#: message`` (its warnings format leaves out the category), W&B's ``wandb: WARNING``, Lightning's tips and
#: recommendations.
WARNING = re.compile(r"Warning\b|WARNING|[Dd]eprecat|💡|It is recommended|\.py:\d+: ")
#: What every process (DDP's workers too) imports first from the folder given: 16 cores where Lightning counts them.
SIXTEEN_CORES = "import os\nos.sched_getaffinity = lambda pid: set(range(16))\nos.cpu_count = lambda: 16\n"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The test's environment without ``PYTHONWARNINGS``, W&B offline, the 16-core ``sitecustomize`` first."""
    site = tmp_path / "sixteen_cores"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SIXTEEN_CORES)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env.update(WANDB_MODE="offline", PYTHONPATH=os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])]))
    return {**env, **extra}


def _noise(runs: list[Run], commands: list[list[str]]) -> None:
    for args, run in zip(commands, runs):
        assert run.code == 0, run.stderr[-3000:]
        noise = [line for line in (run.stdout + run.stderr).splitlines() if WARNING.search(line)]
        assert not noise, (args[0], noise)


def test_a_default_fit_and_its_validate_print_no_warning(tmp_path):
    """Both commands through the entry point, one after the other in one process: a warning either would print
    appears in one of them (Python shows a warning once per place in a process)."""
    config = ["--config", str(REPO / "configs/digits/scala.yaml")]
    commands = [["fit", *config, "--trainer.max_epochs=2"], ["validate", *config, "--ckpt_path=last"]]
    runs = run_in_one_process([(tmp_path, args) for args in commands], env=_env(tmp_path), fresh=True)
    _noise(runs, commands)
    assert "final test accuracy:" in runs[0].stdout and "test/acc" in runs[1].stdout


def _quiet(args: list[str], cwd: Path, **env_extra: str) -> None:
    """``args`` through the console script in a process of its own (DDP starts its workers from it)."""
    env = _env(cwd, **env_extra)
    proc = subprocess.run([sys.executable, "-m", "lightning_sfl.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd)  # fmt: skip
    _noise([Run(proc.returncode, proc.stdout, proc.stderr)], [args])


@pytest.mark.extended  # ~60 s on two cores; a default fit and its validate run in CI
def test_an_attack_a_compare_and_a_two_process_fit_print_no_warning(tmp_path):
    import socket

    config = ["--config", str(REPO / "configs/digits/scala.yaml")]
    commands = [["fit", *config, "--trainer.max_epochs=1", "--checkpoint.dirpath=ckpt"]]
    commands += [["attack", *config, "--ckpt_path=ckpt/last.ckpt", "--epochs=1", "--out=attack"]]
    commands += [["compare", *config, "--methods", "fedavg", "--out=compared", "--", "--trainer.max_epochs=1"]]
    commands += [["fit", *config, "--trainer.max_epochs=1", "--trainer.precision=bf16-mixed"]]  # (model summary)
    _noise(run_in_one_process([(tmp_path, args) for args in commands], env=_env(tmp_path), fresh=True), commands)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    ddp = ["--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.accelerator=cpu", "--trainer.max_epochs=1"]
    _quiet(["fit", *config, *ddp], tmp_path / "compared", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
