"""Per-round records of a run (pure): reading Lightning's ``metrics.csv``, per-run statistics, and the
combined ``metrics.csv`` of a comparison (:func:`write_metrics_csv` / :func:`read_metrics_csv`).

A record is a plain ``{"round": r, "<logged name>": value, ...}`` dict; a run is a :class:`RunResult`.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ACC_KEY = "test/acc"
ROUND_BYTES_KEY = "comm/total_bytes"
CUM_BYTES_KEY = "comm/cumulative_bytes"
TIME_KEY = "clock/elapsed_seconds"
#: Columns of the combined ``metrics.csv`` with a fixed name -> the logged metric they hold.
CSV_COLUMNS = {"test_acc": ACC_KEY, "round_bytes": ROUND_BYTES_KEY, "cumulative_bytes": CUM_BYTES_KEY}
#: Columns of the combined ``metrics.csv`` that identify the run and the round.
_ID_COLUMNS = ("method", "seed", "status", "round")


def _to_float(value: str | None) -> float | None:
    if value is None or value == "":
        return None
    try:
        return float(value)
    except ValueError:
        return None


def read_lightning_metrics(path: str | os.PathLike) -> list[dict[str, float]]:
    """Per-round records from a Lightning ``CSVLogger`` ``metrics.csv``.

    Lightning writes the evaluation metrics (``test/acc``, ``round``, …) and the epoch-level training metrics
    (``comm/*``, ``train/*``) of one round in separate rows; they are merged by round (``round`` when logged,
    else ``epoch + 1``). Returns ``[{"round": r, "<logged name>": value, ...}]`` sorted by round, without the
    ``step``/``epoch`` bookkeeping columns.
    """
    by_round: dict[int, dict[str, float]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            values = {k: v for k, v in ((k, _to_float(v)) for k, v in row.items() if k) if v is not None}
            if "round" in values and math.isfinite(values["round"]):
                r = int(round(values["round"]))
            elif "epoch" in values:
                r = int(values["epoch"]) + 1
            else:
                continue
            if r < 1:  # round 0 = before training (e.g. the partition report)
                continue
            record = by_round.setdefault(r, {})
            record.update({k: v for k, v in values.items() if k not in ("round", "epoch", "step")})
    return [{"round": r, **by_round[r]} for r in sorted(by_round)]


def divergence_round(records: Sequence[dict[str, float]]) -> int | None:
    """First round with a non-finite training loss or test accuracy, ``None`` if there is none."""
    for rec in records:
        for key, value in rec.items():
            if ((key.startswith("train/") and "loss" in key) or key == ACC_KEY) and not math.isfinite(value):
                return int(rec["round"])
    return None


def _acc_records(records: Sequence[dict[str, float]]) -> list[dict[str, float]]:
    return [r for r in records if ACC_KEY in r]


@dataclass
class RunResult:
    """One ``fit`` run: its per-round records and, if it crashed, the error message."""

    method: str
    seed: int
    records: list[dict[str, float]] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def acc_records(self) -> list[dict[str, float]]:
        return _acc_records(self.records)

    @property
    def diverged_at(self) -> int | None:
        return divergence_round(self.records)

    @property
    def status(self) -> str:
        """``failed`` (crashed or nothing evaluated), ``diverged`` (finished, non-finite values) or ``ok``."""
        if self.error is not None or not self.acc_records:
            return "failed"
        return "diverged" if self.diverged_at is not None else "ok"

    @property
    def completed(self) -> bool:
        return self.status != "failed"

    @property
    def failure_message(self) -> str:
        """Why a failed run failed: its error, else the absence of any test accuracy."""
        return self.error or "no test accuracy was logged"


def final_acc(records: Sequence[dict[str, float]]) -> float:
    """Test accuracy after the last evaluated round."""
    return _acc_records(records)[-1][ACC_KEY]


def best_acc(records: Sequence[dict[str, float]]) -> float:
    """Best test accuracy over the rounds (NaN rounds ignored; NaN if all are)."""
    accs = [r[ACC_KEY] for r in _acc_records(records) if math.isfinite(r[ACC_KEY])]
    return max(accs) if accs else math.nan


@dataclass(frozen=True)
class Reach:
    """Where a run first reached a target accuracy: the round, the simulated time at its end
    (``clock/elapsed_seconds``) and the bytes exchanged until then (``comm/cumulative_bytes``; ``None``: not logged)."""

    round: int
    seconds: float | None
    bytes: float | None


def reach(records: Sequence[dict[str, float]], target: float) -> Reach | None:
    """:class:`Reach` of the first round whose test accuracy is ``>= target``; ``None`` if never reached.

    >>> reach([{"round": 1, "test/acc": 0.5}, {"round": 2, "test/acc": 0.9, "clock/elapsed_seconds": 8.0}], 0.8)
    Reach(round=2, seconds=8.0, bytes=None)
    """
    for rec in _acc_records(records):
        if rec[ACC_KEY] >= target:
            return Reach(int(rec["round"]), rec.get(TIME_KEY), rec.get(CUM_BYTES_KEY))
    return None


def rounds_to_target(records: Sequence[dict[str, float]], target: float) -> int | None:
    """First round whose test accuracy is ``>= target``; ``None`` if never reached."""
    hit = reach(records, target)
    return None if hit is None else hit.round


def total_bytes(records: Sequence[dict[str, float]]) -> float | None:
    """Bytes exchanged over the whole run: the last ``comm/cumulative_bytes`` (else the sum of per-round)."""
    cumulative = [r[CUM_BYTES_KEY] for r in records if CUM_BYTES_KEY in r]
    if cumulative:
        return cumulative[-1]
    per_round = [r[ROUND_BYTES_KEY] for r in records if ROUND_BYTES_KEY in r]
    return sum(per_round) if per_round else None


def write_metrics_csv(results: Sequence[RunResult], path: Path) -> None:
    """One row per run and round: method, seed, status, round, test_acc, round_bytes, cumulative_bytes and
    every other logged metric under its logged name."""
    extra = sorted(
        {k for res in results for rec in res.records for k in rec} - set(CSV_COLUMNS.values()) - {"round"},
        key=lambda k: (k.rstrip("0123456789"), int(re.search(r"\d*$", k).group() or -1)),
    )
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*_ID_COLUMNS, *CSV_COLUMNS, *extra])
        for res in results:
            for rec in res.records:
                values = [rec.get(logged, rec.get(col)) for col, logged in CSV_COLUMNS.items()]
                values += [rec.get(k) for k in extra]
                writer.writerow(
                    [res.method, res.seed, res.status, int(rec["round"]), *["" if v is None else v for v in values]]
                )


#: The error of a failed run read back from a ``metrics.csv`` (which keeps its status, not its message).
FAILED_IN_CSV = "failed (status read back from metrics.csv, which does not keep the message)"


def read_metrics_csv(path: Path) -> list[RunResult]:
    """The runs of a ``metrics.csv`` written by :func:`write_metrics_csv` (failed runs without rows are lost)."""
    runs: dict[tuple[str, int], RunResult] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["method"], int(row["seed"]))
            res = runs.setdefault(key, RunResult(*key))
            if row["status"] == "failed":  # a run that crashed after logging rows stays failed
                res.error = FAILED_IN_CSV
            rec = {"round": float(row["round"])}
            for k, v in row.items():
                if k not in _ID_COLUMNS and (value := _to_float(v)) is not None:
                    rec[CSV_COLUMNS.get(k, k)] = value
            res.records.append(rec)
    return list(runs.values())
