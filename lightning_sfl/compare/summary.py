"""Aggregation over seeds and formatting (pure): one :class:`MethodSummary` per method, the markdown table,
the accuracy curves for the plot, and short descriptions of a data setting."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from lightning_sfl.class_paths import dataset_name

from .records import ACC_KEY, CUM_BYTES_KEY, TIME_KEY, Reach, RunResult, best_acc, final_acc, reach, total_bytes


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    if not values:
        raise ValueError("mean_std of no values")
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else 0.0)


@dataclass
class MethodSummary:
    """The numbers of one table row; statistics are over the completed runs (``ok`` or ``diverged``)."""

    method: str
    seeds: list[int]
    final_acc: list[float]
    best_acc: list[float]
    reached: dict[float, list[Reach | None]]
    total_bytes: list[float]
    rounds: list[int]
    failures: list[tuple[int, str]]
    diverged: list[tuple[int, int]]
    #: Some completed run logged the simulated time (``clock/elapsed_seconds``).
    timed: bool = False
    #: Some completed run logged the bytes exchanged so far (``comm/cumulative_bytes``).
    counted: bool = False

    @property
    def n_completed(self) -> int:
        return len(self.final_acc)

    @property
    def rounds_to_target(self) -> list[int | None]:
        """Rounds to the first target, per completed run (``None``: not reached); ``[]`` without a target."""
        if not self.reached:
            return []
        return [None if hit is None else hit.round for hit in next(iter(self.reached.values()))]


def targets_of(target_acc: float | Sequence[float] | None) -> list[float]:
    """The target accuracies as a list (``None``: none; one number: one)."""
    if target_acc is None:
        return []
    return [float(target_acc)] if isinstance(target_acc, (int, float)) else [float(t) for t in target_acc]


def summarize(results: Iterable[RunResult], target_acc: float | Sequence[float] | None = None) -> list[MethodSummary]:
    """One :class:`MethodSummary` per method, in order of first appearance; ``target_acc``: one or more target
    accuracies (fractions), each reached where a run first has test accuracy ``>=`` it."""
    targets = targets_of(target_acc)
    by_method: dict[str, list[RunResult]] = {}
    for res in results:
        by_method.setdefault(res.method, []).append(res)
    rows = []
    for method, runs in by_method.items():
        runs = sorted(runs, key=lambda r: r.seed)
        done = [r for r in runs if r.completed]
        rows.append(
            MethodSummary(
                method=method,
                seeds=[r.seed for r in runs],
                final_acc=[final_acc(r.records) for r in done],
                best_acc=[best_acc(r.records) for r in done],
                reached={t: [reach(r.records, t) for r in done] for t in targets},
                total_bytes=[b for b in (total_bytes(r.records) for r in done) if b is not None],
                rounds=[int(r.acc_records[-1]["round"]) for r in done],
                failures=[(r.seed, r.failure_message) for r in runs if not r.completed],
                diverged=[(r.seed, r.diverged_at) for r in done if r.diverged_at is not None],
                timed=any(TIME_KEY in rec for r in done for rec in r.records),
                counted=any(CUM_BYTES_KEY in rec for r in done for rec in r.records),
            )
        )
    return rows


def format_bytes(n: float) -> str:
    """Bytes as megabytes with one decimal, 1 MB = 10**6 B: ``12_345_678 -> '12.3 MB'``."""
    return f"{n / 1e6:.1f} MB"


def format_acc(values: Sequence[float]) -> str:
    """Accuracies (fractions) as ``'mean ± std'`` in percent with 2 decimals; ``'—'`` for none."""
    if not values:
        return "—"
    mean, std = mean_std([100.0 * v for v in values])
    return f"{mean:.2f} ± {std:.2f}"


def format_rounds(values: Sequence[int | None]) -> str:
    """Mean round over the seeds reaching the target; ``' (k/n seeds)'`` if not all do, ``'—'`` if none."""
    return format_reached(values, "{:.1f}")


def format_reached(values: Sequence[float | None], fmt: str) -> str:
    """Mean (``fmt``) over the seeds with a value; ``' (k/n seeds)'`` if not all have one, ``'—'`` if none."""
    reached = [v for v in values if v is not None]
    if not reached:
        return "—"
    text = fmt.format(statistics.fmean(reached))
    return text if len(reached) == len(values) else f"{text} ({len(reached)}/{len(values)} seeds)"


def format_percent(fraction: float) -> str:
    """A fraction as a percentage without trailing zeros: ``0.9 -> '90%'``."""
    return f"{100 * fraction:g}%"


def plural(n: int, word: str) -> str:
    """``'1 seed'``, ``'2 seeds'``."""
    return f"{n} {word}{'s' * (n != 1)}"


def _columns(rows: Sequence[MethodSummary]) -> tuple[bool, bool]:
    """Whether the table shows time to target and traffic to target (some run logged them)."""
    return any(r.timed for r in rows), any(r.counted for r in rows)


def table_header(target_acc, rows: Sequence[MethodSummary] = ()) -> list[str]:
    """Columns: method, runs, final and best accuracy; per target: rounds, simulated time (when logged) and
    traffic (when logged) to reach it; total traffic; notes."""
    timed, counted = _columns(rows)
    cols = ["method", "runs", "final test acc (%)", "best test acc (%)"]
    for target in targets_of(target_acc):
        at = f"≥ {format_percent(target)}"
        cols.append(f"rounds to {at}")
        cols += [f"time to {at} (s)"] if timed else []
        cols += [f"traffic to {at} (MB)"] if counted else []
    return [*cols, "total comm (MB)", "notes"]


def summary_cells(row: MethodSummary, target_acc, rows: Sequence[MethodSummary] = ()) -> list[str]:
    """The cells of one table row (see :func:`table_header`; ``rows``: the whole table, which decides the time and
    traffic columns, as in the header: none without it)."""
    timed, counted = _columns(rows)
    cells = [f"`{row.method}`", f"{row.n_completed}/{len(row.seeds)}", format_acc(row.final_acc)]
    cells.append(format_acc(row.best_acc))
    for target in targets_of(target_acc):
        hits = row.reached.get(target, [])
        cells.append(format_rounds([None if h is None else h.round for h in hits]))
        if timed:
            cells.append(format_reached([None if h is None else h.seconds for h in hits], "{:.1f}"))
        if counted:
            mb = [None if h is None or h.bytes is None else h.bytes / 1e6 for h in hits]
            cells.append(format_reached(mb, "{:.1f}"))
    cells.append(format_bytes(statistics.fmean(row.total_bytes)) if row.total_bytes else "—")
    notes = []
    if row.failures:
        notes.append("failed: seed " + ", ".join(str(s) for s, _ in row.failures))
    if row.diverged:
        notes.append("diverged: seed " + ", ".join(str(s) for s, _ in row.diverged))
    cells.append("; ".join(notes))
    return cells


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def format_table(rows: Sequence[MethodSummary], target_acc: float | Sequence[float] | None = None) -> str:
    """Markdown table, one row per method."""
    header = table_header(target_acc, rows)
    lines = [_md_row(header), "|" + "|".join("---" for _ in header) + "|"]
    lines += [_md_row(summary_cells(r, target_acc, rows)) for r in rows]
    return "\n".join(lines)


def accuracy_curves(results: Iterable[RunResult]) -> dict[str, dict[str, list[float]]]:
    """Per method (completed runs only): ``round``, ``mean``, ``min``, ``max`` test accuracy and ``n`` runs
    per round (rounds evaluated by at least one run; NaN values ignored), ``seconds``: the mean simulated time
    (``clock/elapsed_seconds``) at the end of the round over the runs that logged it, and ``bytes``: the mean
    ``comm/cumulative_bytes`` likewise (NaN where none did)."""
    per_method: dict[str, dict[int, list[float]]] = {}
    axes: dict[str, dict[str, dict[int, list[float]]]] = {"seconds": {}, "bytes": {}}
    for res in results:
        if not res.completed:
            continue
        rounds = per_method.setdefault(res.method, {})
        for rec in res.acc_records:
            if math.isfinite(rec[ACC_KEY]):
                rounds.setdefault(int(rec["round"]), []).append(rec[ACC_KEY])
                for axis, key in (("seconds", TIME_KEY), ("bytes", CUM_BYTES_KEY)):
                    if key in rec:
                        axes[axis].setdefault(res.method, {}).setdefault(int(rec["round"]), []).append(rec[key])
    curves = {}
    for method, rounds in per_method.items():
        order = sorted(rounds)
        along = {axis: values.get(method, {}) for axis, values in axes.items()}
        curves[method] = {
            **{a: [statistics.fmean(v[r]) if r in v else math.nan for r in order] for a, v in along.items()},
            "round": [float(r) for r in order],
            "mean": [statistics.fmean(rounds[r]) for r in order],
            "min": [min(rounds[r]) for r in order],
            "max": [max(rounds[r]) for r in order],
            "n": [float(len(rounds[r])) for r in order],
        }
    return curves


def describe_data(data: dict[str, Any]) -> str:
    """Short description of a data setting: ``'digits, K=20, quantity α=2, ρ=0.25, B=64'``."""
    if not data:
        return "unknown setting"
    skew = {"quantity": ("α", "alpha"), "dirichlet": ("β", "beta"), "shards": ("shards/client", "shards_per_client")}
    part = str(data.get("partition", "?"))
    if part in skew and skew[part][1] in data:
        part = f"{part} {skew[part][0]}={data[skew[part][1]]}"
    bits = [dataset_name(data.get("dataset", "?"))]
    bits += [f"K={data['num_clients']}"] if "num_clients" in data else []
    bits.append(part)
    bits += [f"ρ={data['participation']}"] if "participation" in data else []
    bits += [f"B={data['batch_size']}"] if "batch_size" in data else []
    return ", ".join(bits)
