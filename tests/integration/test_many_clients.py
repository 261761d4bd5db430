"""Tens of thousands of clients (issue 57): ``configs/leaf_synthetic/fedavg_10k.yaml``, FedAvg on Synthetic(1, 1) with
K = 10,000 clients, 100 a round, trains from the command line on a 2-core machine without a warning; the data module's
statistics and the rounds' clients are those of 10,000 clients. How the costs grow with K:
``benchmarks/client_count_scaling.py`` (timed there, not here); the partitions and the generator are checked against
the implementations they replaced in ``tests/unit/test_partition.py`` and ``tests/unit/test_leaf_synthetic.py``."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import warnings

import pytest
import torch
from _helpers import REPO

from lightning_sfl.cli import main
from lightning_sfl.lightning_cli import SFLCLI
from lightning_sfl.process.quiet import quiet_dependencies

CONFIG = REPO / "configs" / "leaf_synthetic" / "fedavg_10k.yaml"
BENCHMARK = REPO / "benchmarks" / "client_count_scaling.py"


def test_ten_thousand_clients_train_two_rounds_from_the_command_line(tmp_path, monkeypatch):
    """Two rounds of ``lightning-sfl fit --config configs/leaf_synthetic/fedavg_10k.yaml`` (its CSV log, no W&B or
    checkpoints): 4-19 s on two cores (the most beside another test process), the data's draw (~570,000 rows)
    about a third of it."""
    monkeypatch.chdir(tmp_path)
    args = ["fit", "--config", str(CONFIG), "--trainer.max_epochs=2", "--trainer.enable_checkpointing=false"]
    args += ["--trainer.enable_progress_bar=false", "--trainer.logger=lightning.pytorch.loggers.CSVLogger"]
    args += [f"--trainer.logger.save_dir={tmp_path}"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_dependencies()  # what the command line installs first: its filters of dependencies' own notices
        cli = SFLCLI(args=args)
    # a normal run warns about nothing (Lightning's "few batches" or "num_workers" hints among them)
    shown = [f"{w.category.__name__}: {w.message}" for w in caught if not issubclass(w.category, DeprecationWarning)]
    assert shown == []

    dm, trainer = cli.datamodule, cli.trainer
    stats = dm.client_stats
    assert (dm.num_clients, stats.clients_per_round, stats.batch_size) == (10_000, 100, 1280)
    assert len(stats.shards) == 10_000 and stats.label_counts.shape == stats.label_distribution.shape == (10_000, 10)
    assert int(stats.sizes.min()) >= 45 and int(stats.sizes.sum()) == len(dm.splits.train_y)  # ⌊0.9·50⌋ rows at least
    assert torch.equal(stats.label_counts.sum(1), stats.sizes)
    assert 450_000 < len(dm.splits.train_y) < 650_000  # ⌊LogNormal(0, 2)⌋ + 50 rows a client, 90 % of them train

    assert trainer.current_epoch == 2 and trainer.global_step == 2 * 5  # 2 rounds of 5 local steps
    assert 0.0 <= float(trainer.callback_metrics["test/acc"]) <= 1.0
    rounds = [cli.model.schedule.select_clients(r, stats) for r in (0, 1)]
    for clients in rounds:
        assert (
            len(clients) == len(set(clients.tolist())) == 100 and 0 <= int(clients.min()) < int(clients.max()) < 10_000
        )
    assert not torch.equal(rounds[0], rounds[1])
    with open(next(tmp_path.rglob("metrics.csv"))) as f:
        accuracies = [row["test/acc"] for row in csv.DictReader(f) if row.get("test/acc")]
    assert len(accuracies) == 2  # one evaluation a round, logged


@pytest.mark.parametrize(
    "option,text",
    [
        ("--data.leaf_size_log_std=-2", "error: leaf_size_log_std=-2.0 must be >= 0 (a standard deviation)"),
        ("--data.leaf_size_log_mean=abc", "error: --data.leaf_size_log_mean: expected a number; got 'abc'"),
        ("--data.leaf_size_log_mean=30", "error: leaf_size_log_mean=30.0 must be in [-20, 20] (the log of a size)"),
    ],
)
def test_bad_client_sizes_are_one_error_line(option, text, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", str(CONFIG), option])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [text]
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_the_benchmark_refuses_bad_client_counts_in_one_line():
    for bad in ("1000,abc", "50,1000"):
        proc = subprocess.run([sys.executable, str(BENCHMARK), "--clients", bad], capture_output=True, text=True)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
        assert proc.stderr.startswith("error: ")


@pytest.mark.extended  # 33-80 s on two cores (two processes that import torch and Lightning); CI: the fit above
def test_the_benchmark_prints_every_figure_and_its_verdict_last(tmp_path):
    out = tmp_path / "scaling.json"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARK), "--quick", "--json", str(out)], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("result: ")
    report = json.loads(out.read_text())
    assert [r["clients"] for r in report["results"]] == [200, 2000]
    quantities = set(report["results"][0]["times"])
    assert {"set-up", "client_stats", "select uniform", "select fedcbs", "round", "evaluation"} <= quantities
    assert {r["quantity"] for r in report["ratios"]} == quantities
    assert all(r["value"] > 0 and r["pass"] in (True, False) for r in report["ratios"])
