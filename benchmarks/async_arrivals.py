"""Batched arrivals vs one arrival at a time on the asynchronous clock (GAS, issue 13): activation arrivals per
second of training time for both paths, measured in the same run, and their ratio; plus a float64 check that both
paths end with the same weights.

Arrivals of distinct clients between two server updates see the same server weights, so the schedule groups them
into one step (one server forward and backward for the group); ``--model.batch_arrivals false`` runs one step per
arrival, the way the GAS authors' code processes events.

    python benchmarks/async_arrivals.py                      # GAS, digits, K=50, C=20, 10 rounds
    python benchmarks/async_arrivals.py --method AsyncSFL --concurrency 10 --rounds 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def _fit(method: str, args, batch: bool, rounds: int, precision: str = "32-true") -> tuple[object, float, int]:
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

        def arrivals(self, step):
            self.arrivals_seen += len(step.clients)
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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="GAS", choices=["GAS", "AsyncSFL"])
    parser.add_argument("--clients", type=int, default=50, help="K")
    parser.add_argument("--concurrency", type=int, default=20, help="C (= Q_s = Q_c)")
    parser.add_argument("--local_iters", type=int, default=5, help="E")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None, help="write the report here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    rates = {}
    for batch in (True, False):
        _, seconds, arrivals = _fit(args.method, args, batch, args.rounds)
        rates["batched" if batch else "one_at_a_time"] = {"seconds": seconds, "arrivals": arrivals}
        print(
            f"{'batched' if batch else 'one at a time':>14}: {arrivals} arrivals in {seconds:.2f} s "
            f"= {arrivals / seconds:.1f} arrivals/s",
            flush=True,
        )
    # the same run both ways in float64 (2 rounds): equal weights
    a, _, _ = _fit(args.method, args, True, 2, "64-true")
    b, _, _ = _fit(args.method, args, False, 2, "64-true")
    diff = max(
        (x - y).abs().max().item()
        for x, y in zip(a.state_dict().values(), b.state_dict().values())
        if x.is_floating_point()
    )
    ratio = (rates["batched"]["arrivals"] / rates["batched"]["seconds"]) / (
        rates["one_at_a_time"]["arrivals"] / rates["one_at_a_time"]["seconds"]
    )
    print("==== summary")
    print(
        f"{args.method}, K={args.clients}, C=Q_s=Q_c={args.concurrency}, E={args.local_iters}, {args.rounds} rounds, "
        f"{args.threads} thread(s)"
    )
    print(f"batched / one at a time (arrivals per second): {ratio:.2f}")
    print(f"largest weight difference of the two paths in float64 after 2 rounds: {diff:.2e}")
    report = {"args": vars(args), "paths": rates, "ratio": ratio, "float64_max_weight_diff": diff}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return report


if __name__ == "__main__":
    main()
