"""What a run folder holds through a run's life: ``fit`` writes it; ``validate``, ``test`` and ``attack`` read it and
keep their records in ``<run>/<command>-<n>/`` without changing a byte of what ``fit`` wrote; its ``config.yaml``
re-runs the fit in a new folder; ``--ckpt_path last`` evaluates the run that reached the rounds the command names.

The commands run through the command line's entry point, one after another
(:func:`cli_in_one_process.run_in_one_process`), with W&B offline: its files are part of what must not change."""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import pytest
from _helpers import REPO
from cli_in_one_process import run_in_one_process

CONFIG = str(REPO / "configs" / "digits" / "scala.yaml")
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
ENV = {**os.environ, "WANDB_MODE": "offline"}


def _contents(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (links as their target's name): path relative to it -> bytes."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            out[str(path.relative_to(folder))] = os.readlink(path).encode()
        elif path.is_file():
            out[str(path.relative_to(folder))] = path.read_bytes()
    return out


@pytest.mark.extended  # ~120 s on two cores; in CI: attack's and validate's --ckpt_path
def test_evaluations_leave_the_fit_untouched_its_config_reruns_it_and_last_takes_the_run_that_reached_the_rounds(
    tmp_path,
):
    """fit (3 rounds) → validate → test → attack → ``fit --config <run>/config.yaml --trainer.max_epochs 2`` (a quick
    check of the same configuration) → validate for 3 rounds → validate for 4:

    - the first run's files are byte-identical before and after (W&B's included); each reading command's records are
      in a folder of its own inside the run (``validate-1``, ``test-1``, ``attack-1``);
    - the recorded configuration names no folder of the first run, and re-runs it in ``<run>-v2`` (the same
      configuration: the same name), its round 2 as the first run's round 2;
    - ``--ckpt_path last`` for 3 rounds evaluates the 3-round run, not the newer 2-round check; for 4 rounds, which no
      run reached, the latest run, and says so."""
    fit = ["fit", "--config", CONFIG, "--trainer.max_epochs=3", *QUIET]
    [first] = run_in_one_process([(tmp_path, fit)], env=ENV)
    assert first.code == 0, first.stderr[-2000:]
    [run] = (tmp_path / "runs").iterdir()
    before = _contents(run)
    recorded = (run / "config.yaml").read_text()
    assert run.name not in recorded and "ckpt_path" not in recorded  # nothing that points into this run
    commands = [["validate", "--config", CONFIG, "--trainer.max_epochs=3", "--ckpt_path=last", *QUIET]]
    commands += [["test", "--config", CONFIG, "--ckpt_path", str(run / "checkpoints" / "last.ckpt"), *QUIET]]
    commands += [["attack", "--config", CONFIG, "--ckpt_path", "last", "--epochs", "1", "--no_wandb"]]
    commands += [["fit", "--config", str(run / "config.yaml"), "--trainer.max_epochs=2", *QUIET]]
    commands += [["validate", "--config", CONFIG, f"--trainer.max_epochs={n}", "--ckpt_path=last", *QUIET]
                 for n in (3, 4)]  # fmt: skip
    outs = run_in_one_process([(tmp_path, args) for args in commands], env=ENV)
    for args, out in zip(commands, outs):
        assert out.code == 0, f"{args[0]}: {out.stderr[-2000:]}"
    validated, _, _, again, full, fallback = outs
    after = _contents(run)
    changed = [name for name in before if after.get(name) != before[name]]
    assert not changed, changed
    new = {name.split("/")[0] for name in set(after) - set(before)}
    assert new == {"validate-1", "test-1", "attack-1", "validate-2"}, new
    assert (run / "validate-1" / "config.yaml").is_file() and (run / "test-1" / "csv" / "metrics.csv").is_file()
    quick = run.with_name(run.name + "-v2")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [run.name, quick.name]
    assert again.stdout.strip().splitlines()[-2].startswith(f"run saved: runs/{quick.name}: last checkpoint")
    with open(run / "csv" / "metrics.csv") as f:
        round_2 = next(r["test/acc"] for r in csv.DictReader(f) if r.get("test/acc") and float(r["round"]) == 2)
    assert re.search(r"final test accuracy: (\S+) after 2 rounds", again.stdout).group(1) == f"{float(round_2):.4f}"
    for out in (validated, full):
        assert out.stdout.splitlines()[0] == f"validating runs/{run.name} (round 3 of 3)"
        assert out.stdout.strip().splitlines()[-1].endswith("at round 3")
    assert fallback.stdout.splitlines()[0] == (
        f"validating runs/{quick.name} (round 2 of 4: no run of this configuration reached 4 rounds)"
    )
    assert (quick / "validate-1").is_dir()
