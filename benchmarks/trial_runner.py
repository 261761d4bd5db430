"""Speed of a whole study: ``sweep`` and ``compare`` against one ``fit``, warm workers against a process per trial,
measured in the same run as ratios (issue 37).

Run (from the repository root, with the package installed)::

    python benchmarks/trial_runner.py                     # medians of 3 (~4 min on 2 cores)
    python benchmarks/trial_runner.py --repeats 1 --json trial_runner.json

Every command is a fresh ``lightning-sfl`` process timed from its start to its exit, in an empty folder, W&B offline
(every default logger and callback, as a user runs it), interleaved repeat after repeat so that all see the same
machine load; the figure is the median:

``fit``            ``lightning-sfl fit --config configs/digits/scala.yaml --trainer.max_epochs=2``
``sweep``          ``lightning-sfl sweep sweeps/digits_lr.yaml --count 6 -- --trainer.max_epochs=2`` (6 trials of that
                   fit, Bayesian search over the learning rate), warm workers (the default)
``sweep isolate``  the same with ``--isolate``: a process per trial (what ``sweep`` did before the warm workers)
``compare jN``     ``lightning-sfl compare --config configs/digits/scala.yaml --methods`` 6 methods ``--seeds 0
                   --jobs N --overrides --trainer.max_epochs=2``, N = 1 and 2, warm workers
``compare j2 isolate``  ``--jobs 2 --isolate`` (before: a process per trial for ``--jobs > 1``)

Targets: sweep ÷ fit ≤ 2; compare ``--jobs 2`` ÷ ``--jobs 1`` < 1. The exit status is 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "configs" / "digits" / "scala.yaml")
SWEEP = str(REPO / "sweeps" / "digits_lr.yaml")
METHODS = ["scala", "fedavg", "splitfedv1", "splitfedv2", "fedprox", "fedlc"]
ROUNDS = "--trainer.max_epochs=2"


def commands() -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "lightning_sfl.cli"]
    compare = [*cli, "compare", "--config", CONFIG, "--methods", *METHODS, "--seeds", "0", "--out", "out"]
    return {
        "fit": [*cli, "fit", "--config", CONFIG, ROUNDS],
        "sweep": [*cli, "sweep", SWEEP, "--count", "6", "--out", "{tmp}/out", "--", ROUNDS],
        "sweep isolate": [*cli, "sweep", SWEEP, "--count", "6", "--out", "{tmp}/out", "--isolate", "--", ROUNDS],
        "compare j1": [*compare, "--jobs", "1", "--overrides", ROUNDS],
        "compare j2": [*compare, "--jobs", "2", "--overrides", ROUNDS],
        "compare j2 isolate": [*compare, "--jobs", "2", "--isolate", "--overrides", ROUNDS],
    }


def timed(cmd: list[str]) -> float:
    """Wall seconds of ``cmd`` in an empty folder (W&B offline); it must succeed. A sweep runs from the repository
    root (its file names ``configs/digits/scala.yaml``), its ``--out`` in the empty folder."""
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONSAFEPATH": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [token.replace("{tmp}", tmp) for token in cmd]
        cwd = REPO if "sweep" in cmd else tmp
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return seconds


def measure(repeats: int, only: list[str] | None = None) -> dict:
    cmds = {k: v for k, v in commands().items() if not only or k in only or k == "fit"}
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(repeats):
        for name, cmd in cmds.items():
            times[name].append(timed(cmd))
            print(f"  {name:<20} {times[name][-1]:6.1f} s", flush=True)
    med = {name: statistics.median(t) for name, t in times.items()}
    out = {"repeats": repeats, "seconds": med, "all_seconds": times, "ratios": {}}
    pairs = {
        "sweep / fit": ("sweep", "fit", 2.0, "<="),
        "sweep isolate / fit": ("sweep isolate", "fit", None, ""),
        "compare j2 / compare j1": ("compare j2", "compare j1", 1.0, "<"),
        "compare j2 isolate / compare j1": ("compare j2 isolate", "compare j1", None, ""),
        "compare j1 / fit": ("compare j1", "fit", None, ""),
    }
    for label, (a, b, target, op) in pairs.items():
        if a in med and b in med:
            out["ratios"][label] = {"value": med[a] / med[b], "target": target, "op": op}
    return out


def report(r: dict) -> str:
    lines = [f"whole-study speed, digits, 2-round trials, medians of {r['repeats']} (s, process start to exit)"]
    lines += [f"  {name:<20} {sec:6.1f}" for name, sec in r["seconds"].items()]
    for label, v in r["ratios"].items():
        if v["target"] is None:
            lines.append(f"{label:<34} {v['value']:5.2f}")
        else:
            ok = v["value"] <= v["target"] if v["op"] == "<=" else v["value"] < v["target"]
            verdict = "PASS" if ok else "MISS"
            lines.append(f"{label:<34} {v['value']:5.2f}   target {v['op']} {v['target']:g}  {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timings per command (median)")
    parser.add_argument("--only", nargs="+", choices=list(commands()), help="these commands (and fit) only")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats={args.repeats} must be >= 1")
    result = measure(args.repeats, args.only)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
