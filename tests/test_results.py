"""The committed comparison on digits (docs/results/digits) is complete and reproduced by its command."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_sfl.algorithms import ALGORITHMS
from lightning_sfl.compare import main as compare_main
from lightning_sfl.compare import read_metrics_csv

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results" / "digits"
SETTINGS = {
    "quantity_a2_k20": [],
    "quantity_a1_k20": ["--data.alpha=1"],
    "dirichlet_b0.1_k20": ["--data.partition=dirichlet", "--data.beta=0.1"],
    "quantity_a2_k50": ["--data.num_clients=50", "--data.participation=0.1"],
    "quantity_a1_k50": ["--data.num_clients=50", "--data.participation=0.1", "--data.alpha=1"],
    "dirichlet_b0.1_k50": [
        "--data.num_clients=50",
        "--data.participation=0.1",
        "--data.partition=dirichlet",
        "--data.beta=0.1",
    ],
}


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_committed_study_covers_every_method_and_seed(setting):
    folder = RESULTS / setting
    for name in ("results.md", "accuracy.png", "metrics.csv"):
        assert (folder / name).exists(), f"{setting}/{name} missing"
    runs = read_metrics_csv(folder / "metrics.csv")
    assert {(r.method, r.seed) for r in runs} == {(m, s) for m in ALGORITHMS for s in (0, 1, 2)}
    assert all(len(r.acc_records) == 50 for r in runs if r.status == "ok")
    table = (folder / "results.md").read_text()
    for m in ALGORITHMS:
        assert f"| `{m}` |" in table
    assert "bash docs/results/run_digits.sh" in (RESULTS.parent / "README.md").read_text()


@pytest.mark.parametrize("setting,method", [("quantity_a1_k20", "scala"), ("dirichlet_b0.1_k50", "fedavg")])
def test_committed_numbers_are_reproduced_by_the_command(setting, method, tmp_path):
    args = [
        "--config",
        str(REPO / "configs/digits/scala.yaml"),
        "--methods",
        method,
        "--seeds",
        "1",
        "--out",
        str(tmp_path),
        "--overrides",
        "--trainer.max_epochs=50",
        *SETTINGS[setting],
    ]
    compare_main(args)
    (fresh,) = read_metrics_csv(tmp_path / "metrics.csv")
    (committed,) = [r for r in read_metrics_csv(RESULTS / setting / "metrics.csv") if (r.method, r.seed) == (method, 1)]
    got = [rec["test/acc"] for rec in fresh.acc_records]
    want = [rec["test/acc"] for rec in committed.acc_records]
    assert got == pytest.approx(want, abs=1e-6)
