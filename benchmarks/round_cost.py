"""What a round of the studies' settings costs on this machine: wall seconds and CPU-core seconds per round of
``lightning-sfl fit``, for the model choices the results notes justify by cost, as ratios measured in the same run.

Run (from the repository root, with the package installed)::

    python benchmarks/round_cost.py                          # the study cases, 3 repeats (~10 min on 2 CPU cores)
    python benchmarks/round_cost.py --cases mnist5k_models --repeats 5 --json cost.json
    python benchmarks/round_cost.py --quick                  # digits only, 1 repeat (a smoke run)

Cases (each a list of fit settings; the first is the reference of the case's ratios):

``mnist5k_models``
    The MNIST-5k study's SCALA setting (``configs/mnist5k/scala.yaml``, lr 0.01, one torch thread as the study's
    runs) with the papers' ``alexnet_mnist`` against the ``cnn_small`` overlay the study runs
    (``configs/mnist5k/cnn_small.yaml``).
``scala_fashion_mnist_models``
    SCALA's Tables 4 and 6 setting on Fashion-MNIST (``configs/fashion_mnist/scala.yaml``: 100 clients, 10 a round,
    B = 320, T = 5), the paper's AlexNet against FedLC's ``cnn_fedlc`` cut at s1 that the SCALA study runs; a round
    with its test evaluation (10,000 images; the study tests every 5 rounds), the config's torch threads.
``gas_fashion_mnist``
    A global iteration of GAS's Table 1 setting on Fashion-MNIST as the GAS study runs it
    (``configs/fashion_mnist/gas.yaml`` with FedLC's ``cnn_fedlc`` cut at s2, the clock's barrier per iteration), alone.
``semi_sfl_fashion_mnist``
    One Semi-SFL round of the Semi-SFL study's Fashion-MNIST setting (``configs/fashion_mnist/semi_sfl.yaml``,
    K_s = K_u = 10, IID), alone.
``digits``
    The digits main job (``configs/digits/scala.yaml``) against FedAvg's digits config: a quick case, no data beyond
    scikit-learn's.

Each setting runs as a fresh process in an empty folder (W&B off, gradient dissimilarity off) for 1 and for R rounds,
``--repeats`` times, every setting's runs interleaved so that all see the same machine load. Per round = (R-round run
− 1-round run) / (R − 1), on the medians, for the wall time and for the CPU time (user + system of the process and
everything it waited for, i.e. CPU-core seconds: on a busy machine this one moves less than the wall time). The
Fashion-MNIST cases need the dataset on disk (the Debian package ``dataset-fashion-mnist``). ``--json`` also records
the machine (CPU model, cores, torch, commit); the README's table is ``docs/results/round_cost/*.json``.

Not a case: GAS's Table 1 setting with the paper's AlexNet (``configs/fashion_mnist/gas.yaml``), whose first global
iterations take many minutes on a CPU (the results notes give the figure and its command): until a label has seen more
activations than the cut's 3,136 dimensions its full covariance is singular, and every flush samples through an
eigen-decomposition of each label's 3,136 × 3,136 matrix.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Fit options every timed run gets.
COMMON = ("--dissimilarity.every_n_rounds=0",)


@dataclass(frozen=True)
class Setting:
    name: str
    #: ``lightning-sfl fit`` arguments, without the number of rounds.
    args: tuple[str, ...]


CASES: dict[str, tuple[int, list[Setting]]] = {
    # case: (R, settings; the first is the reference)
    "mnist5k_models": (6, [
        Setting("cnn_small", ("--config", "configs/mnist5k/scala.yaml", "--config", "configs/mnist5k/cnn_small.yaml",
                              "--model.lr=0.01")),
        Setting("alexnet_mnist", ("--config", "configs/mnist5k/scala.yaml", "--model.lr=0.01")),
    ]),
    "scala_fashion_mnist_models": (11, [
        Setting("cnn_fedlc", ("--config", "configs/fashion_mnist/scala.yaml", "--model.arch=cnn_fedlc",
                              "--model.split_point=s1")),
        Setting("alexnet_mnist", ("--config", "configs/fashion_mnist/scala.yaml")),
    ]),
    "gas_fashion_mnist": (6, [
        Setting("gas_cnn_fedlc", ("--config", "configs/fashion_mnist/gas.yaml", "--model.arch=cnn_fedlc",
                                  "--model.split_point=s2", "--clock.barrier=iteration")),
    ]),
    "semi_sfl_fashion_mnist": (3, [
        Setting("semi_sfl", ("--config", "configs/fashion_mnist/semi_sfl.yaml", "--model.supervised_steps=10",
                             "--model.local_iters=10", "--data.partition=iid")),
    ]),
    "digits": (6, [
        Setting("scala", ("--config", "configs/digits/scala.yaml")),
        Setting("fedavg", ("--config", "configs/digits/fedavg.yaml")),
    ]),
}  # fmt: skip


def per_round(one: float, long: float, rounds: int) -> float:
    """Per-round cost from a 1-round and an R-round run (start-up cancels out).

    >>> per_round(10.0, 30.0, 5)
    5.0
    """
    return (long - one) / (rounds - 1)


def timed_fit(setting: Setting, rounds: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``lightning-sfl fit`` with ``setting`` for ``rounds`` rounds, a fresh process
    in an empty folder; it must succeed."""
    args = [a if not a.startswith("configs/") else os.path.join(REPO, a) for a in setting.args]
    cmd = [sys.executable, "-m", "lightning_sfl.cli", "fit", *args, f"--trainer.max_epochs={rounds}", *COMMON]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    with tempfile.TemporaryDirectory() as cwd:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def machine() -> dict:
    """What produced the figures: the CPU's model name, its cores, torch's version and the repository's commit."""
    from importlib.metadata import version

    cpu = ""
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    git = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    commit = git.stdout.strip() if git.returncode == 0 else ""
    return {"cpu": cpu, "cores": os.cpu_count(), "torch": version("torch"), "commit": commit}


def measure(case: str, repeats: int, rounds: int | None = None) -> dict:
    """Medians of ``repeats`` interleaved runs of every setting of ``case`` at 1 and R rounds, and the per-round
    figures and ratios to the case's first setting."""
    default_rounds, settings = CASES[case]
    rounds = rounds or default_rounds
    runs: dict[tuple[str, int], list[tuple[float, float]]] = {(s.name, r): [] for s in settings for r in (1, rounds)}
    for _ in range(repeats):
        for s in settings:
            for r in (1, rounds):
                runs[s.name, r].append(timed_fit(s, r))
    out: dict = {"case": case, "rounds": rounds, "repeats": repeats, "machine": machine(), "settings": {}}
    for s in settings:
        med = {r: [statistics.median(t[i] for t in runs[s.name, r]) for i in (0, 1)] for r in (1, rounds)}
        out["settings"][s.name] = {
            "args": list(s.args),
            "wall_per_round_s": per_round(med[1][0], med[rounds][0], rounds),
            "cpu_per_round_s": per_round(med[1][1], med[rounds][1], rounds),
            "one_round_wall_s": med[1][0],
        }
    reference = out["settings"][settings[0].name]
    for figures in out["settings"].values():
        figures["wall_ratio"] = figures["wall_per_round_s"] / reference["wall_per_round_s"]
        figures["cpu_ratio"] = figures["cpu_per_round_s"] / reference["cpu_per_round_s"]
    return out


def report(result: dict) -> str:
    lines = [f"{result['case']}: medians of {result['repeats']} (1- and {result['rounds']}-round runs), "
             f"{result['machine']['cores']} CPU cores",
             f"{'':16}{'wall s/round':>14}{'CPU s/round':>13}{'wall ratio':>12}{'CPU ratio':>11}"]  # fmt: skip
    for name, f in result["settings"].items():
        lines.append(f"{name:16}{f['wall_per_round_s']:>14.2f}{f['cpu_per_round_s']:>13.2f}"
                     f"{f['wall_ratio']:>12.2f}{f['cpu_ratio']:>11.2f}")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=[c for c in CASES if c != "digits"],
                        help="which cases to time (default: all but digits)")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3, help="runs per setting and length (median)")
    parser.add_argument("--rounds", type=int, help="rounds of the long run (default: the case's)")
    parser.add_argument("--quick", action="store_true", help="digits only, 31 rounds, 1 repeat (a smoke run)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.cases, args.repeats, args.rounds = ["digits"], 1, 31
    if args.repeats < 1:
        parser.error(f"--repeats={args.repeats}: must be >= 1")
    if args.rounds is not None and args.rounds < 2:
        parser.error(f"--rounds={args.rounds}: must be >= 2")
    results = []
    for case in args.cases:
        results.append(measure(case, args.repeats, args.rounds))
        print(report(results[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
