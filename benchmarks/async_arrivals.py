"""Batched arrivals vs one arrival at a time on the asynchronous clock (GAS, issue 13): activation arrivals per
second of training time for both paths, measured in the same run, and their ratio; plus a float64 check that both
paths end with the same weights.

Arrivals between two server updates see the same server weights, so the schedule runs them in waves (each slot's
events in order, one step for every slot's next arrival: :func:`lightning_sfl.loop.async_events.arrival_waves`);
``--model.batch_arrivals false`` runs one step per arrival, the way the GAS authors' code processes events.

    python benchmarks/async_arrivals.py                      # GAS, digits, K=50, C=20 and C=50, 10 rounds
    python benchmarks/async_arrivals.py --method AsyncSFL --concurrency 10 --rounds 5 --json out.json

The batched path runs on the stacked bank (the clients of a step as one stacked computation) and on the sequential
bank; the reference, one arrival at a time, on the sequential bank. ``kernel_ceiling`` times the arrivals' bare
kernels (client and server forward and backward, no library) one client at a time and stacked as the run grouped
them: what batching can gain at most where the kernels, not the overhead, take the time.
"""

from __future__ import annotations

import argparse
import json
import time

import torch


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
            self.start = time.perf_counter()

        def on_train_end(self, trainer, pl_module):
            self.seconds = time.perf_counter() - self.start

    class Counting(getattr(algorithms, method)):
        arrivals_seen = 0
        groups = 0

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
    """Largest difference of two runs' weights and states: those both hold by name (global halves, buffers, GAS's
    statistics) and every slot's client half (the banks store them differently)."""
    sa, sb = a.state_dict(), b.state_dict()
    pairs = [(sa[k], sb[k]) for k in sa.keys() & sb.keys() if sa[k].is_floating_point()]
    for slot in range(len(a.bank)):
        xa, xb = a.bank.snapshot(slot), b.bank.snapshot(slot)
        pairs += [(xa[k], xb[k]) for k in xa]
    return max((x - y).abs().max().item() for x, y in pairs)


def kernel_ceiling(group: int, repeats: int = 60) -> float:
    """How much faster the arrivals' bare kernels get when batched: ms per arrival of the client half's forward and
    backward plus the server half's forward and backward to the activations (GAS's ``G_k``), 16 rows a client, one
    client at a time ÷ ``group`` clients as one stacked computation (the stacked bank, one server pass). Nothing of
    the library around them: an upper bound of batched ÷ one at a time for the whole run, whose server updates,
    uploads and statistics do not get cheaper."""
    from lightning_sfl.algorithms.stacked_bank import StackedBank
    from lightning_sfl.models import build_model, split_model

    client, server = split_model(build_model("cnn_small", 10, (1, 8, 8)), "s2")

    def per_arrival(bank, slots: int) -> float:
        x, sizes = torch.randn(16 * slots, 1, 8, 8), torch.full((slots,), 16)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            a = bank(x, sizes, list(range(slots)))
            detached = a.detach().requires_grad_(True)
            server(detached).logsumexp(1).sum().backward()
            a.backward(detached.grad)
            times.append(time.perf_counter() - start)
        return sorted(times)[len(times) // 2] / slots

    return per_arrival(StackedBank(client, 1), 1) / per_arrival(StackedBank(client, group), group)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="GAS", choices=["GAS", "AsyncSFL"])
    parser.add_argument("--clients", type=int, default=50, help="K")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[20, 50], help="C (= Q_s = Q_c), one run each")
    parser.add_argument("--local_iters", type=int, default=5, help="E")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None, help="write the report here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    paths = {  # name -> (batch_arrivals, client bank)
        "batched_stacked": (True, "stacked"),
        "batched_sequential": (True, "sequential"),
        "one_at_a_time": (False, "sequential"),
    }
    settings = []
    for concurrency in args.concurrency:
        run_args = argparse.Namespace(**{**vars(args), "concurrency": concurrency})
        rates = {}
        for name, (batch, bank) in paths.items():
            model, seconds, arrivals = _fit(args.method, run_args, batch, args.rounds, bank=bank)
            rates[name] = {"seconds": seconds, "arrivals": arrivals, "steps": model.groups}
            print(
                f"C={concurrency} {name:>18}: {arrivals} arrivals in {model.groups} steps, {seconds:.2f} s "
                f"= {arrivals / seconds:.1f} arrivals/s",
                flush=True,
            )
        # the batched run on the stacked bank and the reference in float64 (2 rounds): equal weights
        a, _, _ = _fit(args.method, run_args, True, 2, "64-true", bank="stacked")
        b, _, _ = _fit(args.method, run_args, False, 2, "64-true", bank="sequential")
        diff = _largest_difference(a, b)
        per_second = {name: r["arrivals"] / r["seconds"] for name, r in rates.items()}
        group = rates["batched_stacked"]["arrivals"] / rates["batched_stacked"]["steps"]
        settings.append(
            {
                "concurrency": concurrency,
                "paths": rates,
                "ratio": per_second["batched_stacked"] / per_second["one_at_a_time"],
                "ratio_sequential_bank": per_second["batched_sequential"] / per_second["one_at_a_time"],
                "mean_group": group,
                "kernel_ceiling": kernel_ceiling(max(1, round(group))),
                "float64_max_weight_diff": diff,
            }
        )
    print("==== summary")
    print(
        f"{args.method}, K={args.clients}, C=Q_s=Q_c, E={args.local_iters}, {args.rounds} rounds, "
        f"{args.threads} thread(s)"
    )
    for r in settings:
        print(
            f"C={r['concurrency']}: batched / one at a time (arrivals per second): {r['ratio']:.2f} "
            "on the stacked bank, "
            f"{r['ratio_sequential_bank']:.2f} on the sequential bank; {r['mean_group']:.1f} arrivals a step; "
            f"the bare kernels batched that way: {r['kernel_ceiling']:.2f}; float64 weight difference after 2 rounds: "
            f"{r['float64_max_weight_diff']:.2e}"
        )
    report = {"args": vars(args), "settings": settings}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return report


if __name__ == "__main__":
    main()
