"""The committed comparisons (docs/results/digits, docs/results/mnist5k) are complete and reproduced by their
commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_sfl.algorithms import ALGORITHMS, SEMI_METHODS
from lightning_sfl.compare import main as compare_main
from lightning_sfl.compare import read_metrics_csv

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"
K50 = ["--data.num_clients=50", "--data.participation=0.1"]
#: study -> (its runner script, the compare arguments every setting shares, settings committed -> their overrides)
STUDIES = {
    "digits": (
        "run_digits.sh",
        ["--config", str(REPO / "configs/digits/scala.yaml")],
        ["--trainer.max_epochs=50"],
        {
            "quantity_a2_k20": [],
            "quantity_a1_k20": ["--data.alpha=1"],
            "dirichlet_b0.1_k20": ["--data.partition=dirichlet", "--data.beta=0.1"],
            "quantity_a2_k50": K50,
            "quantity_a1_k50": [*K50, "--data.alpha=1"],
            "dirichlet_b0.1_k50": [*K50, "--data.partition=dirichlet", "--data.beta=0.1"],
        },
    ),
    "mnist5k": (
        "run_mnist5k.sh",
        [
            "--config",
            str(REPO / "configs/mnist5k/scala.yaml"),
            "--config",
            str(REPO / "configs/mnist5k/cnn_small.yaml"),
        ],
        ["--trainer.max_epochs=50", "--model.lr=0.01"],
        {"quantity_a2_k20": [], "dirichlet_b0.05_k20": ["--data.partition=dirichlet", "--data.beta=0.05"]},
    ),
}
#: Methods registered after the label-skew studies were run, compared in their own studies instead: S²FL and the
#: asynchronous methods (docs/results/gas), the semi-supervised ones (docs/results/semi_sfl). The studies' commands
#: include S²FL when run again.
LATER = {"s2fl", "gas", "async_sfl", "fedbuff", "ca2fl", *SEMI_METHODS}
STUDIED = [m for m in ALGORITHMS if m not in LATER]
CELLS = [(study, setting) for study, (*_, settings) in STUDIES.items() for setting in settings]


@pytest.mark.parametrize("study,setting", CELLS, ids=[f"{s}/{c}" for s, c in CELLS])
def test_committed_study_covers_every_method_and_seed(study, setting):
    script, *_ = STUDIES[study]
    folder = RESULTS / study / setting
    for name in ("results.md", "accuracy.png", "metrics.csv"):
        assert (folder / name).exists(), f"{study}/{setting}/{name} missing"
    runs = read_metrics_csv(folder / "metrics.csv")
    assert {(r.method, r.seed) for r in runs} == {(m, s) for m in STUDIED for s in (0, 1, 2)}
    assert all(len(r.acc_records) == 50 for r in runs if r.status == "ok")
    table = (folder / "results.md").read_text()
    for m in STUDIED:
        assert f"| `{m}` |" in table
    assert f"bash docs/results/{script}" in (RESULTS / "README.md").read_text()


@pytest.mark.parametrize(
    "study,setting,method,rounds",
    [
        ("digits", "quantity_a1_k20", "scala", 50),
        ("digits", "dirichlet_b0.1_k50", "fedavg", 50),
        ("mnist5k", "quantity_a2_k20", "fedavg", 5),  # the first 5 of 50 rounds: a full run costs ~2 min
    ],
)
def test_committed_numbers_are_reproduced_by_the_command(study, setting, method, rounds, tmp_path):
    _, config, overrides, settings = STUDIES[study]
    args = [*config, "--methods", method, "--seeds", "1", "--out", str(tmp_path / "out"), "--overrides"]
    compare_main([*args, *overrides, *settings[setting], f"--trainer.max_epochs={rounds}", f"--data.root={tmp_path}"])
    (fresh,) = read_metrics_csv(tmp_path / "out" / "metrics.csv")
    committed = [
        r for r in read_metrics_csv(RESULTS / study / setting / "metrics.csv") if (r.method, r.seed) == (method, 1)
    ]
    got = [rec["test/acc"] for rec in fresh.acc_records]
    want = [rec["test/acc"] for rec in committed[0].acc_records[:rounds]]
    assert len(got) == rounds
    assert got == pytest.approx(want, abs=1e-6)
