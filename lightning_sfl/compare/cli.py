"""Entry point of ``lightning-sfl compare``: plan the runs, run them, write the outputs, print the table."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .config import plan_runs
from .options import parse_args
from .records import write_metrics_csv
from .report import write_report
from .runner import execute
from .summary import MethodSummary, format_table, plural, summarize


def run_compare(args: argparse.Namespace) -> list[MethodSummary]:
    """Plan, run, and write ``metrics.csv``, ``results.md`` and ``accuracy.png``; return the summary rows."""
    out = Path(args.out)
    try:
        plan = plan_runs(args.config, args.methods, args.seeds, out, args.overrides, reuse=args.reuse)
    except ValueError as exc:  # a setting the CLI's parser rejects: one line, before any run or folder
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    out.mkdir(parents=True, exist_ok=True)
    if args.reuse:
        print(f"[compare] reusing {sum(s.reuse for s in plan.runs)} finished runs with unchanged config and command")
    runs = f"{plural(len(args.methods), 'method')} × {plural(len(args.seeds), 'seed')}"
    print(f"[compare] {len(plan.runs)} runs ({runs}) -> {out}")
    for method, dropped in plan.dropped.items():
        if dropped:
            print(f"[compare] {method}: not accepted by {plan.classes[method]}, dropped: {', '.join(dropped)}")
    results = execute(plan.runs, args.jobs, args.keep_checkpoints)
    rows = summarize(results, args.target_acc)
    write_metrics_csv(results, out / "metrics.csv")
    write_report(args, plan, results, rows, out)
    print(format_table(rows, args.target_acc))
    print(f"[compare] wrote {out / 'results.md'}, {out / 'metrics.csv'}, {out / 'accuracy.png'}")
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """``lightning-sfl compare ...``; exits with status 1 when no run completed, 2 (one ``error:`` line, nothing
    written) when a configuration is invalid."""
    rows = run_compare(parse_args(argv))
    if not any(r.n_completed for r in rows):
        raise SystemExit(1)
