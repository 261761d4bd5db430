"""Files from others are data, never code: a checkpoint, a sweep file or a comparison's records that name a module
never make the tool import it (its top-level code never runs), and a name read from a file never makes it write outside
the folder the user chose. Each refusal is one ``error:`` line.

The checkpoints name, in their method's record, its client-selection policy or its defences, three kinds of module:
one on ``PYTHONPATH`` whose import writes a marker file, one in the checkpoint's own folder (and the working folder)
that does the same, and the standard library's ``this`` (which prints the Zen of Python when imported). Every command
that reads a checkpoint (``fit --ckpt_path``, ``fit --ckpt_path last``, ``validate``, ``test``, ``attack``) runs through
the real entry point, one after another (:mod:`cli_in_one_process`, whose ``python -c`` even puts the
working folder on ``sys.path``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from _helpers import REPO
from cli_in_one_process import run_in_one_process

CONFIG = str(REPO / "configs" / "digits" / "scala.yaml")
#: What the modules' import would leave behind.
MODULE = "open({marker!r}, 'w').write('imported'); print('MODULE TOP LEVEL RAN')\n"
ZEN = "Beautiful is better than ugly"


def _named(checkpoint: dict, where: str, module: str) -> dict:
    """``checkpoint`` with ``where`` (its method, its client-selection policy or its defences) naming ``module``."""
    named = {**checkpoint, "hyper_parameters": dict(checkpoint["hyper_parameters"])}
    if where == "method":
        named["hyper_parameters"]["_class_path"] = f"{module}.SCALA"
        named["lightning_sfl"] = {**checkpoint["lightning_sfl"], "algorithm": f"{module}.SCALA"}
    elif where == "client_selection":
        named["hyper_parameters"]["client_selection"] = {"class_path": f"{module}.Policy", "init_args": {}}
    else:
        named["hyper_parameters"]["defences"] = [{"class_path": f"{module}.Defence", "init_args": {}}]
    return named


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A 1-round fit of the digits config through the command line (its run folder under ``root``)."""
    root = tmp_path_factory.mktemp("fitted")
    args = ["fit", "--config", CONFIG, "--trainer.max_epochs=1", f"--trainer.default_root_dir={root / 'runs'}"]
    (run,) = run_in_one_process([(root, args)], env={**os.environ, "WANDB_MODE": "disabled"})
    assert run.code == 0, run.stderr[-2000:]
    (last,) = (root / "runs").glob("*/checkpoints/last.ckpt")
    return root, last


#: The commands that read a checkpoint (``attack`` writes no run folder of the config's).
READERS = (["fit", "--config", CONFIG, "--trainer.max_epochs=3"], ["validate", "--config", CONFIG],
           ["test", "--config", CONFIG], ["attack"])  # fmt: skip
MODULES, PLACES = ("marker_on_path", "marker_beside", "this"), ("method", "client_selection", "defences")


@pytest.mark.parametrize(
    "every", [False, pytest.param(True, marks=pytest.mark.extended)], ids=["each-command-each-module", "all"]
)  # CI: each command with each module, the place it is named cycling; -m extended: every command x module x place
def test_a_checkpoint_naming_a_module_never_imports_it(fitted, tmp_path, every):
    root, last = fitted
    good = torch.load(last, weights_only=True)
    on_path, beside = tmp_path / "on_path", tmp_path / "shared"
    on_path.mkdir(), beside.mkdir()
    markers = {"marker_on_path": tmp_path / "marker-on-path", "marker_beside": tmp_path / "marker-beside"}
    (on_path / "marker_on_path.py").write_text(MODULE.format(marker=str(markers["marker_on_path"])))
    (beside / "marker_beside.py").write_text(MODULE.format(marker=str(markers["marker_beside"])))
    commands, expected = [], []
    for m, module in enumerate(MODULES):
        for p, where in enumerate(PLACES):
            path = beside / f"{module}-{where}.ckpt"
            torch.save(_named(good, where, module), path)
            folder = beside  # the working folder is the checkpoint's: both hold marker_beside.py
            for c, command in enumerate(READERS):
                if not every and (m + c) % len(PLACES) != p:
                    continue
                out = ["--trainer.default_root_dir", str(tmp_path / "runs")] if command[0] != "attack" else []
                commands.append((folder, [*command, "--ckpt_path", str(path), *out]))
                expected.append((module, where))
    # --ckpt_path last: the run's own last.ckpt names the module (a run folder someone shared)
    run_folder = last.parents[1]
    torch.save(_named(good, "client_selection", "marker_beside"), last)
    (last.parent / "marker_beside.py").write_text(MODULE.format(marker=str(markers["marker_beside"])))
    before = sorted(p.name for p in run_folder.iterdir())
    for command in ("fit", "validate", "test"):
        args = [command, "--config", CONFIG, "--trainer.max_epochs=1", "--ckpt_path", "last",
                f"--trainer.default_root_dir={root / 'runs'}"]  # fmt: skip
        commands.append((last.parent, args))
        expected.append(("marker_beside", "client_selection"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(on_path), os.environ.get("PYTHONPATH", "")]),
           "WANDB_MODE": "disabled"}  # fmt: skip
    runs = run_in_one_process(commands, env=env)
    for (_, args), (module, where), run in zip(commands, expected, runs):
        shown = (args[0], module, where, run.stdout[-500:], run.stderr[-1500:])
        assert run.code == 2, shown
        assert run.stderr.startswith("error: ") and run.stderr.count("\n") == 1, shown
        assert module in run.stderr and ("was written by" in run.stderr or "does not know" in run.stderr), shown
        assert "MODULE TOP LEVEL RAN" not in run.stdout + run.stderr and ZEN not in run.stdout + run.stderr, shown
    assert not any(marker.exists() for marker in markers.values())
    assert not (tmp_path / "runs").exists()  # nothing was written
    written = sorted(p.name for p in run_folder.iterdir() if not p.name.startswith("checkpoints."))  # (the runner's)
    assert written == before


@pytest.mark.parametrize("extended", [False, pytest.param(True, marks=pytest.mark.extended)], ids=["main", "both"])
def test_python_m_does_not_search_the_working_folder(tmp_path, extended):
    """``python -m lightning_sfl`` imports what the console script would: a module in the working folder is not on
    its path (the user's own module goes on ``PYTHONPATH``)."""
    marker = tmp_path / "marker"
    (tmp_path / "in_working_folder.py").write_text(MODULE.format(marker=str(marker)))
    args = ["fit", "--config", CONFIG, "--model.client_selection", "in_working_folder.Policy", "--trainer.max_epochs=1"]
    for entry in ("lightning_sfl", "lightning_sfl.cli")[: 1 + extended]:
        proc = subprocess.run([sys.executable, "-m", entry, *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300, env={**os.environ, "WANDB_MODE": "disabled"})  # fmt: skip
        assert proc.returncode == 2 and proc.stderr.startswith("error: "), proc.stderr[-2000:]
        assert proc.stderr.count("\n") == 1 and "in_working_folder.Policy" in proc.stderr, proc.stderr
        assert not marker.exists() and "MODULE TOP LEVEL RAN" not in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in_working_folder.py"]


# ----------------------------------------------------------------------------- sweep files
def _sweep(folder: Path, sweep: dict, *args: str) -> subprocess.CompletedProcess:
    (folder / "s.yaml").write_text(yaml.safe_dump(sweep))
    return subprocess.run([sys.executable, "-m", "lightning_sfl.cli", "sweep", "s.yaml", "--count", "1", *args],
                          cwd=folder, capture_output=True, text=True, timeout=300)  # fmt: skip


FIT = ["lightning-sfl", "fit", "--config", CONFIG, "${args}"]
SWEEP = {"method": "grid", "parameters": {"model.lr": {"values": [0.1]}}, "command": FIT}


@pytest.mark.parametrize(
    "sweep, expected",
    [
        ({**SWEEP, "name": "../escaped"}, "name='../escaped' must be a name inside runs/sweeps (not absolute"),
        ({**SWEEP, "name": "/tmp/escaped"}, "name='/tmp/escaped' must be a name inside runs/sweeps"),
        ({**SWEEP, "name": "a/../../escaped"}, "name='a/../../escaped' must be a name inside runs/sweeps"),
        ({**SWEEP, "parameters": {"trainer.default_root_dir": {"value": "../escaped"}}},
         "--trainer.default_root_dir='../escaped' must be a folder inside the trial's"),
        ({**SWEEP, "command": [*FIT[:-1], "--checkpoint.dirpath", "/tmp/escaped", "${args}"]},
         "--checkpoint.dirpath='/tmp/escaped' must be a folder inside the trial's"),
        ({**SWEEP, "parameters": {"model.client_selection": {"values": ["fedcbs", "this.Policy"]}}},
         "'--model.client_selection=this.Policy' names 'this.Policy', code outside the library"),
        ({**SWEEP, "parameters": {"model.defences": {"value": [{"class_path": "antigravity.X"}]}}},
         """'--model.defences=[{"class_path": "antigravity.X"}]' names 'antigravity.X', code outside"""),
        ({**SWEEP, "command": ["python", "-c", "print('ran')", "${args}"]},
         "its command runs 'python -c', not lightning-sfl: a sweep file names no program to run unless you say so"),
    ],
    ids=["dotdot", "absolute", "inner-dotdot", "root-dir", "dirpath", "module", "class-path", "program"],
)  # fmt: skip
def test_a_sweep_file_never_writes_outside_nor_names_code(tmp_path, sweep, expected):
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    proc = _sweep(work, sweep)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr == f"error: sweep='s.yaml': {expected}" + proc.stderr.split(expected, 1)[1], proc.stderr
    assert proc.stderr.count("\n") == 1
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["a", "a/b", "a/b/c", "a/b/c/s.yaml"]


def test_a_config_named_by_a_sweep_file_is_read_as_data_too(tmp_path):
    """A sweep file may give ``--config other.yaml``: the classes that config names are checked as the file's own."""
    (tmp_path / "other.yaml").write_text("model:\n  init_args:\n    client_selection:\n      class_path: this.Policy\n")
    proc = _sweep(tmp_path, {**SWEEP, "command": [*FIT[:-1], "--config", "other.yaml", "${args}"]})
    assert proc.returncode == 2 and "'other.yaml' names 'this.Policy'" in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.yaml", "s.yaml"]


def test_a_sweep_folder_that_is_a_link_out_is_refused(tmp_path):
    """``runs/sweeps/<name>`` that is a symbolic link elsewhere is not followed (a folder of links someone shared)."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "runs" / "sweeps").mkdir(parents=True)
    (tmp_path / "runs" / "sweeps" / "lr").symlink_to(tmp_path / "elsewhere")
    proc = _sweep(tmp_path, {**SWEEP, "name": "lr"})
    assert proc.returncode == 2 and "name='lr' must be a name inside runs/sweeps" in proc.stderr, proc.stderr
    assert list((tmp_path / "elsewhere").iterdir()) == []


# ----------------------------------------------------------------------------- a comparison's records
def test_compare_add_never_imports_a_method_its_records_name(tmp_path):
    """``compare --add`` reads the methods of the comparison in ``--out`` from its ``results.md``: a name the library
    does not know is refused, not imported."""
    import argparse

    from lightning_sfl.compare.cli import kept_runs
    from lightning_sfl.compare.options import command_line

    args = argparse.Namespace(config=[CONFIG], methods=["scala"], seeds=[0], out=tmp_path, target_acc=None, jobs=1,
                              launcher="warm", slurm=None, keep_checkpoints=False, wandb=True, overrides=[],
                              add=True, reuse=False)  # fmt: skip
    previous = command_line(argparse.Namespace(**{**vars(args), "methods": ["scala", "this.Method"]}))
    (tmp_path / "results.md").write_text(f"# x\n\n```bash\n{previous}\n```\n")
    (tmp_path / "metrics.csv").write_text("method,seed,status,round,test_acc\n")
    with pytest.raises(ValueError, match="names the method 'this.Method', which the library does not know"):
        kept_runs(args)
    assert "this" not in sys.modules
