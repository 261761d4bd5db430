"""The human-readable outputs of a comparison: ``results.md`` (command, settings, table, failures),
``accuracy.png`` (test accuracy vs round per method, mean over seeds with a min-max band), ``accuracy_time.png`` (the
same against simulated time) and ``accuracy_traffic.png`` (against the bytes exchanged). The settings are read back
from the runs' resolved configs, so they show what the runs actually used."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from .config import LINKED_MODEL_ARGS, LOG_SUBDIR, Plan
from .options import command_line
from .records import RunResult
from .summary import (
    MethodSummary,
    accuracy_curves,
    describe_data,
    format_percent,
    format_table,
    plural,
    targets_of,
)

#: The end of the files paragraph of ``results.md`` when the runs log to W&B.
WANDB_FILES = "; `wandb/`: its W&B run), `wandb/` (the comparison's own W&B run; W&B's messages in `log.txt`)."
X_LABELS = {"round": "round", "seconds": "simulated time (s)", "bytes": "bytes exchanged (MB)"}


def plot_accuracy(results: Sequence[RunResult], path: Path, title: str, target_acc=None, x: str = "round") -> None:
    """Test accuracy (%) vs round (``x="round"``), vs simulated time (``x="seconds"``: the mean over seeds of
    ``clock/elapsed_seconds`` at each round's end) or vs traffic (``x="bytes"``: of ``comm/cumulative_bytes``, in MB)
    per method: mean over seeds, shaded min-max band; a dashed line at each target accuracy."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(8, 5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    curves = accuracy_curves(results)
    for method, c in curves.items():
        n = int(max(c["n"]))
        along = [v / 1e6 for v in c[x]] if x == "bytes" else c[x]
        (line,) = ax.plot(along, [100 * v for v in c["mean"]], label=f"{method} ({plural(n, 'seed')})")
        if n > 1:
            lo, hi = [100 * v for v in c["min"]], [100 * v for v in c["max"]]
            ax.fill_between(along, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    for target in targets_of(target_acc):
        ax.axhline(100 * target, color="grey", linestyle="--", linewidth=0.8, label=f"target {format_percent(target)}")
    if not curves:
        ax.text(0.5, 0.5, "no completed runs", ha="center", va="center", transform=ax.transAxes)
    if x == "round":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(X_LABELS[x])
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if curves or targets_of(target_acc):
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)


def _resolved_config(run_dir: Path) -> dict:
    path = run_dir / LOG_SUBDIR / "config.yaml"  # written by LightningCLI: the fully resolved config of the run
    if not path.exists():
        path = run_dir / "run_config.yaml"
    try:
        with open(path) as f:
            config = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):  # none, or not readable: the plan's config is shown
        return {}
    return config if isinstance(config, dict) else {}


def _fmt_value(v: Any) -> str:
    return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()


def _settings(plan: Plan, results: Sequence[RunResult]) -> tuple[dict, dict, dict[str, dict]]:
    """(data, trainer, model init_args per method) from the resolved configs, completed runs first."""
    status = {(r.method, r.seed): r.completed for r in results}
    specs = sorted(plan.runs, key=lambda s: not status.get((s.method, s.seed), False))  # stable: completed first
    data, trainer, models = {}, {}, {}
    for spec in specs:  # a run without a folder (kept by --add): the config it was planned with
        cfg = _resolved_config(spec.run_dir) or plan.configs.get(spec.method, {})
        if not cfg:
            continue
        if not data and cfg.get("data"):
            data, trainer = dict(cfg["data"]), dict(cfg.get("trainer") or {})
        if spec.method not in models:
            models[spec.method] = dict((cfg.get("model") or {}).get("init_args") or {})
    if not data:
        data, trainer = dict(plan.base.get("data") or {}), dict(plan.base.get("trainer") or {})
    return data, trainer, models


def write_report(
    args: argparse.Namespace, plan: Plan, results: Sequence[RunResult], rows: Sequence[MethodSummary], out: Path
) -> None:
    """Write ``results.md`` (:func:`results_markdown`) and ``accuracy.png`` (:func:`plot_accuracy`) into ``out``."""
    (out / "results.md").write_text(results_markdown(args, plan, results, rows))
    data, _, _ = _settings(plan, results)
    title = f"Test accuracy: {describe_data(data)} ({plural(len(args.seeds), 'seed')})"
    plot_accuracy(results, out / "accuracy.png", title, args.target_acc)
    curves = accuracy_curves(results)
    for axis, name in (("seconds", "accuracy_time.png"), ("bytes", "accuracy_traffic.png")):
        if curves and all(not math.isnan(t) for c in curves.values() for t in c[axis]):
            plot_accuracy(results, out / name, title, args.target_acc, x=axis)


def results_markdown(
    args: argparse.Namespace, plan: Plan, results: Sequence[RunResult], rows: Sequence[MethodSummary]
) -> str:
    data, trainer, models = _settings(plan, results)
    title = describe_data(data)
    shown_data = {k: v for k, v in data.items() if k not in ("seed", "root", "download")}
    lines = [
        f"# Comparison: {title}",
        "",
        "Produced by:",
        "",
        "```bash",
        command_line(args),
        "```",
        "",
        "## Settings",
        "",
        f"- configs: {', '.join(f'`{c}`' for c in args.config)}",
        "- data: " + ", ".join(f"{k}={_fmt_value(v)}" for k, v in shown_data.items()),
        f"- rounds (`trainer.max_epochs`): {trainer.get('max_epochs', '?')}",
        f"- seeds: {', '.join(map(str, args.seeds))} (each sets `--seed_everything` and `--data.seed`: for a given "
        "seed every method sees the same client shards and the same per-round client and minibatch draws)",
        f"- overrides: {' '.join(f'`{o}`' for o in args.overrides) if args.overrides else 'none'}",
        "- target accuracy: " + (", ".join(map(format_percent, targets_of(args.target_acc))) or "none"),
        "- methods:",
    ]
    for method, path in plan.classes.items():
        init = {k: v for k, v in models.get(method, {}).items() if k not in LINKED_MODEL_ARGS}
        line = f"  - `{method}` (`{path}`): " + (", ".join(f"{k}={_fmt_value(v)}" for k, v in init.items()) or "—")
        if plan.dropped.get(method):
            line += "; not accepted by this class, dropped: " + ", ".join(f"`{d}`" for d in plan.dropped[method])
        lines.append(line)
    lines += [
        "",
        "## Results",
        "",
        format_table(rows, args.target_acc),
        "",
        "runs: completed/started. Over the completed runs (diverged ones included): final = test accuracy after "
        "the last round, best = maximum over rounds, mean ± sample std over seeds"
        + (
            "; rounds to target = first round with test accuracy ≥ target, time to target = the simulated time "
            "(`clock/elapsed_seconds`) at that round's end, traffic to target = the bytes exchanged until then "
            "(`comm/cumulative_bytes`), each a mean over the seeds reaching it"
            if targets_of(args.target_acc)
            else ""
        )
        + "; total comm = bytes exchanged over the whole run (last `comm/cumulative_bytes`), mean over seeds, "
        "1 MB = 10^6 B.",
    ]
    notes = []
    for row in rows:
        notes += [f"- `{row.method}` seed {s}: failed: {msg}" for s, msg in row.failures]
        notes += [f"- `{row.method}` seed {s}: diverged (non-finite values from round {r})" for s, r in row.diverged]
    if notes:
        lines += ["", "## Failures and divergences", "", *notes]
    lines += [
        "",
        "Files: `metrics.csv` (per-round metrics of every run), `accuracy.png` (test accuracy vs round, mean over "
        "seeds, band: min-max), `accuracy_time.png` (the same against the simulated time `clock/elapsed_seconds`, "
        "mean over seeds, when the runs logged it), `accuracy_traffic.png` (against the bytes exchanged, "
        "`comm/cumulative_bytes`, when logged), `runs/<method>/seed<seed>/` (`command.txt`: the equivalent "
        "`lightning-sfl fit` command; `run_config.yaml`: its config; `logs/`: Lightning's `metrics.csv` and resolved "
        "`config.yaml`" + (WANDB_FILES if getattr(args, "wandb", True) else ")."),
        "",
    ]
    return "\n".join(lines)
