"""Running the planned ``fit`` runs as trials of a :class:`~lightning_sfl.trials.TrialPool` (warm workers by
default, the pool ``sweep`` uses too), a failure recorded as the run's error; :func:`execute` runs them all and
prints one progress line per finished run, and on a terminal keeps a status line below them
(:class:`~lightning_sfl.trials.status.StatusLine`: runs finished, running and failed, the best final test accuracy
so far and its method)."""

from __future__ import annotations

import csv
import shutil
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lightning_sfl.trials import Trial, TrialPool
from lightning_sfl.trials.status import StatusLine

from .config import DONE_MARKER, LOG_SUBDIR, RunSpec
from .records import RunResult, final_acc, read_lightning_metrics


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


def trial_of(spec: RunSpec, jobs: int = 1) -> Trial:
    """The ``lightning-sfl fit`` of ``spec`` as a trial: run in this folder, output in the run's ``log.txt``, W&B's
    variables of the run (``spec.env``: its name, group and tags); from its last checkpoint if it is continued
    (``spec.resume``); one torch thread when several trials share the cores (``jobs > 1``)."""
    args = [*spec.fit_args, *(["--ckpt_path=last"] if spec.resume else [])]
    args += ["--torch_threads=1"] if jobs > 1 else []
    return Trial(args, cwd=Path.cwd(), log=spec.run_dir / "log.txt", env=dict(spec.env))


def run_spec(spec: RunSpec, pool: TrialPool, keep_checkpoints: bool = False) -> RunResult:
    """Train one run in ``pool``; its failure is recorded as the run's error."""
    outcome = pool.run(trial_of(spec, pool.jobs))
    return _collect(spec, outcome.error, outcome.seconds, keep_checkpoints)


def _line(i: int, n: int, res: RunResult) -> str:
    what = res.status
    if res.completed:
        what += f", final test acc {final_acc(res.records):.4f} after {res.acc_records[-1]['round']:.0f} rounds"
    else:
        what += f": {res.failure_message}"
    return f"[compare {i}/{n}] {res.method} seed {res.seed}: {what} ({res.seconds:.1f} s)"


def _reported(outcomes: Iterable[RunResult], n: int, status: StatusLine) -> list[RunResult]:
    """The results, printing a progress line as each one arrives (in the order of the runs)."""
    results = []
    for i, res in enumerate(outcomes, 1):
        results.append(res)
        status.say(_line(i, n, res))
    return results


def _counted(status: StatusLine, res: RunResult) -> None:
    value = final_acc(res.records) if res.completed else None
    status.trial_ended(res.completed, value, f"{res.method} seed {res.seed}")


def execute(runs: Sequence[RunSpec], pool: TrialPool, keep_checkpoints: bool = False) -> list[RunResult]:
    """All runs, ``pool.jobs`` at a time, in ``pool`` (:class:`~lightning_sfl.trials.TrialPool`: warm workers that
    import once by default); results in the order of ``runs``, a progress line printed as each one's turn comes, a
    status line on a terminal (stderr) meanwhile, cleared when this returns."""
    reused = {id(s): _collect(s, None, 0.0, keep_checkpoints) for s in runs if s.reuse}

    def run(spec: RunSpec) -> RunResult:
        status.trial_started()
        res = run_spec(spec, pool, keep_checkpoints)
        _counted(status, res)
        return res

    with StatusLine("compare", len(runs), "final test acc", "maximize") as status:
        for res in reused.values():
            status.trial_started()
            _counted(status, res)
        with ThreadPoolExecutor(max_workers=pool.jobs) as threads:
            futures = [None if s.reuse else threads.submit(run, s) for s in runs]
            outcomes = (reused[id(s)] if f is None else f.result() for s, f in zip(runs, futures))
            return _reported(outcomes, len(runs), status)
