"""Side-by-side tables of the studies on the papers' own data (issue 34): for every cell the paper's number, ours, and
both ranks, with how many pairs of methods keep the paper's order.

- FedLC's Table 4 on Synthetic(λ, µ) (``bash docs/results/run_leaf_synthetic.sh``);
- GAS's Table 1 on Fashion-MNIST (``bash docs/results/run_gas_fashion_mnist.sh``);
- SCALA's Tables 4 and 6 (conference version) on Fashion-MNIST (``bash docs/results/run_scala_fashion_mnist.sh``).

:func:`papers_section` is the text ``summarize.py`` puts into ``docs/results/papers.md``; ``python
docs/results/summarize_papers.py`` prints it.
"""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

from lightning_sfl.compare import format_acc, read_metrics_csv, summarize

HERE = Path(__file__).resolve().parent

#: FedLC (ICML 2022) Table 4, test accuracy (%) mean ± std over 5 seeds: Synthetic(0,0), (0.5,0.5), (1,1).
#: "FedOpt" is reported without saying which; ours is FedAdam (Reddi et al.'s Algorithm 2, our defaults).
FEDLC_TABLE_4 = {
    "fedavg": ["72.09 ± 1.19", "67.55 ± 1.16", "63.11 ± 0.66"],
    "fedprox": ["72.21 ± 0.47", "67.85 ± 0.82", "63.09 ± 0.79"],
    "scaffold": ["73.51 ± 0.67", "69.45 ± 0.82", "64.95 ± 0.83"],
    "fednova": ["73.22 ± 0.94", "69.01 ± 0.87", "64.67 ± 0.46"],
    "fedadam": ["73.42 ± 0.76", "68.64 ± 0.67", "63.69 ± 0.89"],
    "fedrs": ["75.79 ± 1.25", "71.35 ± 0.81", "66.39 ± 1.41"],
    "fedlc": ["80.92 ± 0.31", "78.47 ± 0.34", "75.46 ± 0.52"],
}
SYNTHETIC = {
    "synthetic_0_0": "Synthetic(0,0)",
    "synthetic_0.5_0.5": "Synthetic(0.5,0.5)",
    "synthetic_1_1": "Synthetic(1,1)",
}
#: GAS (AAAI 2025) Table 1, Fashion-MNIST, 3 seeds: s = 2 shards, Dir(0.1). AsyncSFL is not in the table.
GAS_TABLE_1 = {
    "gas": ["90.66 ± 0.20", "90.58 ± 0.34"],
    "async_sfl": ["—", "—"],
    "fedavg": ["87.99 ± 2.12", "88.74 ± 1.19"],
    "fedbuff": ["84.93 ± 4.11", "85.81 ± 3.68"],
    "ca2fl": ["88.32 ± 1.19", "89.07 ± 0.58"],
}
GAS_FMNIST = {"fashion_mnist_shards2": "s = 2", "fashion_mnist_dirichlet0.1": "Dir(0.1)"}
#: SCALA (ICML 2024, conference version) Tables 4 and 6, Fashion-MNIST, 3 seeds: α=2, α=4, β=0.05, β=0.1. Table 4's
#: "FedLA" is our ``fedlc`` (the logit calibration of FedLC); its "FedDecor" our ``feddecorr``. SCALA's β=0.05 differs
#: between the two tables (89.20 ± 0.09 in Table 4, 87.44 ± 1.37 in Table 6); Table 4's is shown.
SCALA_TABLES_4_6 = {
    "scala": ["90.70 ± 0.23", "91.10 ± 0.27", "89.20 ± 0.09", "89.64 ± 0.10"],
    "fedavg": ["81.72 ± 2.82", "87.25 ± 2.07", "74.38 ± 2.41", "78.73 ± 9.42"],
    "fedprox": ["85.09 ± 1.15", "89.28 ± 0.29", "82.30 ± 4.13", "84.72 ± 4.41"],
    "feddyn": ["85.53 ± 1.29", "89.75 ± 1.25", "85.98 ± 0.44", "87.75 ± 2.09"],
    "feddecorr": ["84.64 ± 1.71", "88.55 ± 0.28", "81.19 ± 4.06", "82.65 ± 4.76"],
    "fedlogit": ["77.51 ± 4.88", "89.26 ± 0.14", "81.40 ± 2.72", "86.27 ± 2.11"],
    "fedlc": ["76.64 ± 6.07", "89.43 ± 0.08", "79.91 ± 1.87", "83.58 ± 4.97"],
    "splitfedv1": ["85.44 ± 2.17", "89.29 ± 1.45", "83.91 ± 2.35", "83.10 ± 4.01"],
    "splitfedv2": ["84.78 ± 2.87", "88.22 ± 2.45", "82.54 ± 1.33", "85.27 ± 4.32"],
    "splitfedv3": ["34.40 ± 1.84", "63.69 ± 3.00", "46.84 ± 1.79", "59.34 ± 1.00"],
    "sfl_local_loss": ["87.58 ± 2.26", "90.17 ± 1.14", "84.86 ± 2.09", "84.41 ± 2.48"],
}
SCALA_FMNIST = {
    "quantity_a2": "α=2",
    "quantity_a4": "α=4",
    "dirichlet_b0.05": "β=0.05",
    "dirichlet_b0.1": "β=0.1",
}


def _mean(cell: str) -> float | None:
    return float(cell.split(" ±")[0]) if cell[0].isdigit() else None


def _ranks(values: dict[str, float | None]) -> dict[str, int]:
    """1 = highest, equal values share the best of their ranks; methods without a value get no rank."""
    given = {m: round(v, 6) for m, v in values.items() if v is not None}
    return {m: 1 + sum(w > v for w in given.values()) for m, v in given.items()}


def _paper_and_ours_header(settings: dict[str, str]) -> str:
    """The header rows of a table with a paper column and an ours column per setting."""
    labels = " | ".join(f"{label}: paper | {label}: ours" for label in settings.values())
    return f"| method | {labels} |\n|---|" + "---|---|" * len(settings)


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def side_by_side(folder: Path, settings: dict[str, str], paper: dict[str, list[str]]) -> str:
    """Markdown: per method and setting, the paper's number and ours (final test accuracy, mean ± std over seeds),
    each with its rank among the methods both report; then, per setting, the pairs of methods in the paper's order."""
    head = _paper_and_ours_header(settings)
    lines = [head]
    agreement = []
    cells: dict[str, list[str]] = {m: [] for m in paper}
    for i, setting in enumerate(settings):
        path = folder / setting / "metrics.csv"
        ours = {row.method: row for row in summarize(read_metrics_csv(path))} if path.exists() else {}
        both = [m for m in paper if m in ours and ours[m].final_acc and _mean(paper[m][i]) is not None]
        ours_mean = {m: 100 * sum(ours[m].final_acc) / len(ours[m].final_acc) for m in both}
        paper_rank, ours_rank = _ranks({m: _mean(paper[m][i]) for m in both}), _ranks(ours_mean)  # type: ignore[misc]
        for m in paper:
            rank_p = f" (#{paper_rank[m]})" if m in paper_rank else ""
            rank_o = f" (#{ours_rank[m]})" if m in ours_rank else ""
            ours_cell = format_acc(ours[m].final_acc) + rank_o if m in ours else "not run yet"
            cells[m] += [paper[m][i] + rank_p, ours_cell]
        if len(both) >= 2:
            pairs = list(combinations(both, 2))
            order = [(_sign(paper_rank[b] - paper_rank[a]), _sign(ours_rank[b] - ours_rank[a])) for a, b in pairs]
            same, tied = sum(p == o != 0 for p, o in order), sum(o == 0 for _, o in order)
            tied_note = f" ({tied} tied here)" if tied else ""
            agreement.append(f"{settings[setting]}: {same} of {len(pairs)} pairs in the paper's order{tied_note}")
    lines += [f"| `{m}` | " + " | ".join(c) + " |" for m, c in cells.items()]
    ranks = "Ranks (#) among the methods of the table. " + "; ".join(agreement) + "." if agreement else ""
    return "\n".join(lines) + "\n\n" + ranks + "\n"


def paired_to_baseline(folder: Path, settings: dict[str, str], paper: dict[str, list[str]], base: str) -> str:
    """Markdown: each method's final accuracy minus ``base``'s, in points: the paper's (difference of its means) and
    ours, paired per seed (every method sees the same data and client draws for a seed), mean ± std over seeds."""
    import statistics

    head = _paper_and_ours_header(settings)
    cells: dict[str, list[str]] = {m: [] for m in paper if m != base}
    for i, setting in enumerate(settings):
        path = folder / setting / "metrics.csv"
        runs = read_metrics_csv(path) if path.exists() else []
        final = {(r.method, r.seed): r.acc_records[-1]["test/acc"] for r in runs if r.acc_records}
        for m in cells:
            p, b = _mean(paper[m][i]), _mean(paper[base][i])
            cells[m].append(f"{p - b:+.2f}" if p is not None and b is not None else "—")
            diffs = [
                100 * (v - final[base, k]) for (method, k), v in final.items() if method == m and (base, k) in final
            ]
            std = statistics.stdev(diffs) if len(diffs) > 1 else 0.0
            cells[m].append(f"{statistics.mean(diffs):+.2f} ± {std:.2f}" if diffs else "not run yet")
    lines = [head] + [f"| `{m}` | " + " | ".join(c) + " |" for m, c in cells.items()]
    return "\n".join(lines) + "\n"


def floor_table(folder: Path, settings: dict[str, str]) -> str:
    """Markdown: FedAvg, FedLC with the equation's limit and FedLC with a missing class counted as one sample
    (``<setting>_fedlc_floor1``), final accuracy per setting, beside the paper's FedAvg and FedLC."""
    rows = {"FedAvg": ("fedavg", ""), "FedLC, n = 0 (limit)": ("fedlc", ""), "FedLC, n = 1": ("fedlc", "_fedlc_floor1")}
    head = _paper_and_ours_header(settings)
    lines = [head]
    for label, (method, suffix) in rows.items():
        cells = []
        for i, setting in enumerate(settings):
            path = folder / f"{setting}{suffix}" / "metrics.csv"
            ours = {r.method: r for r in summarize(read_metrics_csv(path))} if path.exists() else {}
            paper = FEDLC_TABLE_4[method][i] if not suffix else "—"
            cells += [paper, format_acc(ours[method].final_acc) if method in ours else "not run yet"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def identity_table(folder: Path, settings: dict[str, str], paper: dict[str, list[str]]) -> str:
    """Markdown: how far apart numbers of one method fall, against the gaps to explain. Per setting: the paper's
    SplitFedV1 − FedAvg (the same algorithm with plain SGD); ours, two unpaired 3-seed means of FedAvg (seeds 0-2 of
    the study and 3-5 of ``<setting>_fedavg_seeds345``: the ten splits of six seeds into two triples, mean and largest
    gap); and FedProx, FedDecorr, FedLogit and FedLC against SplitFedV1 instead of FedAvg, the paper's and ours
    (paired per seed)."""
    import statistics

    methods = ["fedprox", "feddecorr", "fedlogit", "fedlc"]
    lines = [
        "| setting | paper: SplitFedV1 − FedAvg | ours: two 3-seed means of FedAvg, mean (largest) gap | "
        + " | ".join(f"`{m}` − SplitFedV1: paper / ours" for m in methods)
        + " |",
        "|---|---|---|" + "---|" * len(methods),
    ]
    for i, (setting, label) in enumerate(settings.items()):
        runs = [r for name in (setting, f"{setting}_fedavg_seeds345") for r in _runs(folder / name)]
        final = {(r.method, r.seed): 100 * r.acc_records[-1]["test/acc"] for r in runs if r.acc_records}
        fedavg = {k: v for (m, k), v in final.items() if m == "fedavg"}
        gaps = [
            abs(statistics.mean(fedavg[k] for k in a) - statistics.mean(v for k, v in fedavg.items() if k not in a))
            for a in combinations(sorted(fedavg), 3)
            if min(fedavg) in a
        ]
        spread = f"{statistics.mean(gaps):.2f} ({max(gaps):.2f})" if len(fedavg) == 6 else "not run yet"
        cells = [label, f"{_mean(paper['splitfedv1'][i]) - _mean(paper['fedavg'][i]):+.2f}", spread]
        for m in methods:
            ours = [v - final["splitfedv1", k] for (method, k), v in final.items() if method == m]
            ours_cell = f"{statistics.mean(ours):+.2f}" if ours else "—"
            cells.append(f"{_mean(paper[m][i]) - _mean(paper['splitfedv1'][i]):+.2f} / {ours_cell}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def gas_experiments_table(folder: Path) -> str:
    """Markdown: FedBuff and CA²FL at s = 2 as in the study (Alg. 1 of each, heterogeneous speeds), with clients of
    equal compute speed, and with the GAS code's update rules: final accuracy and the paired difference to FedAvg (of
    the same clock: equal speeds do not change FedAvg's synchronous rounds, and the table shows it)."""
    import statistics

    variants = [
        ("FedAvg", "fedavg", "fashion_mnist_shards2"),
        ("FedAvg, equal speeds", "fedavg", "fashion_mnist_shards2_equal_speed"),
        ("FedBuff (Alg. 1)", "fedbuff", "fashion_mnist_shards2"),
        ("FedBuff, equal speeds", "fedbuff", "fashion_mnist_shards2_equal_speed"),
        ("FedBuff, the GAS code's model average", "fedbuff", "fashion_mnist_shards2_fedbuff_average"),
        ("CA²FL (Alg. 1)", "ca2fl", "fashion_mnist_shards2"),
        ("CA²FL, equal speeds", "ca2fl", "fashion_mnist_shards2_equal_speed"),
        ("CA²FL, the GAS code's update", "ca2fl", "fashion_mnist_shards2_ca2fl_gas_code"),
    ]
    base = {
        r.seed: r.acc_records[-1]["test/acc"] for r in _runs(folder / "fashion_mnist_shards2") if r.method == "fedavg"
    }
    lines = [
        "| FedBuff and CA²FL at s = 2 | final test acc (%) | paired difference to FedAvg (points) |",
        "|---|---|---|",
    ]
    for label, method, setting in variants:
        runs = [r for r in _runs(folder / setting) if r.method == method and r.acc_records]
        if not runs:
            lines.append(f"| {label} | not run yet | |")
            continue
        final = [r.acc_records[-1]["test/acc"] for r in runs]
        diffs = [100 * (r.acc_records[-1]["test/acc"] - base[r.seed]) for r in runs if r.seed in base]
        spread = statistics.stdev(diffs) if len(diffs) > 1 else 0.0
        lines.append(f"| {label} | {format_acc(final)} | {statistics.mean(diffs):+.2f} ± {spread:.2f} |")
    return "\n".join(lines) + "\n"


def _runs(folder: Path):
    path = folder / "metrics.csv"
    return read_metrics_csv(path) if path.exists() else []


def papers_section() -> str:
    """The page ``docs/results/papers.md``: the papers' own data."""
    synthetic = side_by_side(HERE / "leaf_synthetic", SYNTHETIC, FEDLC_TABLE_4)
    synthetic_paired = paired_to_baseline(HERE / "leaf_synthetic", SYNTHETIC, FEDLC_TABLE_4, "fedavg")
    floor = floor_table(HERE / "leaf_synthetic", SYNTHETIC)
    ceiling_md = HERE / "leaf_synthetic" / "ceiling.md"
    ceiling = ceiling_md.read_text() if ceiling_md.exists() else "(not run yet)\n"
    gas = side_by_side(HERE / "gas", GAS_FMNIST, GAS_TABLE_1)
    gas_paired = paired_to_baseline(HERE / "gas", GAS_FMNIST, GAS_TABLE_1, "fedavg")
    from summarize import value_at_target  # summarize.py imports this module: import it when it is complete

    gas_time = value_at_target(HERE / "gas", GAS_FMNIST, 0.75)
    gas_experiments = gas_experiments_table(HERE / "gas")
    scala = side_by_side(HERE / "scala_fashion_mnist", SCALA_FMNIST, SCALA_TABLES_4_6)
    scala_paired = paired_to_baseline(HERE / "scala_fashion_mnist", SCALA_FMNIST, SCALA_TABLES_4_6, "fedavg")
    scala_identity = identity_table(HERE / "scala_fashion_mnist", SCALA_FMNIST, SCALA_TABLES_4_6)
    return PAPERS_TEXT.format(
        synthetic=synthetic,
        synthetic_paired=synthetic_paired,
        floor=floor,
        ceiling=ceiling,
        gas=gas,
        gas_paired=gas_paired,
        gas_time=gas_time,
        gas_experiments=gas_experiments,
        scala=scala,
        scala_paired=scala_paired,
        scala_identity=scala_identity,
    )


PAPERS_TEXT = """# The papers' own data, side by side

## FedLC's Table 4: Synthetic(λ, µ) at the paper's scale

FedProx's generator (`--data.dataset leaf_synthetic`, its natural split: 100 clients with power-law sizes),
multinomial logistic regression 60 → 10, 300 rounds, SGD lr 0.01, 5 seeds (0-4), as FedLC states. FedLC states
neither clients per round nor local steps: 10 clients a round (ρ = 0.1), T = 5 local steps of B = 1280 rows summed
over the 10 clients (128 a client on average, FedLC's batch) — our choices, `configs/leaf_synthetic/fedavg.yaml`.
Each seed draws its own data (the data seed is the run's seed). FedOpt: FedAdam (server lr 0.1, β1 0.9, β2 0.99,
τ 1e-3); FedProx µ = 0.01; FedRS α = 0.5; FedLC τ = 1 with the equation's limit for a missing class (n = 0).

Produced by (from the repository root, with the package installed; about 25 minutes on 2 CPU cores):

```bash
bash docs/results/run_leaf_synthetic.sh && python docs/results/summarize.py
```

The 105 runs of the three settings were produced by the same `compare` commands with `--out out/synthetic_*` (each
`results.md` records its command), from a frozen clone of commit f145996; the commits since change no logistic run
(a 69-run fingerprint of every method is bitwise identical).

{synthetic}
Each seed draws its own clients, so the seed spread of every method is mostly the data's; every method sees the same
data for a seed, and differences to FedAvg paired per seed are much tighter (points; the paper's: the difference of
its means):

{synthetic_paired}
**Where the orderings differ, and why.** Two differences, each tested by an experiment.

*FedLC is last here, first in the paper.* The clients of Synthetic(λ, µ) hold 2.2-2.5 classes each (the ceiling
table below): with the equation's limit, FedLC's calibration τ·n_y^(−1/4) is infinite for the 7-8 classes a client
lacks, which removes them from its softmax — the mechanism the fidelity study found on digits and MNIST-5k. The
experiment: FedLC with a missing class counted as one sample (`--model.missing_class_floor 1`, a margin of τ), same
seeds and data (`leaf_synthetic/*_fedlc_floor1`):

{floor}
The floor brings FedLC from 44-50 % to FedAvg's level, not above it: its deficit here is the missing-class limit, and
the paper's gain of 9-12 points over FedAvg is not reproduced.

*Accuracy does not fall from Synthetic(0,0) to (1,1) here; it falls 9 points in the paper.* The experiment: the
centralised ceiling of the model on the very data the runs see (multinomial logistic regression fitted on all
clients' pooled training rows; `python docs/results/leaf_synthetic/ceiling.py`):

{ceiling}
With FedProx's generator as published, (λ, µ) = (1, 1) is *easier* for a linear model than (0, 0): larger input shifts
B_k leave each client fewer classes and a larger top class, and λ moves no label at all (u_k shifts every class's logit
alike). FedAvg follows the ceiling, 7-9 points below it in every setting, so the paper's fall must come from data or a
protocol its text does not give (FedLC cites LEAF and FedProx but states no generator constants, split, participation
or local work). The seed spread (±6-9 points against the paper's ±0.3-1.4) is the data's: each seed draws new
clients, and the ceiling itself varies by ±3-5 points over the same seeds; the paper's small spreads suggest one
fixed dataset (FedProx ships its generated JSON) with only the training seed varied.

Paired with FedAvg per seed, three other differences stand out from the spread: FedRS ends about one point *below*
FedAvg in every setting (the paper: 3.3-3.8 above) — our reading, not tested by an experiment: FedRS's α = 0.5 scales
down the logits of a client's missing classes, a milder form of FedLC's restriction; SCAFFOLD ends 3.4 ± 2.9 points
above FedAvg at (1,1) (the paper: 1.8), level with it elsewhere; FedAdam is within its spread of FedAvg except at
(0.5,0.5) (−2.4 ± 1.7). FedNova equals FedAvg exactly, because every client runs the same T = 5 steps (FedNova's
normalisation changes something only when clients run different numbers of steps, e.g. local epochs over power-law
sizes), and FedProx with µ = 0.01 at lr 0.01 differs from FedAvg in no reported digit.

## GAS's Table 1: Fashion-MNIST, s = 2 and Dir(0.1)

The paper's setting (`configs/fashion_mnist/gas.yaml`: K = 20 clients, C = 10 in flight, E = 20 local iterations of
B = 32 rows, Q_s = Q_c = 10, SGD lr 0.01, momentum 0.9, weight decay 5e-4, full per-label covariances, f_k ~ U[1e9,
1e10] FLOP/s) with two changes for two CPU cores: FedLC's Table 8 CNN for 28×28 (`cnn_fedlc`, 21,840 parameters, cut
after its second conv block, as the paper cuts AlexNet) instead of AlexNet, and 100 global iterations instead of 1000.
3 seeds. Measured on 2 CPU cores: a global iteration with the CNN takes 1.4 s (`python benchmarks/round_cost.py --cases
gas_fashion_mnist`); the first with AlexNet took 745 s (the progress bar of `lightning-sfl fit --config
configs/fashion_mnist/gas.yaml --clock.barrier iteration --trainer.max_epochs 2`): AlexNet's cut has 3,136 dimensions,
each label's full covariance stays singular at least until it has seen more activations than that, and every flush then
samples through an eigen-decomposition of each label's 3,136 × 3,136 matrix (88 % of a minute's profile, py-spy, in its
third minute). With a constant ridge of the authors' code's size (`--model.ridge 1e-5`; their code adds 1e-5 at every
merge) sampling goes through Cholesky and the first global iteration took 152 s.

Produced by (about 100 minutes on 2 CPU cores):

```bash
bash docs/results/run_gas_fashion_mnist.sh && python docs/results/summarize.py
```

{gas}
Differences to FedAvg in points (ours paired per seed):

{gas_paired}
Simulated seconds to 75 % test accuracy (mean over the seeds that reach it; reached/seeds):

{gas_time}
GAS's and AsyncSFL's runs were made again (`compare --add`) when asynchronous arrivals began to run in waves, which
changes the float32 order of their sums (GAS: 83.88 → 83.82 at s = 2, 84.27 → 84.34 under Dir(0.1)). FedAvg's runs
(here and in the equal-speed experiment below) were made again (`compare --add`) with the paper's 32 rows a client:
the config first gave the synchronous FedAvg `data.batch_size` 32 rows a local iteration for all its 10 clients (~3 a
client, while the asynchronous methods took 32 each); now B·C = 320. FedAvg went from 77.95 to 75.79 at s = 2 and
from 77.98 to 76.15 under Dir(0.1), and its time to 75 % from 11-12 to 40-41 simulated seconds (a client's 20
iterations now compute 32 rows each).

**What the GAS tables show.** GAS is first in both skews, as in the paper, and further ahead of FedAvg than there
(paired: +8.0 ± 4.2 and +8.2 ± 4.9 points against the paper's +2.7 and +1.8); FedBuff is last, as in the paper. One
pair is out of the paper's order in each skew: CA²FL ends below FedAvg (−9.1 ± 7.7 at s = 2, −1.8 ± 8.5 at Dir(0.1);
the paper: +0.3), with the widest seed spread of all — the instability of the asynchronous FL methods that the digits
and MNIST-5k study showed (two experiments below). After 100 of the paper's 1000 global iterations every method is
6-22 points below the paper's level. AsyncSFL (GAS without the generated activations, not in the paper's table) sits
between GAS and FedAvg: the generated activations add 2-5 points. **Time to 75 %:** GAS is first at s = 2 (31 s
against CA²FL's 37, FedBuff's 39 and FedAvg's 41) and level with CA²FL under Dir(0.1) (29 and 28 s; FedBuff 35,
FedAvg 40), AsyncSFL last (49 s in both). The CNN has 21,840 parameters (87 KB), so exchanging whole models costs the
FL methods little, while every split method sends each row's activations (the ledger: 1,693 MB for GAS over 100
iterations against 175 MB for FedAvg); GAS's fewer iterations to 75 % (18 against FedAvg's 46 at s = 2) outweigh
that on this cell.

**Why FedBuff and CA²FL end below FedAvg: two experiments** (s = 2, 3 seeds, 100 iterations;
`ONLY=fashion_mnist_shards2_equal_speed`, `ONLY=fashion_mnist_shards2_fedbuff_average` and
`ONLY=fashion_mnist_shards2_ca2fl_gas_code bash docs/results/run_gas_fashion_mnist.sh`, folders of the same names):

{gas_experiments}
1. *The clock's speeds.* Our reading was that with compute speeds spread tenfold the fastest clients fill every buffer
   (their two label shards over-represented) and updates arrive up to an aggregation stale. With every client at 1e10
   FLOP/s (only the channel still differs) FedBuff rises by 9 points, to 2 below FedAvg (within the seeds' spread): for
   FedBuff the reading holds for most of its gap, and what is left is the one-aggregation staleness of Q_c = C (a client
   that starts before the buffer fills trains from the previous global model). CA²FL does not move (+0.6): its gap is
   not the clock's.
2. *The GAS authors' update rules* (their code, from which the paper's Table 1 may come: FedBuff sets the global
   model to the uniform mean of the buffered models; CA²FL adds every client's cached update, |D_i|-weighted, after
   refreshing the cache). At the study's heterogeneous speeds both end higher than with their papers' own rules:
   FedBuff by 5.6 and CA²FL by 5.8 points, but both still below FedAvg (−5.6 and −3.4). So the code's rules explain
   part of the paper's ordering, CA²FL ≥ FedBuff included (72.4 against 70.2), but not CA²FL above FedAvg. The
   paper's 1000 iterations against our 100 are the difference left untested; every curve still rises at iteration
   100 (mean accuracy over iterations 61-80 → 81-100: FedAvg 72.2 → 75.0, CA²FL with the code's update 69.7 → 71.5,
   FedBuff with the code's average 68.2 → 69.5), FedAvg's no slower than the others'.

## SCALA's Tables 4 and 6: Fashion-MNIST, α=2, α=4, β=0.05, β=0.1

The paper's setting (`configs/fashion_mnist/scala.yaml`: K = 100 clients, ρ = 0.1, B = 320 rows a step summed over
the round's 10 clients, T = 5 local iterations, SGD lr 0.01) with three changes for two CPU cores: FedLC's Table 8 CNN
(`cnn_fedlc`, cut after its first conv block) instead of AlexNet (a round with its test evaluation: 19.0 CPU-core
seconds, 9.6 s on 2 cores, with AlexNet; 0.83 and 0.40 s with the CNN; `python benchmarks/round_cost.py --cases
scala_fashion_mnist_models`), 200 rounds instead of 500, and test accuracy (10,000 images) every 5 rounds. 3 seeds.
Every method with its class defaults, as in the digits study. Table 4's "FedLA" is our `fedlc`, its "FedDecor" our
`feddecorr`.

Produced by (about 30 minutes per setting on 2 CPU cores):

```bash
bash docs/results/run_scala_fashion_mnist.sh && python docs/results/summarize.py
```

{scala}
Differences to FedAvg in points (ours paired per seed):

{scala_paired}
**What the tables show.** 45, 34, 42 and 39 of the 55 pairs of methods are in the paper's order (α=2, α=4, β=0.05,
β=0.1). In all four settings SCALA ends above FedAvg (paired: +7.2, +2.9, +3.9, +4.1 points; the paper: +9.0, +3.9,
+14.8, +10.9) and above every FL baseline but FedDyn; FedProx (µ = 0.01), FedDecorr and SplitFedV1 end at FedAvg's
level (SplitFedV1 = FedAvg exactly under quantity skew, the identity our tests check; within 0.02 points under
Dirichlet skew, where the clients' batch sizes differ; the paper puts all three 1-10 points above FedAvg); the local
logit adjustments (FedLogit, FedLC) end at or below FedAvg (the paper: below it at α=2, above it elsewhere). Every
method but SplitFedV3 is 2-19 points below the paper's level after 200 of its 500 rounds with the smaller model, and
SplitFedV3 does not collapse (−1 to −3 points against the paper's −19 to −47). The places that differ in every
setting: **SplitFedV2 is first** (+11.8 to +13.1 over FedAvg; the paper: +1.0 to +8.2, 4th to 9th) **and FedDyn
second** (+7.5 to +9.0; the paper: +2.5 to +11.6, 2nd or 3rd), SCALA third or fourth.

**Why SplitFedV2 and FedDyn lead here: two experiments** (α=2, 3 seeds; `ONLY=quantity_a2_500rounds` and
`ONLY=quantity_a2_lr0.05 bash docs/results/run_scala_fashion_mnist.sh`, folders of the same names):

1. *Not the number of rounds.* At the paper's 500 rounds SCALA ends at 79.18 ± 1.51, SplitFedV2 at 84.63 ± 0.30 and
   FedDyn at 82.90 ± 1.66: SplitFedV2's lead is 5.8 points at round 200 and 5.4 at round 500, FedDyn's grows from 1.8
   to 3.7.
2. *Mostly the server's step.* SplitFedV2's server steps once per client and local iteration (50 steps of 32 rows a
   round), SCALA's once per iteration on the concatenated batch (5 steps of 320 rows). Per server step SCALA learns
   more (round 250 against SplitFedV2's round 25, both 1,250 steps: 75.0 against 66.2; round 500 against 50: 79.2
   against 72.4), but with plain SGD at lr 0.01 it takes 10x fewer. At 5x the learning rate (lr 0.05, 200 rounds)
   SCALA gains 7.5 points (81.18 ± 1.21) and SplitFedV2 3.9 (83.42 ± 1.86): the gap falls from 5.8 to 2.2 points,
   within SplitFedV2's seed spread. What is left, and FedDyn's lead, these runs do not explain; FedDyn was not run
   at lr 0.05. The paper's AlexNet, with 500 rounds of its larger batches, may sit in a regime where the step matters
   less; we did not run it on 2 cores (9.6 s a round, below).

**Why FedProx ends at FedAvg's level** (α=2; `ONLY=quantity_a2_fedprox_mu0.1` and `ONLY=quantity_a2_fedprox_mu1`):
not its µ. At µ = 0.1 it ends at 66.52 ± 2.73 and at µ = 1 at 66.53 ± 2.65, against FedAvg's 66.48 ± 2.75 (µ = 0.01:
66.48). With T = 5 local iterations at lr 0.01 a client moves little from the global model within a round, so
FedProx's term (µ/2)·‖w − w_g‖² has almost nothing to pull back; the paper's +3.4 points for FedProx cannot come from
that term in this setting.

**Is too little client drift the reason the corrections do not help?** (α=2, lr 0.05, i.e. 5x the step and so the
drift of a round; `ONLY=quantity_a2_lr0.05_drift`, folder of the same name). Paired differences to FedAvg, points,
mean ± std over the 3 seeds, at lr 0.01 → lr 0.05: FedProx +0.00 → −0.03, FedDecorr −0.15 → −1.67, FedLogit
−1.71 → −4.92, FedLC −1.76 → −4.92, SplitFedV1 0 → 0 (the identity), SplitFedV3 −2.65 → −5.02 (FedAvg: 66.48 →
77.08). The reading is refuted for FedProx and FedDecorr: with five times the drift neither rises above FedAvg, and
FedDecorr falls below it. The local logit adjustments fall further below FedAvg — at α=2 the paper, too, puts them
below FedAvg (−4.2 and −5.1), so this place agrees with it; at α=4 and under Dirichlet skew, where the paper puts them
above, this experiment was not run. SplitFedV3 moves the paper's way: its loss against FedAvg doubles with the drift
(sequential server updates over label-skewed clients forget more when each client moves further), though at −5 points
it is still far from the paper's −47 at this setting. What makes FedProx and FedDecorr gain in the paper the next
experiment asks.

**Are the paper's gains of FedProx, FedDecorr and the logit adjustments over FedAvg larger than the gap between two
runs of one method?** (all four settings; FedAvg with seeds 3, 4 and 5:
`ONLY=quantity_a2_fedavg_seeds345 bash docs/results/run_scala_fashion_mnist.sh`, the same for the other settings,
folders of the same names). The paper's own table
holds two methods that are the same algorithm with plain SGD, FedAvg and SplitFedV1 (our tests check the identity;
here they agree to 0.02 points), and they differ there by 2.0-9.5 points. Here two 3-seed means of FedAvg, unpaired
(the paper's seeds are not said to be paired across methods), differ by the gaps below (ten ways to split six seeds
into two triples). Set against the paper's SplitFedV1 instead of its FedAvg, the corrections' gains vanish:

{scala_identity}
FedProx's and FedDecorr's gains over FedAvg in the paper (+1.3 to +7.9) are no larger than its gap between its two
identical methods in the same setting (+2.0 to +9.5), but for FedProx at β=0.1 (+5.99 against +4.37), and at α=2 and
α=4 they are within the largest gap of two unpaired 3-seed means of one method here (5.4 and 5.7). Against the paper's
SplitFedV1 both are at or below its level in seven of the eight cells (the exception: FedProx at β=0.1, +1.6), as
ours are. So the paper's column of FedAvg, not a gain of the corrections, makes them look better than FedAvg there:
at β=0.05 its FedAvg (74.38) is 9.5 points below its SplitFedV1. The logit adjustments, against SplitFedV1 at α=4,
β=0.05 and β=0.1: the paper's are below it or within 0.5 points of it in five of the six cells, ours in all six; the
exception, FedLogit at β=0.1 (+3.2), is within the paper's own spread there (its FedAvg: ± 9.42).

**At the paper's scale, on one GPU** (α=2, seed 0; `bash docs/results/run_scala_fashion_mnist_gpu.sh`, folders
`scala_fashion_mnist_gpu/quantity_a2` and `quantity_a2_feddyn`, each with the `device.txt` it ran on: one NVIDIA
H200): `configs/fashion_mnist/scala.yaml` as it is — the 14-layer AlexNet for 28x28 cut at s2 (3.87 M parameters), 500
rounds, the paper's K, ρ, B, T and lr — with test accuracy every 5 rounds. Mean of the last five evaluations (rounds
480-500) and, in brackets, the last round's:

| method | ours, AlexNet, 500 rounds | paper (Tables 4, 6) | ours at round 200 | CNN study, round 200 (3 seeds) |
|---|---|---|---|---|
| SCALA | 86.16 (83.69) | 90.70 | 82.06 | 73.69 |
| FedAvg | 84.60 (84.67) | 81.72 | 76.51 | 66.48 |
| SplitFedV2 | 87.21 (87.23) | 84.78 | 82.75 | 79.53 |
| FedDyn | 88.59 (88.83) | 85.53 | 82.88 | 75.47 |

With the paper's model and rounds every method but SCALA reaches or passes the paper's level (FedAvg +2.9, SplitFedV2
+2.4, FedDyn +3.1 points) and SCALA stays 4.5 below it; SCALA is above FedAvg (+1.6 over the last five evaluations, +5.6
at round 200) but, as with the small CNN, below SplitFedV2 and FedDyn. So the ordering the CPU study found is not an
artefact of its smaller model or its 200 rounds. One seed, and single evaluations move by up to 5.5 points from one to
the next within the last five (SplitFedV2: 89.37 at round 490, 83.86 at 495; SCALA: 86.96 at 495, 83.69 at 500): the
paper's 3-seed means are not matched in spread. Wall time on the H200, the four runs started together: 96-100 s for
SCALA and FedAvg, 191 s for SplitFedV2 (10 clients' server steps in sequence); on our two CPU cores a round of AlexNet
takes 9.6 s with a test evaluation every round (`python benchmarks/round_cost.py --cases scala_fashion_mnist_models`):
at most about 80 minutes a 500-round run. FedDyn keeps every client's ∇L_k (100 x 3.87 M parameters, 1.55 GB), and each
round's checkpoint carries it: with a checkpoint every round it reached round 465 in the 500 s the others took to
finish; checkpointing every 100 rounds (`--checkpoint.every_n_epochs=100`, training unchanged) it ran its 500 rounds in
88 s."""


if __name__ == "__main__":
    print(papers_section())
