"""The benchmarks page's table of what a round of the studies costs is the committed measurement of
``benchmarks/round_cost.py``
(the benchmarks' runs: ``tests/integration/test_benchmark_smoke.py``)."""

from __future__ import annotations

import json

from _helpers import REPO


def test_round_cost_table_is_the_committed_measurement():
    """The "What a round of the studies costs" table (``docs/benchmarks/studies.md``) is what
    ``benchmarks/round_cost.py`` wrote (``docs/results/round_cost/*.json``): every wall and CPU figure per round, and
    the ratios, to the digits shown."""
    committed = {}
    for path in sorted((REPO / "docs" / "results" / "round_cost").glob("*.json")):
        for case in json.loads(path.read_text()):
            committed.update({(case["case"], name): f for name, f in case["settings"].items()})
    page = (REPO / "docs" / "benchmarks" / "studies.md").read_text()
    section = page.split("## What a round of the studies costs")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "wall s / round" not in line]
    expected = [("mnist5k_models", "cnn_small"), ("mnist5k_models", "alexnet_mnist"),
                ("scala_fashion_mnist_models", "cnn_fedlc"), ("scala_fashion_mnist_models", "alexnet_mnist"),
                ("gas_fashion_mnist", "gas_cnn_fedlc"), ("semi_sfl_fashion_mnist", "semi_sfl")]  # fmt: skip
    assert len(rows) == len(expected)
    for row, key in zip(rows, expected):
        f = committed[key]
        wall, cpu = (cell.strip() for cell in row.strip("|").split("|")[1:3])
        assert wall.startswith(f"{f['wall_per_round_s']:.2f}") and cpu.startswith(f"{f['cpu_per_round_s']:.2f}"), row
        if f["wall_ratio"] != 1.0:
            assert f"({f['wall_ratio']:.2f}×)" in wall or f"({f['wall_ratio']:.0f}×)" in wall, row
            assert f"({f['cpu_ratio']:.2f}×)" in cpu or f"({f['cpu_ratio']:.1f}×)" in cpu, row
