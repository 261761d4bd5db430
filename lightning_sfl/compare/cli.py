"""Entry point of ``lightning-sfl compare``: plan the runs, run them (each a W&B run too, and the comparison one of its
own, unless ``--wandb false``), write the outputs, print the table."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from lightning_sfl.trials import TrialPool, one_thread_before_fork
from lightning_sfl.wandb.online import announce_offline

from .config import known_method, plan_runs
from .options import command_line, methods_of, parse_args, without_methods
from .records import RunResult, read_metrics_csv, write_metrics_csv
from .report import write_report
from .runner import execute
from .summary import MethodSummary, format_table, plural, summarize, summary_cells, table_header
from .tracking import ComparisonRun


def kept_runs(args: argparse.Namespace) -> tuple[list[str], list[RunResult]]:
    """``--add``: the methods of the comparison in ``--out`` that ``--methods`` does not name, and their runs.

    The comparison must have been produced by the same command up to ``--methods`` and ``--jobs`` (read from its
    ``results.md``) and hold every seed of every kept method; otherwise ``ValueError``."""
    out = Path(args.out)
    csv_path, md_path = out / "metrics.csv", out / "results.md"
    if not (csv_path.is_file() and md_path.is_file()):
        raise ValueError(f"--add: no comparison in {out} (its metrics.csv and results.md) to add to")
    found = re.search(r"```bash\n(lightning-sfl compare .*)\n```", md_path.read_text())
    previous = found.group(1) if found else "(no command found)"
    if not found or without_methods(previous) != without_methods(command_line(args)):
        raise ValueError(f"--add: {md_path} was produced by another command than this one: {previous}")
    methods = [m for m in methods_of(previous) if m not in args.methods]
    for method in methods:  # names read from a file: the library's, or imported by this command line, never imported
        if known_method(method) is None:
            raise ValueError(
                f"--add: {md_path} names the method {method!r}, which the library does not know (a file names no code "
                "to import): name it in --methods to run it"
            )
    kept = [r for r in read_metrics_csv(csv_path) if r.method in methods]
    missing = sorted({(m, s) for m in methods for s in args.seeds} - {(r.method, r.seed) for r in kept})
    if missing:
        runs = ", ".join(f"{m} seed {s}" for m, s in missing)
        raise ValueError(f"--add: {csv_path} lacks runs ({runs}): name their methods in --methods to run them again")
    return methods, kept


def check_out_is_ours(args: argparse.Namespace) -> None:
    """An ``--out`` holding another comparison (its ``results.md`` names another command) is not overwritten unless
    ``--add`` or ``--reuse`` says to build on it; otherwise ``ValueError`` (one line). The same command again
    replaces its own results."""
    md_path = Path(args.out) / "results.md"
    if args.add or args.reuse or not md_path.is_file():
        return
    found = re.search(r"```bash\n(lightning-sfl compare .*)\n```", md_path.read_text())
    previous = found.group(1) if found else "(no command found)"
    if previous != command_line(args):
        raise ValueError(
            f"--out {args.out} holds another comparison (made by: {previous}): give another --out, or --add to add "
            "these methods to it, or --reuse to keep its finished runs"
        )


def run_compare(args: argparse.Namespace) -> list[MethodSummary]:
    """Plan, run, and write ``metrics.csv``, ``results.md`` and ``accuracy.png``; return the summary rows. With
    ``args.wandb``, every run is a W&B run and so is the comparison (:class:`~.tracking.ComparisonRun`)."""
    out = Path(args.out)
    wandb = getattr(args, "wandb", True)
    try:
        check_out_is_ours(args)
        kept_methods, kept = kept_runs(args) if args.add else ([], [])
        with one_thread_before_fork():  # planning builds every run's data and method; the pool then forks
            plan = plan_runs(args.config, args.methods, args.seeds, out, args.overrides, reuse=args.reuse, wandb=wandb)
            if kept_methods:
                kept_plan = plan_runs(args.config, kept_methods, args.seeds, out, args.overrides, write=False)
                plan = kept_plan + plan
    except ValueError as exc:  # a setting the CLI's parser rejects, an --out that cannot be made: one line, no folder
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if args.reuse:
        reused, resumed = sum(s.reuse for s in plan.runs), sum(s.resume for s in plan.runs)
        print(f"[compare] reusing {reused} finished runs with unchanged config and command; continuing {resumed} "
              "unfinished ones from their last checkpoint")  # fmt: skip
    if kept_methods:
        print(f"[compare] keeping the runs of {plural(len(kept_methods), 'method')} already in {out}")
    runs = f"{plural(len(args.methods), 'method')} × {plural(len(args.seeds), 'seed')}"
    print(f"[compare] {len(plan.runs) - len(kept)} runs ({runs}) -> {out}")
    for method, dropped in plan.dropped.items():
        if dropped and method in args.methods:
            print(f"[compare] {method}: not accepted by {plan.classes[method]}, dropped: {', '.join(dropped)}")
    new = [spec for spec in plan.runs if spec.method in args.methods]
    jobs = max(1, min(args.jobs, sum(not spec.reuse for spec in new)))
    all_methods = [*kept_methods, *args.methods]  # the report's command reproduces the whole comparison
    tracked = None
    if wandb and announce_offline():  # W&B online that cannot start here: every run offline, said once
        os.environ["WANDB_MODE"] = "offline"  # (before the workers fork: they take it)
    with TrialPool(jobs, args.launcher, out / "submitit", args.slurm_parameters) as pool:
        pool.warm_up()  # forked from this process, which has imported what they need while planning: ready at once
        if wandb:  # after the fork: the workers must not hold this process's W&B run
            command = command_line(argparse.Namespace(**{**vars(args), "methods": all_methods}))
            tracked = ComparisonRun(out, command, run_settings(args, all_methods))
        try:
            results = kept + execute(new, pool, args.keep_checkpoints)
        except BaseException:
            if tracked is not None:  # ended when the process exits, failed
                tracked.process.exit_code = 1
            raise
    args.methods = all_methods
    rows = summarize(results, args.target_acc)
    write_metrics_csv(results, out / "metrics.csv")
    write_report(args, plan, results, rows, out)
    if tracked is not None:
        cells = [summary_cells(r, args.target_acc, rows) for r in rows]
        tracked.log_results(table_header(args.target_acc, rows), cells, out, accuracy_summary(rows))
    print(format_table(rows, args.target_acc))
    print(f"[compare] wrote {out / 'results.md'}, {out / 'metrics.csv'}, {out / 'accuracy.png'}", flush=True)
    if tracked is not None:  # its messages go to OUT/log.txt: the lines above stay the last
        tracked.finish(0 if any(r.n_completed for r in rows) else 1)
    return rows


def run_settings(args: argparse.Namespace, methods: list[str]) -> dict:
    """The comparison's settings, for its W&B run's config."""
    return {
        "configs": [str(c) for c in args.config],
        "methods": methods,
        "seeds": list(args.seeds),
        "overrides": list(args.overrides),
        "target_acc": args.target_acc,
        "out": str(Path(args.out).absolute()),
    }


def accuracy_summary(rows: list[MethodSummary]) -> dict[str, float]:
    """Each method's mean final and best test accuracy (fractions) over its completed runs."""
    summary = {}
    for row in rows:
        if row.final_acc:
            summary[f"final_test_acc/{row.method}"] = sum(row.final_acc) / len(row.final_acc)
            summary[f"best_test_acc/{row.method}"] = sum(row.best_acc) / len(row.best_acc)
    return summary


def main(argv: Sequence[str] | None = None) -> None:
    """``lightning-sfl compare ...``; exits with status 1 when no run completed, 2 (one ``error:`` line, nothing
    written) when a configuration is invalid."""
    rows = run_compare(parse_args(argv))
    if not any(r.n_completed for r in rows):
        raise SystemExit(1)
