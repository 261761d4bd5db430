"""Tables and plots of the privacy-accuracy frontier (``bash docs/results/run_privacy_frontier.sh``; issue 36).

For every ``privacy_frontier/<dataset>/<defence>/`` folder it gathers both attacks' scores of each run
(``runs/<method>/seed<k>/{attack,unsplit}/metrics.json``, written by ``lightning-sfl attack``) into ``attacks.csv``
(committed; the runs are not), then writes ``privacy_frontier/README.md``: per dataset, one row per method × defence ×
strength with test accuracy and each attack's MSE and SSIM (mean ± std over seeds), the frontier plot
(``<dataset>_frontier.png``: accuracy against each attack's MSE, one colour per method, one marker per defence, a line
through its strengths) and two computed readings: which method leaks least at equal accuracy, and what concatenating
the activations (SCALA against MiniBatch-SFL, the same server update on the same uploads without it) changes.

    python docs/results/summarize_frontier.py
"""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from lightning_sfl.compare import read_metrics_csv  # noqa: E402

HERE = Path(__file__).resolve().parent / "privacy_frontier"
DATASETS = {
    "digits": "digits (8×8; cnn_small cut after its first conv, activations 32×8×8; lr 0.02, 50 rounds)",
    "mnist5k": "MNIST-5k (28×28; FedLC's CNN cut after its first block, 10×12×12; 50 rounds)",
    "fashion_mnist": "Fashion-MNIST (28×28; FedLC's CNN, 10×12×12; 100 clients, 50 rounds)",
}
METHODS = {
    "scala": "SCALA",
    "minibatch_sfl": "MiniBatch-SFL",
    "splitfedv1": "SplitFedV1",
    "sfl_local_loss": "SFLLocalLoss",
}
#: defence -> (label, strength's name, strengths in increasing strength); "none" is every defence's zero point
DEFENCES = {
    "nopeek": ("NoPeek", "α", ("10", "100", "1000")),
    "laplace": ("tanh + Laplace noise", "b", ("0.1", "0.3", "1")),
    "bottleneck": ("bottleneck", "channels", ("16", "4", "1")),
    "inversion": ("inversion regulariser", "γ", ("0.3", "1", "3")),
}
ATTACKS = {"attack": "decoder", "unsplit": "UnSplit"}
COLUMNS = ("method", "seed", "attack", "mse", "ssim", "psnr", "clone_accuracy", "activation_shape", "test_images")
#: accuracy margin (points) below the worst undefended method that still counts as "equal accuracy"
MARGIN = 2.0


def gather_attacks(folder: Path, write: bool = False) -> list[dict]:
    """Both attacks' scores of every run of ``folder``: the committed ``attacks.csv`` updated with the runs present
    (a run's ``metrics.json`` replaces its committed row; rows of runs not present are kept); ``write``: save the
    result to ``attacks.csv``."""
    rows: dict[tuple, dict] = {}
    if (folder / "attacks.csv").exists():
        with open(folder / "attacks.csv", newline="") as f:
            for r in csv.DictReader(f):
                r["seed"] = int(r["seed"])
                for k in ("mse", "ssim", "psnr"):
                    r[k] = float(r[k])
                rows[r["method"], r["seed"], r["attack"]] = r
    for path in sorted(p for a in ATTACKS for p in folder.glob(f"runs/*/seed*/{a}/metrics.json")):
        m = json.loads(path.read_text())
        row = {
            "method": path.parts[-4],
            "seed": int(path.parts[-3].removeprefix("seed")),
            "attack": path.parts[-2],
            **{k: m[k] for k in ("mse", "ssim", "psnr", "test_images")},
            "clone_accuracy": m.get("clone_accuracy", ""),
            "activation_shape": "x".join(map(str, m["activation_shape"])),
        }
        rows[row["method"], row["seed"], row["attack"]] = row
    ordered = [rows[k] for k in sorted(rows)]
    if write and ordered:
        with open(folder / "attacks.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(ordered)
    return ordered


@dataclass
class Point:
    """One method under one defence setting: per-seed values (accuracy in %)."""

    method: str
    defence: str  # "none" or a key of DEFENCES
    strength: str  # "" for none
    accuracy: list[float]
    mse: dict[str, list[float]]  # attack -> per seed
    ssim: dict[str, list[float]]
    clone: list[float]
    shape: str

    @property
    def label(self) -> str:
        if self.defence == "none":
            return "none"
        name, symbol, _ = DEFENCES[self.defence]
        return f"{name}, {symbol} = {self.strength}"


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def spread(values: list[float]) -> float:
    """The seeds' standard deviation (0 for fewer than two)."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def cell(values: list[float], digits: int) -> str:
    if not values:
        return "—"
    return f"{statistics.fmean(values):.{digits}f} ± {spread(values):.{digits}f}"


def settings() -> list[tuple[str, str, str]]:
    """``(folder name, defence, strength)`` of every setting, the undefended one first."""
    out = [("none", "none", "")]
    for defence, (_, _, strengths) in DEFENCES.items():
        out += [(f"{defence}{s}", defence, s) for s in strengths]
    return out


def dataset_points(dataset: str) -> list[Point]:
    points = []
    for folder, defence, strength in settings():
        path = HERE / dataset / folder
        if not (path / "metrics.csv").exists():
            continue
        runs: dict[str, list[float]] = {}
        ok = set()  # (method, seed) of the runs that finished: only their attacks count
        for run in read_metrics_csv(path / "metrics.csv"):
            if run.status == "ok":
                runs.setdefault(run.method, []).append(100 * run.acc_records[-1]["test/acc"])
                ok.add((run.method, run.seed))
        attacks = [a for a in gather_attacks(path) if (a["method"], a["seed"]) in ok]
        for method in METHODS:
            if method not in runs:
                continue
            mine = [a for a in attacks if a["method"] == method]
            points.append(
                Point(
                    method,
                    defence,
                    strength,
                    runs[method],
                    {k: [a["mse"] for a in mine if a["attack"] == k] for k in ATTACKS},
                    {k: [a["ssim"] for a in mine if a["attack"] == k] for k in ATTACKS},
                    [float(a["clone_accuracy"]) * 100 for a in mine if a["attack"] == "unsplit"],
                    mine[0]["activation_shape"] if mine else "—",
                )
            )
    return points


def table(points: list[Point]) -> str:
    lines = [
        "| method | defence | test accuracy (%) | decoder MSE | decoder SSIM | UnSplit MSE | UnSplit SSIM "
        "| UnSplit clone accuracy (%) | activations |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method in METHODS:
        for p in (p for p in points if p.method == method):
            cells = [cell(p.accuracy, 2), cell(p.mse["attack"], 4), cell(p.ssim["attack"], 3)]
            cells += [cell(p.mse["unsplit"], 4), cell(p.ssim["unsplit"], 3), cell(p.clone, 1), p.shape]
            lines.append(f"| {METHODS[method]} | {p.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(dataset: str, points: list[Point]) -> Path:
    colours = dict(zip(METHODS, ("tab:red", "tab:blue", "tab:green", "tab:purple")))
    markers = {"nopeek": "o", "laplace": "s", "bottleneck": "^", "inversion": "D"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    for ax, attack in zip(axes, ATTACKS):
        for method in METHODS:
            base = next((p for p in points if p.method == method and p.defence == "none"), None)
            for defence in DEFENCES:
                line = [p for p in points if p.method == method and p.defence == defence]
                line = ([base] if base else []) + line
                if len(line) < 2:
                    continue
                xs, ys = [mean(p.mse[attack]) for p in line], [mean(p.accuracy) for p in line]
                ax.plot(xs, ys, color=colours[method], marker=markers[defence], alpha=0.8, lw=1, ms=5)
            if base:
                ax.plot(mean(base.mse[attack]), mean(base.accuracy), color=colours[method], marker="*", ms=12)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # narrow ranges would print every minor tick
        ax.set_xlabel(f"{ATTACKS[attack]}'s reconstruction MSE (higher: leaks less)")
        ax.grid(alpha=0.3)
        ax.set_title(ATTACKS[attack])
    axes[0].set_ylabel("test accuracy (%)")
    handles = [plt.Line2D([], [], color=c, lw=2, label=METHODS[m]) for m, c in colours.items()]
    handles += [plt.Line2D([], [], color="k", marker="*", ls="", ms=10, label="no defence")]
    handles += [
        plt.Line2D([], [], color="k", marker=mk, ls="", label=f"{DEFENCES[d][0]} ({', '.join(DEFENCES[d][2])})")
        for d, mk in markers.items()
    ]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"{DATASETS[dataset].split(' (')[0]}: privacy-accuracy frontier (means over 3 seeds)")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    out = HERE / f"{dataset}_frontier.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def readings(points: list[Point]) -> str:
    """Which method leaks least at equal accuracy; what concatenation changes (computed from the points)."""
    undefended = {p.method: p for p in points if p.defence == "none"}
    if len(undefended) < len(METHODS):
        return ""
    floor = min(mean(p.accuracy) for p in undefended.values()) - MARGIN
    lines = [
        f"At equal accuracy (every setting with a mean test accuracy of at least {floor:.1f} %, {MARGIN:.0f} points "
        "below the least accurate undefended method), the most private setting of each method:",
        "",
    ]
    lines += ["| method | setting | test accuracy (%) | decoder MSE | UnSplit MSE |", "|---|---|---|---|---|"]
    best = {}
    for method in METHODS:
        ok = [p for p in points if p.method == method and mean(p.accuracy) >= floor and p.mse["attack"]]
        if not ok:
            continue
        best[method] = max(ok, key=lambda p: mean(p.mse["attack"]))
        p = best[method]
        lines.append(
            f"| {METHODS[method]} | {p.label} | {mean(p.accuracy):.2f} | {mean(p.mse['attack']):.4f} "
            f"| {mean(p.mse['unsplit']):.4f} |"
        )
    if len(best) > 1:
        first, second = sorted(best.values(), key=lambda p: mean(p.mse["attack"]), reverse=True)[:2]
        gap = mean(first.mse["attack"]) - mean(second.mse["attack"])
        noise = max(spread(first.mse["attack"]), spread(second.mse["attack"]))
        if gap > noise:
            verdict = f"**{METHODS[first.method]}** ({first.label}), by {gap:.4f} over {METHODS[second.method]}"
        else:
            verdict = (
                f"no method measurably ({METHODS[first.method]} is ahead by {gap:.4f}, within the seeds' standard "
                f"deviation {noise:.4f})"
            )
        lines += ["", f"Leaks least to the decoder at equal accuracy: {verdict}."]
    ratios = []
    for _, defence, strength in settings():
        pair = [p for p in points if p.defence == defence and p.strength == strength]
        scala = next((p for p in pair if p.method == "scala"), None)
        mini = next((p for p in pair if p.method == "minibatch_sfl"), None)
        if scala and mini and scala.mse["attack"] and mini.mse["attack"]:
            ratios.append((scala.label, *(mean(scala.mse[a]) / mean(mini.mse[a]) for a in ATTACKS)))
    if ratios:
        lines += [
            "",
            "Concatenation (SCALA ÷ MiniBatch-SFL, the attackers' MSE; both train one server half on the round's "
            "uploads, SCALA on their concatenation with logit adjustment): "
            + "; ".join(f"{label}: {d:.2f} (decoder), {u:.2f} (UnSplit)" for label, d, u in ratios)
            + ".",
        ]
    return "\n".join(lines) + "\n"


def frontier_section() -> str:
    parts = []
    for dataset, name in DATASETS.items():
        points = dataset_points(dataset)
        if not points:
            parts.append(f"## {name}\n\nNot run yet.\n")
            continue
        figure = f"privacy_frontier/{dataset}_frontier.png"
        parts.append(f"## {name}\n\n![frontier, {dataset}]({figure})\n\n{table(points)}\n{readings(points)}")
    body = "\n".join(parts)
    return f"""# Privacy-accuracy frontier: four split methods, four defences at three strengths, two attacks

SCALA, MiniBatch-SFL, SplitFedV1 and SFLLocalLoss, each without a defence and with NoPeek (α = 10, 100, 1000), a `tanh`
bound with Laplace noise (b = 0.1, 0.3, 1), a bottleneck at the cut (16, 4, 1 channels) or SCALA-PE's inversion
regulariser (γ = 0.3, 1, 3; τ = 0.5 on digits, 0.1 on the 28×28 datasets, where the clients' decoders stay near or
below 0.5: SSIM ≤ 0.32 on MNIST-5k, ≤ 0.54 on Fashion-MNIST), 3 seeds (identical client shards and draws per
seed). Every run's final client half is attacked twice, seeing the uploads as defended: the decoder of `lightning-sfl
attack` (trained on (activation, image) pairs of the training split, scored on the test split) and UnSplit (no data,
no weights: 32 test images and a clone of the client half optimised together; the clone's accuracy with the real
server half is its stealing score). MSE and SSIM are per test image on [0, 1], averaged; accuracy is the final test
accuracy of the global model; mean ± std over seeds.

Produced by (from the repository root, with the package installed):

```bash
bash docs/results/run_privacy_frontier.sh
```

Each setting folder (`privacy_frontier/<dataset>/<defence>/`) holds compare's `results.md`, `accuracy.png` and
`metrics.csv`, and both attacks' scores per run in `attacks.csv`; `python docs/results/summarize_frontier.py` rebuilds
this text and the plots from them.

{body}"""


def frontier_summary() -> str:
    """The frontier's readings per dataset, with a link to its README, for ``docs/results/privacy.md``."""
    parts = []
    for dataset, name in DATASETS.items():
        points = dataset_points(dataset)
        text = readings(points) if points else "Not run yet.\n"
        parts.append(f"**{name}.** " + (text or "Partly run (the readings need every method's undefended runs).\n"))
    body = "\n".join(parts)
    return f"""## Privacy-accuracy frontier (issue 36)

Four split methods × (no defence, NoPeek, tanh + Laplace noise, a bottleneck, SCALA-PE's regulariser, each at three
strengths) × 3 seeds, attacked by the decoder and by UnSplit: `bash docs/results/run_privacy_frontier.sh`; every
table and the plots in [privacy_frontier/README.md](privacy_frontier/README.md).

{body}"""


def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    for folder in sorted(HERE.glob("*/*/metrics.csv")):
        gather_attacks(folder.parent, write=True)
    for dataset in DATASETS:
        points = dataset_points(dataset)
        if points:
            plot(dataset, points)
    (HERE / "README.md").write_text(frontier_section().replace("](privacy_frontier/", "]("))
    print(f"wrote {HERE / 'README.md'}")


if __name__ == "__main__":
    main()
