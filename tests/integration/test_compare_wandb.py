"""``lightning-sfl compare`` logs to W&B as ``fit`` does: every run is an (offline) W&B run named, tagged and grouped
as a fit's (all seeds of a method in one group), the comparison is a W&B run of its own (``job_type`` compare) with its
table and plot, and the CSV logs the comparison reads stay; ``--wandb false`` logs CSV only. The real console script
runs, its stderr on a pseudo-terminal: the status line shows while runs train and is gone at the end. The runs are
read back with W&B's own reader (:mod:`lightning_sfl.wandb.offline`)."""

from __future__ import annotations

import csv
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import REPO

from lightning_sfl.wandb.offline import find_offline_runs, read_offline_run

CONFIG = str(REPO / "configs/digits/scala.yaml")
CLASSES = {"scala": "SCALA", "fedavg": "FedAvg"}


def _compare(out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, str]:
    """``lightning-sfl compare`` with stdout captured and stderr on a pseudo-terminal (what a terminal shows)."""
    cmd = [sys.executable, "-m", "lightning_sfl.cli", "compare", "--config", CONFIG, "--out", str(out), *extra]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}, "WANDB_MODE": "offline"}
    env["COLUMNS"] = "200"
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, cwd=out.parent, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=slave, text=True)  # fmt: skip
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the command's end is closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    stdout = proc.stdout.read()
    proc.wait(timeout=600)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, None), b"".join(chunks).decode()


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("wandb") / "study"
    proc, terminal = _compare(out, "--methods", "scala", "fedavg", "--seeds", "0", "1", "--overrides",
                              "--trainer.max_epochs=1")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + terminal[-3000:]
    return out, proc, terminal


def test_every_run_is_a_wandb_run_named_tagged_and_grouped_as_a_fits(compared):
    out, _, _ = compared
    groups = {}
    for method in ("scala", "fedavg"):
        for seed in (0, 1):
            run_dir = out / "runs" / method / f"seed{seed}"
            (found,) = find_offline_runs(run_dir)
            run = read_offline_run(found)
            name, tags = run.run["display_name"], run.run["tags"]
            assert re.fullmatch(rf"{method}-digits-quantity2-s{seed}-[0-9a-f]{{10}}", name), name
            assert tags == ["compare-study", CLASSES[method], "digits", "quantity", f"seed{seed}"]
            assert run.run["job_type"] == "fit"
            groups.setdefault(method, set()).add(run.run["run_group"])
            assert run.run["run_group"] == f"{name.split('-s')[0]}-{name.rsplit('-', 1)[1]}"  # the name less its seed
            with open(run_dir / "logs" / "metrics.csv") as f:  # the CSV log the comparison reads stays
                accs = [float(r["test/acc"]) for r in csv.DictReader(f) if r.get("test/acc")]
            assert run.summary["test/acc"] == pytest.approx(accs[-1])
            log = (run_dir / "log.txt").read_text()  # the trial's lines; W&B's in its run's messages.log
            assert log.rstrip().splitlines()[-1].startswith("final test accuracy:") and "wandb:" not in log
            messages = (run_dir / "wandb" / "messages.log").read_text()
            assert "wandb: Tracking run with wandb version" in messages
            assert f"wandb: Run data is saved locally in {found}" in messages
    assert all(len(g) == 1 for g in groups.values()) and groups["scala"] != groups["fedavg"]  # a group per method


def test_the_comparison_is_a_wandb_run_with_its_table_and_plot(compared):
    out, proc, _ = compared
    (found,) = find_offline_runs(out)
    run = read_offline_run(found)
    command = re.search(r"```bash\n(.*)\n```", (out / "results.md").read_text()).group(1)
    assert (run.run["display_name"], run.run["job_type"], run.run["tags"]) == ("compare-study", "compare",
                                                                               ["compare-study"])  # fmt: skip
    assert run.run["notes"] == command and run.config["command"] == command
    assert run.config["methods"] == ["scala", "fedavg"] and run.config["seeds"] == [0, 1]
    table = run.load_table(run.last("results"))
    printed = [line for line in proc.stdout.splitlines() if line.startswith("| `")]  # the table's rows as printed
    assert table["columns"][:3] == ["method", "runs", "final test acc (%)"]
    assert [row[:4] for row in table["data"]] == [[c.strip().strip("`") for c in line.split("|")[1:5]]
                                                  for line in printed]  # fmt: skip
    assert run.last("accuracy")["_type"] == "image-file" and any("accuracy_" in p for p in run.images)
    assert 0 <= run.summary["final_test_acc/scala"] <= 1
    assert "wandb: Run summary" in (out / "log.txt").read_text()  # W&B's footer in its log, not on the terminal
    console = "".join(r["output_raw"]["line"] for r in run.records if "output_raw" in r)
    assert "[compare] wrote" in console or "[compare 4/4]" in console  # the comparison's own lines are its log's
    assert "running, " not in console and "\x1b[K" not in console  # the status line's redrawing is not


def test_the_last_lines_are_the_table_and_the_status_line_showed_and_went(compared):
    out, proc, terminal = compared
    lines = proc.stdout.splitlines()
    assert lines[-1] == f"[compare] wrote {out / 'results.md'}, {out / 'metrics.csv'}, {out / 'accuracy.png'}"
    assert lines[-2].startswith("| `fedavg` | 2/2 |") and lines[-5].startswith("| method |")
    assert [ln for ln in lines if ln.startswith("[compare ")][-1].startswith("[compare 4/4] fedavg seed 1: ok")
    assert "[compare] 1/4 finished, 1 running, 0 failed; best final test acc " in terminal  # while runs trained
    assert terminal.endswith("\r\x1b[K")  # cleared at the end
    shown = re.sub(r"\r\x1b\[K|\r[^\r\n]*?\x1b\[K", "", terminal)  # every status line drawn and then erased
    assert shown.strip() == "", shown[-2000:]  # nothing else on stderr: no warning, no W&B message


@pytest.mark.extended  # ~15 s on two cores; in CI: compare's W&B runs (above), the tutorials' --wandb false
def test_wandb_false_logs_csv_only(tmp_path):
    out = tmp_path / "csv_only"
    proc, terminal = _compare(out, "--methods", "fedavg", "--wandb", "false", "--overrides", "--trainer.max_epochs=1")
    assert proc.returncode == 0, proc.stdout[-2000:] + terminal[-2000:]
    assert not list(out.rglob("wandb")) and not (out / "log.txt").exists()
    assert (out / "runs" / "fedavg" / "seed0" / "logs" / "metrics.csv").is_file()
    assert "--wandb false" in (out / "results.md").read_text()
    assert "--trainer.logger+=" not in (out / "runs" / "fedavg" / "seed0" / "command.txt").read_text()
