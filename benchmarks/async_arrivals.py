"""Batched arrivals vs one arrival at a time on the asynchronous clock (GAS, issue 13): activation arrivals per
second of training time for both paths, measured in the same run, and their ratio; plus a float64 check that both
paths end with the same weights.

Arrivals between two server updates see the same server weights, so the schedule runs them in waves (each slot's
events in order, one step for every slot's next arrival: :func:`lightning_sfl.loop.async_events.arrival_waves`);
``--model.batch_arrivals false`` runs one step per arrival, the way the GAS authors' code processes events.

    python benchmarks/async_arrivals.py                      # GAS, digits, K=50, C=20 and C=50, 10 rounds
    python benchmarks/async_arrivals.py --method AsyncSFL --concurrency 10 --rounds 5 --json out.json

The batched path runs on the stacked bank (the clients of a step as one stacked computation) and on the sequential
bank; the reference, one arrival at a time, on the sequential bank. ``ceiling`` (the bound) is the most batching
could gain here: the reference's time over what the batched run cannot avoid, its arrivals' bare kernels (client and
server forward and backward, no library around them, stacked as the run grouped them: :func:`stacked_kernels_ms`)
plus the server's own updates at the flushes (timed in the run; both paths do the same ones). ratio / bound is then
the bare work's share of the batched run's time.

Every path runs ``--repeats`` times, interleaved (the three paths, then again), each repeat's kernels timed right
after its batched run on the stacked bank; the figures are the medians over the repeats. The process reuses its freed
memory, as ``lightning-sfl`` does (:func:`~lightning_sfl.process.memory.retain_freed_memory`). The last lines printed
are the result: per ``C`` the ratio, the bound, ratio / bound and whether it reaches ``--target``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

#: What the benchmark's seconds are: wall-clock (default) or this process's CPU time (``--clock cpu``: on a shared
#: machine, the time other processes take from this one is left out; with one thread the two agree on an idle one).
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
_now = CLOCKS["wall"]  # set by main()


def _fit(
    method: str, args, batch: bool, rounds: int, precision: str = "32-true", bank: str = "sequential"
) -> tuple[object, float, int]:
    import lightning as L

    import lightning_sfl.algorithms as algorithms
    from lightning_sfl.data import FederatedDataModule
    from lightning_sfl.loop import Federation
    from lightning_sfl.system.wireless import WirelessCell

    class Timer(L.Callback):
        def on_train_start(self, trainer, pl_module):
            self.start = _now()

        def on_train_end(self, trainer, pl_module):
            self.seconds = _now() - self.start

    class Counting(getattr(algorithms, method)):
        arrivals_seen = 0
        groups = 0
        server_seconds = 0.0

        def server_update(self, opt):
            start = _now()
            try:
                return super().server_update(opt)
            finally:
                self.server_seconds += _now() - start

        def arrivals(self, step):
            self.arrivals_seen += len(step.clients)
            self.groups += 1
            return super().arrivals(step)

    torch.manual_seed(0)
    dm = FederatedDataModule(dataset="digits", num_clients=args.clients, alpha=2, batch_size=16, seed=0)
    extra = {"covariance": "diag"} if method == "GAS" else {}
    model = Counting(
        concurrency=args.concurrency,
        flush_every=args.concurrency,
        aggregate_every=args.concurrency,
        local_iters=args.local_iters,
        client_batch_size=16,
        lr=0.01,
        momentum=0.9,
        batch_arrivals=batch,
        client_bank=bank,
        **extra,
    )
    Federation.build(model, dm, system=WirelessCell(flops_high=1e10))  # GAS's cell, placement seed 0
    timer = Timer()
    trainer = L.Trainer(
        max_epochs=rounds,
        precision=precision,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[timer],
    )
    trainer.fit(model, dm)
    return model, timer.seconds, model.arrivals_seen


def _largest_difference(a, b) -> float:
    """Largest difference of two runs' weights and states: those both hold by name (global halves, GAS's statistics),
    every slot's client half (the banks store them differently) and the activation buffer's live rows, matched row to
    nearest row (the paths buffer them in different orders; the rows past the count are stale)."""
    sa, sb = a.state_dict(), b.state_dict()
    scratch = ("act_buffer",)  # rows already consumed by a flush, in arrival order: the same rows, another order
    pairs = [(sa[k], sb[k]) for k in sa.keys() & sb.keys() if sa[k].is_floating_point() and k not in scratch]
    if "act_buffer" in sa:  # the live rows of the activation buffer: the same rows, in another order
        n = int(sa["act_count"])
        assert n == int(sb["act_count"]), "the two paths buffered different numbers of rows"
        if n:
            rows_a, rows_b = sa["act_buffer"][:n].flatten(1), sb["act_buffer"][:n].flatten(1)
            exact = "donot_use_mm_for_euclid_dist"  # the matrix-product form loses ~1e-8 of the norm
            nearest = torch.cdist(rows_a.double(), rows_b.double(), compute_mode=exact).min(1).values.max()
            pairs.append((nearest.reshape(1), torch.zeros(1, dtype=torch.float64)))
    for slot in range(len(a.bank)):
        xa, xb = a.bank.snapshot(slot), b.bank.snapshot(slot)
        pairs += [(xa[k], xb[k]) for k in xa]
    return max((x - y).abs().max().item() for x, y in pairs)


def stacked_kernels_ms(group: int, repeats: int = 60) -> float:
    """Milliseconds per arrival of the bare kernels of ``group`` arrivals as one stacked computation: the client
    halves' forward and backward on the stacked bank (16 rows a client; ``group=1``: the plain client module) and one
    server forward and backward to the activations (GAS's ``G_k``); the median of ``repeats``."""
    from lightning_sfl.models import build_model, split_model
    from lightning_sfl.runtime.stacked_bank import StackedBank

    client, server = split_model(build_model("cnn_small", 10, (1, 8, 8)), "s2")
    bank = StackedBank(client, group) if group > 1 else lambda x, sizes, slots: client(x)  # one client: its module
    x, sizes = torch.randn(16 * group, 1, 8, 8), torch.full((group,), 16)
    times = []
    for _ in range(repeats):
        start = _now()
        a = bank(x, sizes, list(range(group)))
        detached = a.detach().requires_grad_(True)
        server(detached).logsumexp(1).sum().backward()
        a.backward(detached.grad)
        times.append(_now() - start)
    return 1e3 * sorted(times)[len(times) // 2] / group


def _setting(args, concurrency: int, paths: dict) -> dict:
    """One ``C``: every path ``args.repeats`` times, interleaved (path after path, then again), each repeat's bare
    kernels measured right after its batched run on the stacked bank; per repeat the ratio, the bound and ratio /
    bound; their medians."""
    run_args = argparse.Namespace(**{**vars(args), "concurrency": concurrency})
    runs: dict[str, list[dict]] = {name: [] for name in paths}
    repeats = []
    for repeat in range(args.repeats):
        for name, (batch, bank) in paths.items():
            model, seconds, arrivals = _fit(args.method, run_args, batch, args.rounds, bank=bank)
            runs[name].append(
                {
                    "seconds": seconds,
                    "arrivals": arrivals,
                    "steps": model.groups,
                    "server_update_seconds": model.server_seconds,
                }
            )
            print(
                f"C={concurrency} {name:>18} (run {repeat + 1}): {arrivals} arrivals in {model.groups} steps, "
                f"{seconds:.2f} s = {arrivals / seconds:.1f} arrivals/s",
                flush=True,
            )
            if name == "batched_stacked":  # its bare kernels right after it, under the machine's load of the moment
                group = arrivals / model.groups
                kernels_ms = stacked_kernels_ms(max(1, round(group)))
        batched, reference = runs["batched_stacked"][-1], runs["one_at_a_time"][-1]
        floor = batched["arrivals"] * kernels_ms / 1e3 + batched["server_update_seconds"]
        repeats.append(
            {
                "mean_group": group,
                "stacked_kernels_ms_per_arrival": kernels_ms,
                "batched_floor_seconds": floor,
                "ratio": reference["seconds"] / batched["seconds"],  # the same arrivals: arrivals per second
                "ratio_sequential_bank": reference["seconds"] / runs["batched_sequential"][-1]["seconds"],
                "ceiling": reference["seconds"] / floor,
            }
        )
    # the batched run on the stacked bank and the reference in float64 (2 rounds): equal weights
    a, _, _ = _fit(args.method, run_args, True, 2, "64-true", bank="stacked")
    b, _, _ = _fit(args.method, run_args, False, 2, "64-true", bank="sequential")
    median = {key: statistics.median([r[key] for r in repeats]) for key in repeats[0]}
    for r in repeats:
        r["ratio_over_bound"] = r["ratio"] / r["ceiling"]
        r["sequential_ratio_over_bound"] = r["ratio_sequential_bank"] / r["ceiling"]
    paths_median = {
        name: {**{key: statistics.median([r[key] for r in rs]) for key in rs[0]}, "runs": rs}
        for name, rs in runs.items()
    }
    return {
        "concurrency": concurrency,
        "paths": paths_median,
        "repeats": repeats,
        **median,
        "ratio_over_bound": statistics.median([r["ratio_over_bound"] for r in repeats]),
        "sequential_ratio_over_bound": statistics.median([r["sequential_ratio_over_bound"] for r in repeats]),
        "single_kernels_ms_per_arrival": stacked_kernels_ms(1),
        "float64_max_weight_diff": _largest_difference(a, b),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="GAS", choices=["GAS", "AsyncSFL"])
    parser.add_argument("--clients", type=int, default=50, help="K")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[20, 50], help="C (= Q_s = Q_c), one run each")
    parser.add_argument("--local_iters", type=int, default=5, help="E")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs of every path; medians reported")
    parser.add_argument("--target", type=float, default=0.9, help="the ratio / bound a setting should reach")
    parser.add_argument("--clock", default="wall", choices=sorted(CLOCKS), help="wall-clock or CPU seconds")
    parser.add_argument("--json", default=None, help="write the report here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    global _now
    _now = CLOCKS[args.clock]
    from lightning_sfl.process.memory import retain_freed_memory

    retain_freed_memory()  # as `lightning-sfl` does before every command: freed memory is reused, no page faults
    warmup = argparse.Namespace(**{**vars(args), "concurrency": args.concurrency[0]})
    _fit(args.method, warmup, True, 1, bank="stacked")  # the process's first fit pays for what later ones reuse

    paths = {  # name -> (batch_arrivals, client bank)
        "batched_stacked": (True, "stacked"),
        "batched_sequential": (True, "sequential"),
        "one_at_a_time": (False, "sequential"),
    }
    settings = [_setting(args, concurrency, paths) for concurrency in args.concurrency]
    print("==== summary")
    print(
        f"{args.method}, K={args.clients}, C=Q_s=Q_c, E={args.local_iters}, {args.rounds} rounds, "
        f"{args.threads} thread(s), medians of {args.repeats} interleaved runs, {args.clock} seconds"
    )
    for r in settings:
        print(
            f"C={r['concurrency']}: batched / one at a time (arrivals per second): {r['ratio']:.2f} "
            "on the stacked bank, "
            f"{r['ratio_sequential_bank']:.2f} on the sequential bank; {r['mean_group']:.1f} arrivals a step; "
            f"at most {r['ceiling']:.2f} (bare kernels {r['stacked_kernels_ms_per_arrival']:.2f} ms an arrival "
            f"stacked, {r['single_kernels_ms_per_arrival']:.2f} one client at a time; stacked + the server's "
            f"updates = {r['batched_floor_seconds']:.2f} s of the batched run's "
            f"{r['paths']['batched_stacked']['seconds']:.2f}); float64 weight difference after 2 rounds: "
            f"{r['float64_max_weight_diff']:.2e}"
        )
    print("==== result: batched (stacked bank) / one at a time against the bound, per C")
    for r in settings:
        reached = r["ratio_over_bound"] >= args.target
        print(
            f"C={r['concurrency']}: ratio {r['ratio']:.2f}, bound {r['ceiling']:.2f}, ratio/bound "
            f"{r['ratio_over_bound']:.2f} (sequential bank {r['sequential_ratio_over_bound']:.2f}); "
            f">= {args.target}: {'yes' if reached else 'no'}"
        )
    report = {"args": vars(args), "settings": settings}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return report


if __name__ == "__main__":
    main()
