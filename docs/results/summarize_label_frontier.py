"""Tables and plots of the label frontier (``docs/results/run_label_frontier.sh``, issue 58) from its folders:
``docs/results/label_frontier/<dataset>/<task>/<arm>/`` (compare's ``metrics.csv``; ``labels.csv``, gathered here
from each run's ``labels/metrics.json`` while the runs are on disk).

    python docs/results/summarize_label_frontier.py      # writes label_frontier/tables.md and <dataset>_<task>.png

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
ARMS = {
    "plain": "plain (labels sent)",
    "plain_rr2": "plain, RR ε = 2",
    "plain_rr0.5": "plain, RR ε = 0.5",
    "u": "U-shaped",
    "u_noise1": "U-shaped, noise t = 1",
    "u_noise4": "U-shaped, noise t = 4",
    "u_maxnorm": "U-shaped, max-norm",
    "u_rr2": "U-shaped, RR ε = 2",
    "u_rr0.5": "U-shaped, RR ε = 0.5",
}
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
    colours = plt.get_cmap("tab10")
    for i, (arm, arm_name) in enumerate(ARMS.items()):
        for method, marker in markers.items():
            values = data.get((method, arm))
            if not values or not values.get(score) or not values.get(accuracy):
                continue
            x, y = statistics.fmean(values[accuracy]) * 100, statistics.fmean(values[score])
            ax.scatter(x, y, marker=marker, color=colours(i), label=arm_name if method == "splitfedv1" else None)
    for method, marker in markers.items():
        ax.scatter([], [], marker=marker, color="grey", label=METHODS[method])
    ax.set_xlabel(("balanced " if task == "binary" else "") + "test accuracy (%)")
    ax.set_ylabel(HEADERS[score] + (" (0.5: chance)" if task == "binary" else ""))
    ax.set_title(f"Label frontier, {dataset}, {'class 0 against the rest' if task == 'binary' else 'ten classes'}")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parts = []
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
    (ROOT / "tables.md").write_text("\n".join(parts))
    print(f"wrote {ROOT / 'tables.md'} and {len(parts)} plot(s)")


if __name__ == "__main__":
    main()
