"""The raw errors a user could still meet end in one ``error:`` line: a checkpoint whose classes or inputs do not fit
the data the command was given (the fit's data options not repeated), and an environment variable the run reads with a
value it cannot take (named, with what it takes). The size-mismatch and out-of-memory fallbacks are checked as
functions (their doctests) and here on the errors torch and numpy raise."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from _helpers import REPO
from cli_in_one_process import run_in_one_process

from lightning_sfl.settings_checks import user_error_line

CONFIG = str(REPO / "configs" / "digits" / "scala.yaml")


def test_a_checkpoint_of_other_classes_than_the_data_is_one_line_naming_the_fits_data_options(tmp_path):
    """A fit of class 3 against the rest, then the digits config without ``--data.binary_class``: validate, test and
    both attacks name the option instead of a 47-line size-mismatch traceback."""
    ckpt = tmp_path / "ck" / "last.ckpt"
    fit = ["fit", "--config", CONFIG, "--data.binary_class=3", "--trainer.max_epochs=1",
           f"--checkpoint.dirpath={ckpt.parent}"]
    reads = [["validate", "--config", CONFIG, f"--ckpt_path={ckpt}"],
             ["test", "--config", CONFIG, f"--ckpt_path={ckpt}"],
             ["attack", "--config", CONFIG, "--ckpt_path", str(ckpt)],
             ["attack", "--attack", "labels", "--config", CONFIG, "--ckpt_path", str(ckpt)],
             ["fit", "--config", CONFIG, f"--ckpt_path={ckpt}", "--trainer.max_epochs=2"]]  # fmt: skip
    runs = run_in_one_process([(tmp_path, fit), *[(tmp_path, args) for args in reads]],
                              env={**os.environ, "WANDB_MODE": "disabled"})  # fmt: skip
    assert runs[0].code == 0, runs[0].stderr[-2000:]
    line = (f"error: ckpt_path='{ckpt}': the checkpoint has 2 classes (--data.binary_class 3 at fit); this "
            "configuration has 10 classes: give the fit's data options\n")  # fmt: skip
    for args, run in zip(reads, runs[1:]):
        assert (run.code, run.stderr) == (2, line), (args, run.stderr[-2000:])


@pytest.mark.parametrize(
    "variables, expected",
    [
        ({"RANK": "abc"}, "environment variable RANK='abc' must be a whole number >= 0 (the process's rank"),
        pytest.param({"LOCAL_RANK": "-1"}, "environment variable LOCAL_RANK='-1' must be a whole number >= 0",
                     marks=pytest.mark.extended),
        pytest.param({"WANDB_MODE": "onlin"}, "environment variable WANDB_MODE='onlin' is not one of: online, "
                     "offline, disabled", marks=pytest.mark.extended),
        pytest.param({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "http", "NODE_RANK": "0"},
                     "environment variable MASTER_PORT='http' must be a whole number in [1, 65535]",
                     marks=pytest.mark.extended),
        pytest.param({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "NODE_RANK": "2"},
                     "environment variable NODE_RANK='2' must be a whole number in [0, 1] (the node's number, from 0)",
                     marks=pytest.mark.extended),
    ],
    ids=["rank", "local-rank", "wandb-mode", "port", "node-rank"],
)  # fmt: skip  # CI: one through the console entry point; each variable in process below (-m extended: all of them)
def test_an_environment_variable_with_a_bad_value_is_named(tmp_path, variables, expected):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "LIGHTNING_SFL_"))}  # (a run's own)
    args = [sys.executable, "-m", "lightning_sfl.cli", "fit", "--config", CONFIG, "--trainer.max_epochs=1",
            "--trainer.num_nodes=2"]  # fmt: skip
    proc = subprocess.run(args, cwd=tmp_path, env={**env, **variables}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {expected}"), proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "variables, num_nodes, expected",
    [
        ({"LOCAL_RANK": "-1"}, None, "environment variable LOCAL_RANK='-1' must be a whole number >= 0"),
        ({"SLURM_PROCID": "x"}, None, "environment variable SLURM_PROCID='x' must be a whole number >= 0"),
        ({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "http", "NODE_RANK": "0"}, 2,
         "environment variable MASTER_PORT='http' must be a whole number in [1, 65535]"),
        ({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "NODE_RANK": "2"}, 2,
         "environment variable NODE_RANK='2' must be a whole number in [0, 1] (the node's number, from 0)"),
        ({"TORCHELASTIC_RUN_ID": "r", "RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0", "WORLD_SIZE": "two",
          "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, None,
         "environment variable WORLD_SIZE='two' must be a whole number >= 1"),
    ],
    ids=["local-rank", "slurm-procid", "port", "node-rank", "world-size"],
)  # fmt: skip
def test_the_variables_a_run_reads_are_checked_where_they_are_read(monkeypatch, variables, num_nodes, expected):
    """What the processes of a run read to find one another (:func:`~lightning_sfl.run_folder.launched_ranks`,
    :func:`~lightning_sfl.process.streams.ddp_child`), in this process: one line naming the variable."""
    from lightning_sfl.errors import ConfigError
    from lightning_sfl.run_folder import FOLDER_ENV, launched_ranks

    for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "SLURM_NTASKS", FOLDER_ENV, "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    from lightning_sfl.process.streams import ddp_child

    with pytest.raises(ConfigError) as refused:
        ddp_child()  # (every process asks first whether it is one a launcher started)
        launched_ranks(num_nodes)
    assert str(refused.value).startswith(expected)


def test_wandb_mode_is_one_of_wandbs(monkeypatch):
    from lightning_sfl.errors import ConfigError
    from lightning_sfl.wandb.process import wandb_switch

    monkeypatch.setenv("WANDB_MODE", "onlin")
    with pytest.raises(ConfigError, match="environment variable WANDB_MODE='onlin' is not one of: online, offline"):
        wandb_switch()
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_switch() == "offline"


def test_the_fallbacks_name_a_failed_allocation_and_a_mismatched_checkpoint():
    """What reaches the command line's handler from torch and numpy, made for real."""
    with pytest.raises(MemoryError) as numpy_error:
        np.empty((1 << 40, 1 << 20), np.float32)  # (8 EiB: numpy refuses at once)
    line, code = user_error_line(numpy_error.value)
    assert code == 2 and line.startswith("out of memory: Unable to allocate") and "this machine has" in line
    with pytest.raises(RuntimeError) as torch_error:
        torch.nn.Linear(3, 2).load_state_dict(torch.nn.Linear(3, 10).state_dict())
    expected = ("the checkpoint does not fit this configuration's model (weight is [10, 3] in the checkpoint, [2, 3] "
                "here): give the fit's options")
    assert user_error_line(torch_error.value) == (expected, 2)
