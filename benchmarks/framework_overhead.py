"""Framework tax: a round of ``lightning-sfl fit`` (the digits main job) against a plain-PyTorch SCALA loop doing the
same arithmetic, and the start-up of both; measured in the same run, as ratios.

Run (from the repository root, with the package installed)::

    python benchmarks/framework_overhead.py                       # 1- and 61-round runs, 5 repeats each (~4 min)
    python benchmarks/framework_overhead.py --rounds 101 --repeats 7 --json overhead.json
    python benchmarks/framework_overhead.py --quick               # 1- and 3-round runs, 1 repeat (a smoke run)
    python benchmarks/framework_overhead.py --device cuda --rounds 21 --repeats 3   # both sides on one GPU
    python benchmarks/framework_overhead.py --ours-args='--trainer.logger lightning.pytorch.loggers.CSVLogger
        --trainer.logger.save_dir runs'                            # what W&B costs: ours with the CSV logger alone

Both sides run as fresh processes on one thread, timed from the start of the process to its exit (the median of
``--repeats``, interleaved so that both see the same machine load):

``ours``
    ``lightning-sfl fit --config configs/digits/scala.yaml --trainer.max_epochs R --dissimilarity.every_n_rounds 0``
    in a temporary folder: SCALA, cnn_small cut at s2, 20 clients with 2 classes each (quantity skew α = 2), 5 per
    round, B = 64 rows per local iteration split by eq. 3, T = 5, lr 0.05; evaluation every round; everything else
    as the CLI has it (W&B offline, in a process of its own, and CSV loggers, checkpoints, per-class accuracy, byte
    ledger, simulated clock, round progress bar; the process ends without Python's module teardown). Gradient
    dissimilarity is off: it is an optional measurement, not the method.
``plain``
    This file with ``--plain``: the same setting written as a plain PyTorch loop (:func:`plain_scala`): one copy of
    the client half per selected client, its activations concatenated, the server updated on ``CE(s + log P_s)``,
    each client's gradient from ``CE(s + log P_k)`` of the same forward (eqs. 14-15), every client stepped, the
    halves averaged with ``|D_k|`` weights (eq. 10), then the test accuracy (and per-class accuracy) of the global
    model. It imports torch, scikit-learn and, for the max pooling, ``lightning_sfl.models.pooling`` (the zoo's:
    PyTorch's channels-last kernel forward, the NCHW one backward; ``--plain-pool torch``: ``nn.MaxPool2d``, which
    makes the plain loop slower, not the framework's tax smaller), logs nothing and writes no file.

Per round = (R-round run − 1-round run) / (R − 1) (R = 61 by default: a run's start varies by a few tenths of a
second on a shared machine, which 20 rounds would turn into ±15 ms a round); start-up = 1-round run − per round
(process start, imports, data, partition, model, first evaluation set-up). The ratios printed are ours ÷ plain.
``lightning-sfl --help`` is timed too (the CLI imports nothing heavy for it).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "digits" / "scala.yaml"
#: The digits main job's setting (configs/digits/scala.yaml), for the plain loop.
CLIENTS, PER_ROUND, BATCH, LOCAL_ITERS, LR, TEST_FRACTION = 20, 5, 64, 5, 0.05, 0.2


def plain_scala(rounds: int, seed: int = 0, pool: str = "zoo", device: str = "cpu") -> float:
    """SCALA on digits in plain PyTorch (see the module docstring); returns the final test accuracy. ``pool``:
    ``"zoo"``, the zoo's max pooling (the same kernels as ours), or ``"torch"``, ``nn.MaxPool2d``. ``device``: where
    the data, the models and the arithmetic live (the sampling of rows stays on the CPU, as ours)."""
    import copy

    import numpy as np
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    from torch import nn

    if pool == "zoo":
        from lightning_sfl.models.pooling import MaxPool2d
    else:
        MaxPool2d = nn.MaxPool2d  # noqa: N806
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    data, target = load_digits(return_X_y=True)
    x = torch.from_numpy((data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8))
    y = torch.from_numpy(target.astype(np.int64))
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(y), generator=gen)
    n_test = round(len(y) * TEST_FRACTION)
    test_x, test_y, x, y = x[order[:n_test]], y[order[:n_test]], x[order[n_test:]], y[order[n_test:]]
    mean, std = x.mean(), x.std()
    x, test_x = ((x - mean) / std).to(device), ((test_x - mean) / std).to(device)
    y, test_y = y.to(device), test_y.to(device)
    # quantity skew, 2 classes per client: clients 0-9 hold classes (k, k+1), clients 10-19 (k, k+3), mod 10, so
    # each class is split into 4 portions
    portions: dict[int, list[torch.Tensor]] = {}
    for c in range(10):
        rows = torch.nonzero(y == c).flatten()
        portions[c] = list(rows[torch.randperm(len(rows), generator=gen)].chunk(4))
    shards = []
    for k in range(CLIENTS):
        first, second = k % 10, (k + 1 + 2 * (k // 10)) % 10
        shards.append(torch.cat([portions[first].pop(), portions[second].pop()]))
    sizes = torch.tensor([len(s) for s in shards], dtype=torch.float64)
    priors = torch.stack([torch.bincount(y[s], minlength=10).double() / len(s) for s in shards]).float().to(device)

    client = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                           MaxPool2d(2))  # fmt: skip
    server = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), MaxPool2d(2), nn.Flatten(),
                           nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))  # fmt: skip
    for layer in [*client, *server]:  # the zoo's cnn_small: Kaiming normal (fan-in), zero biases
        if isinstance(layer, nn.Conv2d | nn.Linear):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu"), nn.init.zeros_(layer.bias)
    client, server = client.to(device), server.to(device)
    server_opt = torch.optim.SGD(server.parameters(), lr=LR)
    cursors = [torch.randperm(len(s), generator=gen) for s in shards]
    acc = 0.0
    for _ in range(rounds):
        chosen = torch.randperm(CLIENTS, generator=gen)[:PER_ROUND].tolist()
        exact = sizes[chosen] * BATCH / sizes[chosen].sum()  # eq. 3, largest remainder
        b_k = exact.floor().long()
        b_k[torch.argsort(-(exact - b_k), stable=True)[: BATCH - int(b_k.sum())]] += 1
        halves = [copy.deepcopy(client) for _ in chosen]
        opts = [torch.optim.SGD(h.parameters(), lr=LR) for h in halves]
        for _ in range(LOCAL_ITERS):
            xs, ys = [], []
            for k, b in zip(chosen, b_k.tolist()):
                if len(cursors[k]) < b:
                    cursors[k] = torch.cat([cursors[k], torch.randperm(len(shards[k]), generator=gen)])
                rows, cursors[k] = shards[k][cursors[k][:b]], cursors[k][b:]
                xs.append(x[rows]), ys.append(y[rows])
            acts = [h(xk) for h, xk in zip(halves, xs)]
            a = torch.cat(acts).detach().requires_grad_(True)
            labels = torch.cat(ys)
            logits = server(a)
            p_s = torch.bincount(labels, minlength=10).float() / len(labels)
            server_loss = F.cross_entropy(logits + torch.log(p_s + 1e-12), labels)
            owner = torch.repeat_interleave(torch.arange(len(chosen)), b_k)
            adjusted = logits + torch.log(priors[chosen][owner] + 1e-12)
            rows_loss = F.cross_entropy(adjusted, labels, reduction="none")
            client_loss = (rows_loss / b_k[owner].to(device)).sum()  # Σ_k mean over client k's rows
            (grad_a,) = torch.autograd.grad(client_loss, a, retain_graph=True)
            server_opt.zero_grad()
            server_loss.backward()
            server_opt.step()
            for opt, act, g in zip(opts, acts, grad_a.split(b_k.tolist())):
                opt.zero_grad()
                act.backward(g)
                opt.step()
        weights = (sizes[chosen] / sizes[chosen].sum()).float().tolist()
        with torch.no_grad():
            for name, p in client.named_parameters():
                p.copy_(sum(w * dict(h.named_parameters())[name] for w, h in zip(weights, halves)))
            preds = server(client(test_x)).argmax(1)
            acc = float((preds == test_y).float().mean())
            per_class = torch.bincount(test_y[preds == test_y], minlength=10) / torch.bincount(test_y, minlength=10)
            assert torch.isfinite(per_class).all()
    return acc


def _ours_command(rounds: int, extra: tuple[str, ...] = (), device: str = "cpu") -> list[str]:
    on_device = ["--trainer.accelerator=gpu", "--trainer.devices=1"] if device == "cuda" else []
    return [sys.executable, "-m", "lightning_sfl.cli", "fit", "--config", str(CONFIG),
            f"--trainer.max_epochs={rounds}", "--dissimilarity.every_n_rounds=0", *on_device, *extra]  # fmt: skip


def _plain_command(rounds: int, pool: str = "zoo", device: str = "cpu") -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--plain", "--rounds", str(rounds), "--plain-pool", pool,
            "--device", device]  # fmt: skip


def _timed(cmd: list[str]) -> float:
    """Wall seconds of ``cmd`` as a fresh process in an empty folder (W&B offline); it must succeed."""
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as cwd:
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return seconds


def measure(
    rounds: int, repeats: int, ours_args: tuple[str, ...] = (), plain_pool: str = "zoo", device: str = "cpu"
) -> dict:
    """Medians of ``repeats`` interleaved timings of both sides at 1 and ``rounds`` rounds, and what follows."""
    commands = {"ours": functools.partial(_ours_command, extra=ours_args, device=device),
                "plain": functools.partial(_plain_command, pool=plain_pool, device=device)}  # fmt: skip
    runs: dict = {(side, r): [] for side in commands for r in (1, rounds)}
    helps = []
    for _ in range(repeats):
        for (side, r), times in runs.items():
            times.append(_timed(commands[side](r)))
        helps.append(_timed([sys.executable, "-m", "lightning_sfl.cli", "--help"]))
    med = {k: statistics.median(v) for k, v in runs.items()}
    med["help"] = statistics.median(helps)
    out: dict = {"rounds": rounds, "repeats": repeats, "help_s": med["help"], "ours_args": list(ours_args),
                 "plain_pool": plain_pool, "device": device}  # fmt: skip
    for side in ("ours", "plain"):
        per_round = (med[side, rounds] - med[side, 1]) / (rounds - 1)
        out[side] = {"one_round_s": med[side, 1], "long_run_s": med[side, rounds], "per_round_s": per_round,
                     "startup_s": med[side, 1] - per_round}  # fmt: skip
    out["per_round_ratio"] = out["ours"]["per_round_s"] / out["plain"]["per_round_s"]
    out["startup_ratio"] = out["ours"]["startup_s"] / out["plain"]["startup_s"]
    return out


def report(r: dict) -> str:
    lines = [
        f"framework overhead, digits main job, 1 thread{', CUDA' if r.get('device') == 'cuda' else ''}, "
        f"medians of {r['repeats']} (1- and {r['rounds']}-round runs)"
        + (f"; ours with {shlex.join(r['ours_args'])}" if r.get("ours_args") else "")
        + ("; plain with nn.MaxPool2d" if r.get("plain_pool") == "torch" else ""),
        f"{'':8}{'1 round (s)':>13}{str(r['rounds']) + ' rounds (s)':>15}{'per round (ms)':>16}{'start-up (s)':>14}",
    ]
    for side in ("ours", "plain"):
        s = r[side]
        lines.append(f"{side:8}{s['one_round_s']:>13.2f}{s['long_run_s']:>15.2f}{1e3 * s['per_round_s']:>16.1f}"
                     f"{s['startup_s']:>14.2f}")  # fmt: skip
    lines += [
        f"per-round ratio ours / plain: {r['per_round_ratio']:.2f} (target <= 1.1)",
        f"start-up ratio ours / plain:  {r['startup_ratio']:.2f} (target <= 1.5)",
        f"lightning-sfl --help:         {r['help_s']:.2f} s (target < 2)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=61, help="rounds of the long run (>= 2)")
    parser.add_argument("--repeats", type=int, default=5, help="timings per configuration (median)")
    parser.add_argument("--quick", action="store_true", help="3 rounds, 1 repeat (a smoke run)")
    parser.add_argument("--plain", action="store_true", help="run the plain loop itself for --rounds rounds")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--ours-args", default="", help="extra fit options for our side (e.g. a logger)")
    pools = "the plain loop's max pooling: the zoo's (the same kernels as ours) or torch's"
    parser.add_argument("--plain-pool", choices=("zoo", "torch"), default="zoo", help=pools)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where both sides compute")
    args = parser.parse_args(argv)
    if args.plain:
        acc = plain_scala(args.rounds, pool=args.plain_pool, device=args.device)
        print(f"plain SCALA: test accuracy {acc:.4f} after {args.rounds} rounds")
        return
    if args.quick:
        args.rounds, args.repeats = 3, 1
    if args.rounds < 2 or args.repeats < 1:
        parser.error(f"--rounds={args.rounds} must be >= 2 and --repeats={args.repeats} >= 1")
    result = measure(args.rounds, args.repeats, tuple(shlex.split(args.ours_args)), args.plain_pool, args.device)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
