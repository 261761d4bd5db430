"""Tables and plots of the label frontier (``docs/results/run_label_frontier.sh``, issue 58) from its folders:
``docs/results/label_frontier/<dataset>/<task>/<arm>/`` (compare's ``metrics.csv``; ``labels.csv``, gathered here
from each run's ``labels/metrics.json`` while the runs are on disk).

    python docs/results/summarize_label_frontier.py      # writes label_frontier/README.md and <dataset>_<task>.png

Per dataset and task, per method and arm: the final test accuracy (binary: also the balanced accuracy, the mean of the
two classes' recalls, since predicting "the rest" scores about 90 %) and each attack's score, mean ± std over the
seeds; a plot of the accuracy against the main attack's score (ten classes: the clusters' label accuracy; binary: the
norm attack's AUC).
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).parent / "label_frontier"
METHODS = {"splitfedv1": "SplitFedV1", "scala": "SCALA", "minibatch_sfl": "MiniBatch-SFL"}
SEEDS = (0, 1, 2)
ARMS = {
    "plain": "plain (labels sent)",
    "plain_rr2": "plain, RR ε = 2",
    "plain_rr0.5": "plain, RR ε = 0.5",
    "u": "U-shaped",
    "u_noise1": "U-shaped, noise t = 1",
    "u_noise4": "U-shaped, noise t = 4",
    "u_maxnorm": "U-shaped, max-norm",
    "u_maxnorm_lr": "U-shaped, max-norm, lr ÷ 5",
    "u_pooled": "U-shaped, pooled P_s (eq. 14)",
    "u_rr2": "U-shaped, RR ε = 2",
    "u_rr0.5": "U-shaped, RR ε = 0.5",
}
#: The arms that run fewer methods: eq. 14's pooled prior is SCALA's.
ARM_METHODS = {"u_pooled": ("scala",)}
SCORES = {
    "ten": ["cluster_accuracy", "known_tail_accuracy", "completion_accuracy", "histogram_l1"],
    "binary": ["norm_auc", "direction_auc", "cluster_accuracy", "known_tail_accuracy", "completion_accuracy"],
}
HEADERS = {
    "norm_auc": "norm AUC",
    "direction_auc": "direction AUC",
    "cluster_accuracy": "clusters (acc.)",
    "known_tail_accuracy": "known tail (acc.)",
    "completion_accuracy": "completion (acc.)",
    "histogram_l1": "histogram L1",
}
MAIN_SCORE = {"ten": "cluster_accuracy", "binary": "norm_auc"}


def final_accuracies(folder: Path) -> dict[tuple[str, int], dict[str, float]]:
    """``(method, seed) -> {"acc": ..., "balanced": ...}`` of each finished run's last round in compare's
    ``metrics.csv`` (``balanced``: the mean of the per-class accuracies, where they were logged)."""
    out: dict[tuple[str, int], dict[str, float]] = {}
    with open(folder / "metrics.csv") as f:
        for row in csv.DictReader(f):
            if row["status"] != "ok" or not row.get("test_acc"):
                continue
            classes = [float(v) for k, v in row.items() if k.startswith("test/acc_class_") and v]
            entry = {"acc": float(row["test_acc"]), "round": int(row["round"])}
            if classes:
                entry["balanced"] = sum(classes) / len(classes)
            key = (row["method"], int(row["seed"]))
            if key not in out or entry["round"] >= out[key]["round"]:
                out[key] = entry
    return out


#: The columns of an arm's ``labels.csv``: every run's label-attack scores (the runs themselves are not committed).
LABEL_COLUMNS = ["method", "seed", "sent", *dict.fromkeys(SCORES["binary"] + SCORES["ten"]), "norm_auc_per_batch"]


def gather(folder: Path) -> None:
    """``labels.csv`` of an arm's folder from its runs' ``labels/metrics.json`` (where the runs are on disk)."""
    found = sorted((folder / "runs").glob("*/seed*/labels/metrics.json"))
    if not found:
        return
    with open(folder / "labels.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, LABEL_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for path in found:
            scores = json.loads(path.read_text())
            writer.writerow(
                {**scores, "method": path.parents[2].name, "seed": path.parents[1].name.removeprefix("seed")}
            )


def collect(dataset: str, task: str) -> dict[tuple[str, str], dict[str, list[float]]]:
    """``(method, arm) -> {quantity: [one value per seed]}`` of one dataset and task."""
    out: dict[tuple[str, str], dict[str, list[float]]] = {}
    for arm in ARMS:
        folder = ROOT / dataset / task / arm
        if not (folder / "metrics.csv").exists():
            continue
        gather(folder)
        accuracies = final_accuracies(folder)
        with open(folder / "labels.csv", newline="") as f:
            scores = {(r["method"], int(r["seed"])): r for r in csv.DictReader(f)}
        for (method, seed), acc in sorted(accuracies.items()):
            if (method, seed) not in scores:
                continue
            values = out.setdefault((method, arm), {})
            for key, value in {**acc, **{k: scores[method, seed].get(k) for k in SCORES[task]}}.items():
                if value not in (None, "") and key != "round":
                    values.setdefault(key, []).append(float(value))
    return out


def mean_std(values: list[float] | None, scale: float = 1.0, digits: int = 3) -> str:
    if not values:
        return "–"
    mean = statistics.fmean(values) * scale
    std = statistics.pstdev(values) * scale if len(values) > 1 else 0.0
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def table(dataset: str, task: str, data) -> str:
    accuracy = ["test accuracy (%)"] + (["balanced accuracy (%)"] if task == "binary" else [])
    head = ["method", "arm", *accuracy, *(HEADERS[k] for k in SCORES[task]), "seeds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method, name in METHODS.items():
        for arm, arm_name in ARMS.items():
            values = data.get((method, arm))
            if not values:
                continue
            cells = [name, arm_name, mean_std(values.get("acc"), 100, 2)]
            if task == "binary":
                cells.append(mean_std(values.get("balanced"), 100, 2))
            cells += [mean_std(values.get(k)) for k in SCORES[task]]
            cells.append(str(len(values.get("acc", []))))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(dataset: str, task: str, data, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    score = MAIN_SCORE[task]
    accuracy = "balanced" if task == "binary" else "acc"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    markers = {"splitfedv1": "o", "scala": "s", "minibatch_sfl": "^"}
    palette = [*plt.get_cmap("tab10").colors, "black"]  # one colour an arm

    def colours(i):
        return palette[i % len(palette)]

    from matplotlib.patches import Patch

    legend = []  # an arm a colour, a method a marker
    for i, (arm, arm_name) in enumerate(ARMS.items()):
        for method, marker in markers.items():
            values = data.get((method, arm))
            if not values or not values.get(score) or not values.get(accuracy):
                continue
            x, y = statistics.fmean(values[accuracy]) * 100, statistics.fmean(values[score])
            ax.scatter(x, y, marker=marker, color=colours(i))
            if not legend or legend[-1].get_label() != arm_name:
                legend.append(Patch(color=colours(i), label=arm_name))
    for method, marker in markers.items():
        legend.append(ax.scatter([], [], marker=marker, facecolors="none", edgecolors="black", label=METHODS[method]))
    ax.set_xlabel(("balanced " if task == "binary" else "") + "test accuracy (%)")
    ax.set_ylabel(HEADERS[score] + (" (0.5: chance)" if task == "binary" else ""))
    ax.set_title(f"Label frontier, {dataset}, {'class 0 against the rest' if task == 'binary' else 'ten classes'}")
    ax.legend(handles=legend, fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


INTRO = """# The label frontier: what the server learns of the labels, against accuracy

SplitFedV1, SCALA and MiniBatch-SFL, plain (the server receives the labels) and U-shaped (`--model.tail_point`: the
clients keep the tail and compute the loss; [the guide](../../guide/label-privacy.md)), undefended and under each
label defence at two strengths (`GradientNoise` t = 1, 4; `MaxNorm`; `RandomisedLabels` ε = 2, 0.5 on either
configuration), and U-shaped SCALA with eq. 14's pooled prior (`--model.pooled_label_counts`: the clients send their
batches' label counts), 3 seeds (identical client shards and draws per seed), on the dataset's ten classes and on
class 0 against the rest (`--data.binary_class 0`, about 10 % positives). Every run's final checkpoint is attacked by
`lightning-sfl attack --attack labels` (64 rows a client, 4 known labels a class): the norm and direction AUCs
(binary task), the gradients' clusters, the known-tail attack (the body's server averages the tails: it knows the
tail), supervised model completion and per-client histograms. Accuracy is the final test accuracy (binary: also the
balanced accuracy, the mean of the two classes' recalls); mean ± std over seeds.

Produced by (from the repository root, with the package installed; a frozen clone of the commit named below):

```bash
bash docs/results/run_label_frontier.sh
python docs/results/summarize_label_frontier.py
```

"""


def readings(dataset: str, data_ten, data_binary) -> list[str]:
    """The sentences the page states of one dataset, computed from its numbers."""

    def mean(task_data, method, arm, key):
        values = task_data.get((method, arm), {}).get(key)
        return statistics.fmean(values) if values else None

    def finished(task_data, method, arm):
        runs = len(task_data.get((method, arm), {}).get("acc", []))
        return "" if runs == len(SEEDS) else f"; over {runs} of {len(SEEDS)} runs, the others stopped"

    out = []
    for method, name in METHODS.items():
        plain, u = mean(data_ten, method, "plain", "acc"), mean(data_ten, method, "u", "acc")
        if plain is not None and u is not None:
            out.append(f"{name}: U-shaped costs {100 * (plain - u):+.2f} points of accuracy on ten classes "
                       f"({100 * plain:.2f} → {100 * u:.2f} %).")  # fmt: skip
    for method, name in METHODS.items():
        auc, cluster = mean(data_binary, method, "u", "norm_auc"), mean(data_ten, method, "u", "cluster_accuracy")
        maxnorm = mean(data_binary, method, "u_maxnorm", "norm_auc")
        balanced, balanced_maxnorm = (mean(data_binary, method, arm, "balanced") for arm in ("u", "u_maxnorm"))
        if None not in (auc, cluster, maxnorm, balanced, balanced_maxnorm):
            out.append(f"{name}, U-shaped and undefended: norm scoring reaches AUC {auc:.3f} on the binary task and "
                       f"the clusters {100 * cluster:.1f} % of the ten labels; under max-norm the norm AUC is "
                       f"{maxnorm:.3f}, at a balanced accuracy of {100 * balanced_maxnorm:.2f} % "
                       f"({100 * balanced:.2f} % undefended){finished(data_binary, method, 'u_maxnorm')}.")  # fmt: skip
    for method, name in METHODS.items():
        ten, ten_u = mean(data_ten, method, "u_maxnorm_lr", "acc"), mean(data_ten, method, "u", "acc")
        auc, balanced = (mean(data_binary, method, "u_maxnorm_lr", k) for k in ("norm_auc", "balanced"))
        if None not in (ten, ten_u, auc, balanced):
            out.append(f"{name}, U-shaped, max-norm at a fifth of the learning rate: {100 * ten:.2f} % on ten classes "
                       f"({100 * ten_u:.2f} % undefended, full rate){finished(data_ten, method, 'u_maxnorm_lr')}; "
                       f"on the binary task norm AUC {auc:.3f} at a balanced accuracy of {100 * balanced:.2f} %"
                       f"{finished(data_binary, method, 'u_maxnorm_lr')}.")  # fmt: skip
    plain, u, pooled = (mean(data_ten, "scala", arm, "acc") for arm in ("plain", "u", "u_pooled"))
    l1_u, l1_pooled = (mean(data_ten, "scala", arm, "histogram_l1") for arm in ("u", "u_pooled"))
    if None not in (plain, u, pooled, l1_u, l1_pooled):
        out.append(f"SCALA, U-shaped with eq. 14's pooled prior P_s (the clients send their batches' label counts): "
                   f"{100 * pooled:.2f} % on ten classes, against {100 * u:.2f} % without it and {100 * plain:.2f} % "
                   f"plain; the clients' histograms reach the server with L1 error {l1_pooled:.3f} "
                   f"({l1_u:.3f} from the clusters without it).")  # fmt: skip
    return out


def stopped(dataset: str) -> list[str]:
    """The runs that stopped on non-finite values, per task and arm, from compare's ``metrics.csv``."""
    out = []
    for task in ("ten", "binary"):
        for arm, arm_name in ARMS.items():
            path = ROOT / dataset / task / arm / "metrics.csv"
            if not path.exists():
                continue
            with open(path) as f:
                runs = {(r["method"], r["seed"]): r["status"] for r in csv.DictReader(f)}
            for method in ARM_METHODS.get(arm, METHODS):  # a run that stopped before its first round has no row at all
                for seed in SEEDS:
                    runs.setdefault((method, str(seed)), "stopped")
            failed = sorted(f"{METHODS[m]} seed {seed}" for (m, seed), status in runs.items() if status != "ok")
            if failed:
                out.append(f"{task}, {arm_name}: {len(failed)} of {len(runs)} runs stopped on non-finite values "
                           f"({', '.join(failed)}); their attack scores are left out of the means.")  # fmt: skip
    return out


def main(root: Path = ROOT, commit: str = "", machine: str = "") -> None:
    global ROOT
    ROOT = root
    parts, stated = [], []
    for dataset in ("digits", "fashion_mnist"):
        ten, binary = collect(dataset, "ten"), collect(dataset, "binary")
        if ten and binary:
            stated += [f"- {dataset}: {line}" for line in readings(dataset, ten, binary) + stopped(dataset)]
    for dataset in ("digits", "fashion_mnist"):
        for task in ("ten", "binary"):
            data = collect(dataset, task)
            if not data:
                continue
            picture = ROOT / f"{dataset}_{task}.png"
            plot(dataset, task, data, picture)
            parts.append(
                f"### {dataset}, {task}\n\n![{dataset}, {task}]({picture.name})\n\n{table(dataset, task, data)}\n"
            )
    made = (f", commit `{commit}`" if " " not in commit else f"; {commit}") if commit else ""  # a hash, or words
    where = f"Measured on {machine}{made}.\n\n" if machine else ""
    page = INTRO + where + "## Readings\n\n" + "\n".join(stated) + "\n\n## Tables\n\n" + "\n".join(parts)
    (ROOT / "README.md").write_text(page)
    print(f"wrote {ROOT / 'README.md'} and {len(parts)} plot(s)")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the study's folder (default: the committed one)")
    parser.add_argument("--commit", default="", help="the runs' commit (a hash, or words naming several)")
    parser.add_argument("--machine", default="", help="the machine, in words, with the date")
    args = parser.parse_args()
    main(args.root, args.commit, args.machine)
