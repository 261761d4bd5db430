"""Per-client state against the number of clients ``K``: FedDyn's ``∇L_k`` and SCAFFOLD's ``c_k`` on LEAF's
Synthetic(1, 1) (the logistic model, 610 parameters), 10 clients a round for 20 rounds (at most 200 clients ever
train), a checkpoint every round; FedAvg, which keeps no per-client state, in the same setting as the control. For
K = 100, 1,000 and 10,000, each run in a fresh process, it prints:

- the memory the stores hold (their rows in memory, exactly) and the rows they hold;
- the training's memory (peak resident memory during ``fit`` above the resident memory when it started; the data,
  which grows with ``K``, is loaded before) and that memory minus FedAvg's at the same ``K`` (what the method adds);
- the last checkpoint's size and the bytes of per-client files written beside the checkpoints in the whole run;
- the time of ``fit`` and what the state would take as ``[K, P]`` tensors (the layout before per-client stores).

Its last lines compare K = 10,000 with K = 1,000: the stores' memory, the checkpoint and the files are flat (a ratio
of at most 1.1), and what the method adds to the training's memory grows by less than 2 MiB (resident memory is
measured to about a MiB), where the ``[K, P]`` layout would have grown by ``9,000·P·4`` bytes a state.

    python benchmarks/client_state_scaling.py                  # FedDyn and SCAFFOLD, K = 100, 1,000, 10,000
    python benchmarks/client_state_scaling.py --clients 1000 100000 --methods FedDyn --rounds 5
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MIB = 2**20


def resident_bytes() -> int:
    """This process's resident memory (``/proc/self/statm``)."""
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakSampler(threading.Thread):
    """The highest resident memory seen every 5 ms until stopped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak, self.running = resident_bytes(), True

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, resident_bytes())
            time.sleep(0.005)


def one_run(method: str, clients: int, rounds: int, per_round: int) -> dict:
    """Train ``method`` with ``clients`` clients in this process; what :func:`main` prints of it."""
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    import lightning_sfl.algorithms as algorithms
    from lightning_sfl.client_store import client_stores
    from lightning_sfl.data import FederatedDataModule

    torch.set_num_threads(1)
    torch.manual_seed(0)
    dm = FederatedDataModule(
        dataset="leaf_synthetic", partition="natural", leaf_lambda=1.0, leaf_mu=1.0, leaf_size_log_mean=0.0,
        num_clients=clients, participation=per_round / clients, batch_size=10 * per_round, seed=0,
    )  # fmt: skip
    dm.prepare_data()
    dm.setup("fit")
    model = getattr(algorithms, method)(
        arch="logistic", split_point="s1", local_iters=5, lr=0.01, input_shape=dm.input_shape,
        num_classes=dm.num_classes,
    )  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="client_state_bench-"))
    trainer = L.Trainer(
        max_epochs=rounds, logger=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[ModelCheckpoint(dirpath=folder, save_last=True)], num_sanity_val_steps=0, limit_val_batches=0,
    )  # fmt: skip
    start_memory = resident_bytes()
    sampler = PeakSampler()
    sampler.start()
    start = time.perf_counter()
    trainer.fit(model, dm)
    seconds = time.perf_counter() - start
    sampler.running = False
    sampler.join()
    stores = client_stores(model)
    parameters = sum(p.numel() for p in model.client.net.parameters())
    held = list(stores.values())
    return {
        "method": method,
        "clients": clients,
        "seconds": seconds,
        "fit_memory": sampler.peak - start_memory,
        "checkpoint": (folder / "last.ckpt").stat().st_size,
        "state_files": sum(f.stat().st_size for f in (folder / "client_state").rglob("*.pt")),
        "rows_held": max((s.rows_held() for s in held), default=0),
        "store_memory": sum(s._slab.numel() * s._slab.element_size() for s in held),
        "dense_bytes": len(held) * clients * parameters * 4,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=["FedDyn", "Scaffold"])
    parser.add_argument("--clients", nargs="+", type=int, default=[100, 1000, 10_000])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--per_round", type=int, default=10)
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # METHOD K: run one in this process, print JSON
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_run(args.one[0], int(args.one[1]), args.rounds, args.per_round)))
        return
    results = []
    for method in ["FedAvg", *args.methods]:  # FedAvg: the control, no per-client state
        for clients in args.clients:
            command = [sys.executable, __file__, "--one", method, str(clients), "--rounds", str(args.rounds),
                       "--per_round", str(args.per_round)]  # fmt: skip
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            results.append(json.loads(out.strip().splitlines()[-1]))
            r = results[-1]
            control = next(c for c in results if c["method"] == "FedAvg" and c["clients"] == clients)
            r["added_memory"] = r["fit_memory"] - control["fit_memory"]
            print(
                f"{method:8s} K={clients:>6,d}  fit {r['seconds']:5.1f} s  stores {r['store_memory'] / 1024:6.1f} KiB"
                f" ({r['rows_held']:3d} rows)  training memory {r['fit_memory'] / MIB:5.1f} MiB (FedAvg's"
                f" {r['added_memory'] / MIB:+5.1f})  last.ckpt {r['checkpoint'] / 1024:5.1f} KiB  state files"
                f" {r['state_files'] / 1024:5.1f} KiB  as [K, P] tensors {r['dense_bytes'] / MIB:5.1f} MiB",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    small, large = sorted(args.clients)[-2:] if len(args.clients) > 1 else (args.clients[0],) * 2
    verdicts = []
    for method in args.methods:
        a, b = (next(r for r in results if r["method"] == method and r["clients"] == k) for k in (small, large))
        for key, label in (("store_memory", "stores' memory"), ("checkpoint", "last checkpoint"),
                           ("state_files", "state files")):  # fmt: skip
            ratio = b[key] / a[key]
            verdicts.append(ratio <= 1.1)
            verdict = "flat" if ratio <= 1.1 else "NOT flat"
            print(f"{method}: {label} K={large:,d} / K={small:,d} = {ratio:.2f} ({verdict})")
        grown = (b["added_memory"] - a["added_memory"]) / MIB
        dense = (b["dense_bytes"] - a["dense_bytes"]) / MIB
        verdicts.append(grown < 2)
        print(f"{method}: memory it adds to FedAvg's grows by {grown:+.1f} MiB from K={small:,d} to K={large:,d} "
              f"(the [K, P] layout: {dense:+.1f} MiB) ({'flat' if grown < 2 else 'NOT flat'})")  # fmt: skip
    print("per-client state flat in K:", "yes" if all(verdicts) else "no")


if __name__ == "__main__":
    main()
