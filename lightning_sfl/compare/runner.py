"""Running the planned ``fit`` runs: each one in this process (:func:`run_in_process`) or as a child
``lightning-sfl fit`` process (:func:`run_subprocess`), a crash recorded as the run's error; :func:`execute`
runs them all and prints one progress line per finished run."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from .config import DONE_MARKER, LOG_SUBDIR, RunSpec
from .records import RunResult, final_acc, read_lightning_metrics


class _Tee(io.TextIOBase):
    """Writes to a stream and keeps a copy (to recover jsonargparse's ``error:`` line on SystemExit)."""

    def __init__(self, stream, copy: io.StringIO) -> None:
        self.stream, self.copy = stream, copy

    def write(self, s: str) -> int:
        self.copy.write(s)
        return self.stream.write(s)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


_ERROR_LINE = re.compile(r"^(?:[\w.]+(?:Error|Exception|Interrupt)\b.*|.*\berror:.*)$")


def error_from_output(text: str) -> str | None:
    """The last exception or ``error:`` line of a run's output."""
    lines = [ln.strip() for ln in text.splitlines() if _ERROR_LINE.match(ln.strip())]
    return lines[-1][:500] if lines else None


def _collect(spec: RunSpec, error: str | None, seconds: float, keep_checkpoints: bool) -> RunResult:
    metrics = spec.run_dir / LOG_SUBDIR / "metrics.csv"
    records = []
    if metrics.exists():
        try:
            records = read_lightning_metrics(metrics)
        except (OSError, csv.Error) as exc:
            error = error or f"could not read {metrics}: {exc}"
    if not keep_checkpoints:
        shutil.rmtree(spec.run_dir / LOG_SUBDIR / "checkpoints", ignore_errors=True)
    if error is None and records and not spec.reuse:
        (spec.run_dir / DONE_MARKER).write_text("finished\n")
    return RunResult(spec.method, spec.seed, records, error, seconds)


def run_in_process(spec: RunSpec, keep_checkpoints: bool = False) -> RunResult:
    """Train one run in this process; an exception (or a parser exit) is recorded as the run's error."""
    from lightning_sfl.lightning_cli import SFLCLI

    captured = io.StringIO()
    error = None
    start = time.perf_counter()
    try:
        with contextlib.redirect_stderr(_Tee(sys.stderr, captured)):
            SFLCLI(args=spec.fit_args)
    except SystemExit as exc:
        if exc.code not in (0, None):
            error = error_from_output(captured.getvalue()) or f"exited with code {exc.code}"
    except Exception as exc:  # a method may crash; the comparison goes on
        error = f"{type(exc).__name__}: {exc}"[:500]
    return _collect(spec, error, time.perf_counter() - start, keep_checkpoints)


def run_subprocess(spec: RunSpec, keep_checkpoints: bool = False) -> RunResult:
    """Train one run as ``lightning-sfl fit ... --torch_threads 1`` in a child process (output in ``log.txt``).

    The child imports the package this process runs, not a ``lightning_sfl/`` folder in the working directory:
    ``python -m`` would put the working directory first on ``sys.path`` (``PYTHONSAFEPATH``, Python 3.11+), and
    from the repository root with a non-editable install that folder lacks ``lightning_sfl.callbacks`` (mapped
    from the top-level ``callbacks/`` at install time), so every run would fail."""
    cmd = [sys.executable, "-m", "lightning_sfl.cli", *spec.fit_args, "--torch_threads=1"]
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    start = time.perf_counter()
    log_path = spec.run_dir / "log.txt"
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, check=False)
    error = None
    if proc.returncode != 0:
        detail = error_from_output(log_path.read_text(errors="replace"))
        error = detail or f"exit code {proc.returncode} (see {log_path})"
    return _collect(spec, error, time.perf_counter() - start, keep_checkpoints)


def _report(i: int, n: int, res: RunResult) -> None:
    what = res.status
    if res.completed:
        what += f", final test acc {final_acc(res.records):.4f} after {res.acc_records[-1]['round']:.0f} rounds"
    else:
        what += f": {res.failure_message}"
    print(f"[compare {i}/{n}] {res.method} seed {res.seed}: {what} ({res.seconds:.1f} s)", flush=True)


def _reported(outcomes: Iterable[RunResult], n: int) -> list[RunResult]:
    """The results, printing a progress line as each one arrives."""
    results = []
    for i, res in enumerate(outcomes, 1):
        results.append(res)
        _report(i, n, res)
    return results


def execute(runs: Sequence[RunSpec], jobs: int = 1, keep_checkpoints: bool = False) -> list[RunResult]:
    """All runs, in order: in this process for ``jobs == 1``, else ``jobs`` child processes at a time."""
    if jobs < 1:
        raise ValueError(f"jobs={jobs} must be >= 1")

    def reused(spec: RunSpec) -> RunResult:
        return _collect(spec, None, 0.0, keep_checkpoints)

    if jobs == 1:  # lazily, one run after the other
        outcomes = (reused(s) if s.reuse else run_in_process(s, keep_checkpoints) for s in runs)
        return _reported(outcomes, len(runs))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [None if s.reuse else pool.submit(run_subprocess, s, keep_checkpoints) for s in runs]
        return _reported((reused(s) if f is None else f.result() for s, f in zip(runs, futures)), len(runs))
