"""How the cost of a federation grows with its number of clients ``K`` (100 a round): set-up, client statistics,
selection, a round.

Run (from the repository root)::

    python benchmarks/client_count_scaling.py                        # K = 1,000 / 10,000 / 100,000 (~8 min, 2 cores)
    python benchmarks/client_count_scaling.py --clients 1000,10000   # two sizes (one ratio)
    python benchmarks/client_count_scaling.py --quick --json out.json   # K = 200 / 2,000, fewer repeats (smoke run)

The setting is ``configs/leaf_synthetic/fedavg_10k.yaml``'s at every ``K``: FedProx's Synthetic(1, 1) with its own
clients (``--data.partition natural``), each of ``⌊LogNormal(0, 2)⌋ + 50`` rows (``--data.leaf_size_log_mean 0``:
about 57 a client, so 100,000 clients fit in memory), FedAvg with the 60 → 10 logistic model, 100 clients a round,
``B = 1280`` rows a step, 5 local steps. Each ``K`` runs in a fresh process (its peak memory is its own) and measures,
in seconds:

``set-up``
    ``FederatedDataModule(...)``, ``prepare_data()`` and ``setup("fit")``: drawing the clients' rows and building
    the partition (``|D_k|``). The rows grow with ``K`` (the ``rows`` line): linear is the best possible.
``client_stats``
    What the data module hands the methods (``ClientStats``: ``|D_k|`` ``[K]``, label counts and distributions
    ``[K, N]``, the shards).
``partition <name>``
    The label partitions (:func:`~lightning_sfl.data.partition.partition_rows`) of a fixed vector of 2,000,000 labels
    (200,000 with ``--quick``) of 10 classes into ``K`` clients: ``iid``, ``dirichlet`` (β = 0.5), ``quantity``
    (α = 2), ``shards`` (2 a client). Their rows do not grow with ``K``.
``select <policy>``
    One round's selection of 100 clients by ``uniform``, ``fedcbs`` and ``class_balanced``
    (:mod:`lightning_sfl.loop.selection`) from the ``[K, N]`` label counts; the least time of the repeats (rounds
    0, 1, ...).
``plan a round``
    The schedule's plan of a round (selection, ``B_k``, minibatch rows) and the data module's filling of its 5 steps;
    the least of the repeats.
``fit set-up``
    ``trainer.fit`` up to its first round: the federation (``Federation.build``: the schedule's checks, the system
    model's per-client draws) and the method's set-up (its client-statistics buffers, client slots, optimiser).
``round``
    A round of ``trainer.fit`` (its plan, 5 local steps of 100 clients, the aggregation), without the evaluation;
    the least of ``--rounds`` rounds after the first.
``evaluation``
    The test accuracy after a round: every client's test rows (they grow with ``K``); the least, as ``round``.

Each figure is the CPU time of the measuring process (``time.process_time``: what the work costs, without the time
other processes of a shared machine take from it) and, in brackets, its wall-clock time. Each ``K`` is measured
``--passes`` times (default 3), in turn with the other sizes, each time in a fresh process, and every time measured
more than once (passes, repeats, rounds) reports its least. It prints one table (seconds, the rows, the client
statistics' size and the peak resident memory of each ``K``'s process), then for each quantity the ratios of CPU
times ``t(10K) / t(K)`` of consecutive sizes, each ``pass`` when at most 15: ``K`` ten times larger may cost ten times
as much (linear), and 50 % more for what memory adds to arrays ten times larger: at 100,000 clients the set-up writes
1.4 GB it touches for the first time and the client statistics read 40 MB arrays from memory, at 10,000 arrays of a
tenth of that size that the caches partly hold. Measured on a 2-core AMD EPYC: set-up and client statistics 12-15×
from 10,000 to 100,000 clients in five runs, while their parts alone, each reading from memory, scaled linearly
(the generator's loop over clients of one size 10.0×, the label counts 10.2×). ``K log K`` would
give 12.5 from 10,000 to 100,000, ``K^1.5`` 31.6, ``K²`` 100. The last lines are the verdict. The exit status is 0
whatever the numbers (a measurement, not a test).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

#: ``t(10K) / t(K)`` above this is super-linear (10×: linear; the rest: the memory, see the module docstring).
LIMIT = 15.0
PER_ROUND = 100
BATCH = 1280
LOCAL_ITERS = 5
LABELS = 2_000_000
PARTITIONS = {"iid": {}, "dirichlet": {"beta": 0.5}, "quantity": {"alpha": 2}, "shards": {"shards_per_client": 2}}
POLICIES = ("uniform", "fedcbs", "class_balanced")


def _now() -> tuple[float, float]:
    """``(CPU seconds of this process, wall-clock seconds)``."""
    return time.process_time(), time.perf_counter()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    cpu, wall = _now()
    return cpu - start[0], wall - start[1]


def _least(samples: list[tuple[float, float]]) -> tuple[float, float]:
    """The least CPU time and the least wall time of ``samples``."""
    return min(c for c, _ in samples), min(w for _, w in samples)


def _least_time(fn, repeats: int) -> tuple[float, float]:
    samples = []
    for r in range(repeats):
        start = _now()
        fn(r)
        samples.append(_since(start))
    return _least(samples)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _peak_rss_mib() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure(num_clients: int, repeats: int, rounds: int, size_log_mean: float, labels: int = LABELS) -> dict:
    """Every figure of one ``K``, in this process (run it in a fresh one: :func:`main` does)."""
    import lightning as L
    import torch

    from lightning_sfl.algorithms import FedAvg
    from lightning_sfl.data import FederatedDataModule
    from lightning_sfl.data.partition import partition_rows
    from lightning_sfl.loop import SyncRounds
    from lightning_sfl.loop.sampling import round_generator
    from lightning_sfl.loop.selection import UniformSelection, resolve_selection

    torch.set_num_threads(1)
    out: dict = {"clients": num_clients, "times": {}, "wall": {}}
    measured: dict[str, tuple[float, float]] = {}  # quantity -> (CPU s, wall s)

    start = _now()
    dm = FederatedDataModule(
        dataset="leaf_synthetic",
        partition="natural",
        num_clients=num_clients,
        participation=PER_ROUND / num_clients,
        batch_size=BATCH,
        leaf_lambda=1.0,
        leaf_mu=1.0,
        leaf_size_log_mean=size_log_mean,
        seed=0,
    )
    dm.prepare_data()
    dm.setup("fit")
    measured["set-up"] = _since(start)
    out["rows"] = int(dm.client_sizes.sum())

    def client_stats(_):  # built afresh each time (the partition, |D_k|, is the set-up's)
        for name in ("client_indices", "label_counts", "label_distribution", "client_stats"):
            dm.__dict__.pop(name, None)
        return dm.client_stats

    measured["client_stats"] = _least_time(client_stats, repeats)
    stats = dm.client_stats
    out["stats_bytes"] = sum(
        t.numel() * t.element_size() for t in (stats.sizes, stats.label_counts, stats.label_distribution)
    ) + sum(s.numel() * s.element_size() for s in {id(s.untyped_storage()): s for s in stats.shards}.values())

    y = torch.randint(10, (labels,), generator=torch.Generator().manual_seed(0))
    for name, knobs in PARTITIONS.items():
        start = _now()
        partition_rows(y, name, num_clients, seed=0, **knobs)
        measured[f"partition {name}"] = _since(start)
    del y

    for name in POLICIES:
        policy = resolve_selection(name)
        measured[f"select {name}"] = _least_time(
            lambda r, p=policy: p(stats.label_counts, PER_ROUND, round_generator(0, r), r), repeats
        )

    schedule = SyncRounds(LOCAL_ITERS, UniformSelection())
    measured["plan a round"] = _least_time(lambda r: dm.plan(r, schedule), repeats)

    class RoundClock(L.Callback):
        """``trainer.fit`` up to its first round, each round's training (its plan and steps) and each evaluation."""

        def __init__(self) -> None:
            self.fit_called = self.fit_setup = self.start = (0.0, 0.0)
            self.rounds: list[tuple[float, float]] = []
            self.evaluations: list[tuple[float, float]] = []

        def on_train_epoch_start(self, trainer, pl_module) -> None:
            if trainer.current_epoch == 0:
                self.fit_setup = _since(self.fit_called)
            self.start = _now()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if batch.round_end:
                self.rounds.append(_since(self.start))

        def on_validation_epoch_start(self, trainer, pl_module) -> None:
            self.start = _now()

        def on_validation_epoch_end(self, trainer, pl_module) -> None:
            self.evaluations.append(_since(self.start))

    clock = RoundClock()
    method = FedAvg(
        arch="logistic", split_point="s1", local_iters=LOCAL_ITERS, lr=0.01, num_classes=10, input_shape=dm.input_shape
    )
    trainer = L.Trainer(
        max_epochs=1 + rounds,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
        callbacks=[clock],
    )
    clock.fit_called = _now()
    trainer.fit(method, datamodule=dm)
    measured["fit set-up"] = clock.fit_setup
    measured["round"] = _least(clock.rounds[1:])
    measured["evaluation"] = _least(clock.evaluations[1:])
    out["peak_rss_mib"] = _peak_rss_mib()
    for name, (cpu, wall) in measured.items():
        out["times"][name], out["wall"][name] = cpu, wall
    return out


def _ratio_rows(results: list[dict]) -> list[tuple[str, str, float, bool]]:
    """``(quantity, "t(10K)/t(K)" label, ratio, pass)`` for consecutive sizes ten times apart."""
    rows = []
    for small, large in zip(results, results[1:]):
        factor = large["clients"] / small["clients"]
        label = f"t({large['clients']:,})/t({small['clients']:,})"
        for name in small["times"]:
            ratio = large["times"][name] / small["times"][name]
            rows.append((name, label, ratio, ratio <= LIMIT * factor / 10))
    return rows


def report(results: list[dict]) -> str:
    """The table, the ratios and the verdict (the last lines)."""
    names = list(results[0]["times"])
    head = ["CPU s (wall s)", *(f"K={r['clients']:,}" for r in results)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        cells = [f"{r['times'][name]:.3g} ({r['wall'][name]:.3g})" for r in results]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    lines.append("| " + " | ".join(["rows (train)", *(f"{r['rows']:,}" for r in results)]) + " |")
    lines.append(
        "| " + " | ".join(["client stats (MiB)", *(f"{r['stats_bytes'] / 2**20:.1f}" for r in results)]) + " |"
    )
    lines.append("| " + " | ".join(["peak memory (MiB)", *(f"{r['peak_rss_mib']:.0f}" for r in results)]) + " |")
    ratios = _ratio_rows(results)
    if ratios:
        labels = list(dict.fromkeys(label for _, label, _, _ in ratios))
        lines += ["", "| CPU time | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
        by = {(name, label): (ratio, ok) for name, label, ratio, ok in ratios}
        for name in names:
            cells = [f"{by[name, lb][0]:.2f} {'pass' if by[name, lb][1] else 'FAIL'}" for lb in labels]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        rows_cells = [f"{b['rows'] / a['rows']:.2f}" for a, b in zip(results, results[1:])]
        lines.append("| (rows) | " + " | ".join(rows_cells) + " |")
        failed = [f"{name} {label} = {ratio:.1f}" for name, label, ratio, ok in ratios if not ok]
        lines += [
            "",
            f"pass: every ratio of CPU times <= {LIMIT:g} for K ten times larger (linear = 10)",
            f"result: {'PASS' if not failed else 'FAIL'}: {len(ratios) - len(failed)} of {len(ratios)} ratios at most "
            "linear in K" + ("" if not failed else " (super-linear: " + "; ".join(failed) + ")"),
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default=None, help="comma-separated K (default 1000,10000,100000)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of the selections and plans (the least)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the fit timed after its first (the least)")
    parser.add_argument("--passes", type=int, default=3, help="processes per K, alternating (the least of each time)")
    parser.add_argument("--size-log-mean", type=float, default=0.0, help="--data.leaf_size_log_mean (default 0)")
    parser.add_argument(
        "--quick", action="store_true", help="K = 200 / 2,000, 2 repeats, 1 round, 200,000 labels (a smoke run)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)  # one K, in this process
    parser.add_argument("--labels", type=int, default=LABELS, help=argparse.SUPPRESS)  # of the label partitions
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.rounds, args.labels, args.passes = 2, 1, 200_000, 1
    try:
        clients = [int(k) for k in (args.clients or ("200,2000" if args.quick else "1000,10000,100000")).split(",")]
    except ValueError:
        parser.exit(2, f"error: --clients {args.clients!r} must be comma-separated whole numbers\n")
    if any(k < PER_ROUND for k in clients) or min(args.repeats, args.rounds, args.passes) < 1:
        parser.exit(2, f"error: every K must be >= {PER_ROUND} (clients a round); --repeats, --rounds, --passes >= 1\n")
    if args.worker is not None:
        print(json.dumps(measure(args.worker, args.repeats, args.rounds, args.size_log_mean, args.labels)))
        return
    import torch

    print(
        f"client-count scaling: {_cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__}, 1 thread; "
        f"K = {', '.join(f'{k:,}' for k in clients)}, {PER_ROUND} a round; {args.passes} pass(es); "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    passes: dict[int, list[dict]] = {k: [] for k in clients}
    for n in range(args.passes):  # K after K, then again: a burst of load hits one pass of each, not all of one K
        for k in clients:
            cmd = [sys.executable, __file__, "--worker", str(k), "--repeats", str(args.repeats), "--rounds"]
            cmd += [str(args.rounds), "--size-log-mean", str(args.size_log_mean), "--labels", str(args.labels)]
            start = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                sys.exit(f"error: the measurement of K={k} failed (exit {proc.returncode})")
            passes[k].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"pass {n + 1}, K={k:,}: measured in {time.perf_counter() - start:.0f} s", flush=True)
    results = []
    for runs in passes.values():
        merged = {
            **runs[0],
            **{key: {q: min(r[key][q] for r in runs) for q in runs[0][key]} for key in ("times", "wall")},
        }
        merged["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
        results.append(merged)
    print(f"load average at the end {os.getloadavg()[0]:.1f}", flush=True)
    if args.json:
        ratios = [{"quantity": n, "ratio": lb, "value": r, "pass": ok} for n, lb, r, ok in _ratio_rows(results)]
        args.json.write_text(json.dumps({"results": results, "ratios": ratios, "limit": LIMIT}, indent=1))
    print(report(results))


if __name__ == "__main__":
    main()
