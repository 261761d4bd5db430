"""How close the stacked client bank comes to the same SCALA local iteration written by hand in plain PyTorch.

Run (from the repository root)::

    python benchmarks/stacked_floor.py                       # cnn_small s2, B=64, S=50, 1 thread (~15 s)
    python benchmarks/stacked_floor.py --clients 10 --repeats 101 --json floor.json

``client_scaling.py`` times the library's stacked bank (``ours-stacked``) against the naive per-client loop and one
centralized step. This script adds a fifth implementation of the same iteration, ``hand-written``: the client
half of ``cnn_small`` (conv-ReLU-conv-ReLU-pool) coded directly for the stacked layout, with nothing of the
library's machinery (no bank, plan, hooks, guards or ledger):

* the clients' parameters as ``[S, ...]`` tensors, the clients of equal ``B_k`` in consecutive rows, one ``split``
  per tensor into those groups;
* per group, the group's rows gathered as ``[R, G·C, H, W]`` and two grouped convolutions (``groups = G``);
* the outputs back in row order, the server half on them, ``CE(s + log P_s)`` and ``Σ_k mean CE(s + log P_k)``,
  ``G_k`` by ``autograd.grad``, the two backward passes and one SGD step over everything.

Same start, same batch and same arithmetic as the other implementations (checked: after one float64 iteration its
client and server weights equal ``ours-stacked``'s). It is as fast as the batched path gets with PyTorch's grouped
convolutions on this device, so

* ``ours / hand-written`` is what the library adds to an iteration (its hooks, NaN guards and byte ledger);
* ``naive / hand-written`` is the most that ``naive / ours`` can reach with these kernels, and
  ``hand-written / centralized`` the least that ``ours / centralized`` can.

Timings are interleaved (implementation after implementation, one iteration each, repeat after repeat) and
reported as medians, as in ``client_scaling.py``. The exit status is 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import client_scaling as cs  # the sibling benchmark (this folder is on sys.path when run as a script)
import torch
import torch.nn.functional as F

from lightning_sfl.models import split_model
from lightning_sfl.models.pooling import max_pool2d
from lightning_sfl.process.memory import retain_freed_memory

ARCH = "cnn_small"
IMPLS = ("ours-stacked", "hand-written", "naive", "centralized")


class HandWritten:
    """SCALA's local iteration for ``cnn_small`` cut at ``s2``, written for the stacked layout (module docstring)."""

    def __init__(self, init: torch.nn.Module, cfg: cs.Config, rnd: cs.Round, device: torch.device) -> None:
        client, self.server = (h.to(device) for h in split_model(copy.deepcopy(init), cs.CUT))
        conv1, conv2 = client[0], client[2]
        sizes = rnd.sizes
        distinct = sorted(set(b for b in sizes if b > 0))
        self.groups = [[k for k, b in enumerate(sizes) if b == r] for r in distinct]  # clients of equal B_k
        self.order = [k for g in self.groups for k in g]  # client in each row of the stacked tensors
        s = len(self.order)
        self.w = [
            torch.nn.Parameter(p.detach().unsqueeze(0).repeat(s, *[1] * p.dim()))
            for p in (conv1.weight, conv1.bias, conv2.weight, conv2.bias)
        ]
        self.opt = torch.optim.SGD([*self.w, *self.server.parameters()], lr=cs.LR)
        offsets = torch.tensor([0, *sizes]).cumsum(0)
        gathers = []  # per group: the rows of x in [R, G] order
        for r, g in zip(distinct, self.groups):
            gathers.append((offsets[g].unsqueeze(0) + torch.arange(r).unsqueeze(1)).flatten())
        self.gather = [i.to(device) for i in gathers]
        self.inverse = torch.argsort(torch.cat(gathers)).to(device)  # groups' order -> row order
        self.rows_per_group = distinct
        b = rnd.batch
        self.x, self.y = b.x, b.y
        p_s = b.label_counts.to(torch.get_default_dtype())
        self.log_p_s = (p_s / p_s.sum()).log()
        self.log_p_k = rnd.label_dist.log().index_select(0, b.owner)  # [B, N]
        self.row_weight = 1.0 / torch.tensor(sizes, dtype=torch.get_default_dtype(), device=device)[b.owner]
        self.channels = conv1.in_channels

    def _group(self, x: torch.Tensor, w: list[torch.Tensor], r: int) -> torch.Tensor:
        """``x`` ``[R·G, C, H, W]`` (``[R, G]`` order) through every client's conv-ReLU-conv-ReLU-pool."""
        w1, b1, w2, b2 = w
        g = w1.shape[0]
        h = F.conv2d(x.view(r, g * self.channels, *x.shape[2:]), w1.flatten(0, 1), b1.flatten(), 1, 1, 1, g).relu()
        h = F.conv2d(h, w2.flatten(0, 1), b2.flatten(), 1, 1, 1, g).relu()
        return max_pool2d(h.view(r * g, w2.shape[1], *h.shape[2:]), 2, 2)

    def step(self) -> None:
        self.opt.zero_grad()
        parts = list(zip(*(t.split([len(g) for g in self.groups]) for t in self.w)))
        outs = [
            self._group(self.x.index_select(0, pos), list(w), r)
            for pos, w, r in zip(self.gather, parts, self.rows_per_group)
        ]
        acts = torch.cat(outs).index_select(0, self.inverse)
        a = acts.detach().requires_grad_(True)
        logits = self.server(a)
        server_loss = F.cross_entropy(logits + self.log_p_s, self.y)
        client_loss = (F.cross_entropy(logits + self.log_p_k, self.y, reduction="none") * self.row_weight).sum()
        (grad_a,) = torch.autograd.grad(client_loss, a, retain_graph=True)
        server_loss.backward(inputs=list(self.server.parameters()))
        acts.backward(grad_a)
        self.opt.step()

    def weights(self) -> tuple[list[list[torch.Tensor]], list[torch.Tensor]]:
        row_of = {k: i for i, k in enumerate(self.order)}
        slots = [[t[row_of[k]].detach().cpu().clone() for t in self.w] for k in range(len(self.order))]
        return slots, [p.detach().cpu().clone() for p in self.server.parameters()]


def build(impl: str, init: torch.nn.Module, cfg: cs.Config, rnd: cs.Round, device: torch.device):
    return HandWritten(init, cfg, rnd, device) if impl == "hand-written" else cs.build(impl, init, cfg, rnd, device)


def same_weights(cfg: cs.Config, device: torch.device) -> float:
    """Largest difference between hand-written's and ours-stacked's weights after one float64 iteration from the same
    start, relative to the largest update (0: identical)."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        rnd = cs.synthetic_round(cfg, device)
        rnd.batch = rnd.batch.replace(x=rnd.batch.x.double())
        init = cs.initial_model(ARCH)
        start = [p.detach().clone() for p in split_model(copy.deepcopy(init), cs.CUT)[0].parameters()]
        snaps = {}
        for name in ("ours-stacked", "hand-written"):
            impl = build(name, init, cfg, rnd, device)
            impl.step()
            snaps[name] = impl.weights()
        (ours_slots, ours_server), (hand_slots, hand_server) = snaps["ours-stacked"], snaps["hand-written"]
        pairs = list(zip(ours_server, hand_server)) + [
            (a, b) for sa, sb in zip(ours_slots, hand_slots) for a, b in zip(sa, sb)
        ]
        update = max(float((a - w0.cpu()).abs().max()) for sa in ours_slots for a, w0 in zip(sa, start))
        return max(float((a - b).abs().max()) for a, b in pairs) / update
    finally:
        torch.set_default_dtype(default)


def time_all(cfg: cs.Config, device: torch.device, warmup: int, repeats: int) -> dict[str, float]:
    """Median seconds per iteration of each of :data:`IMPLS`, interleaved."""
    rnd = cs.synthetic_round(cfg, device)
    init = cs.initial_model(ARCH)
    impls = {name: build(name, init, cfg, rnd, device) for name in IMPLS}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    samples: dict[str, list[float]] = {name: [] for name in IMPLS}
    for r in range(warmup + repeats):
        for name, impl in impls.items():
            sync()
            t0 = time.perf_counter()
            impl.step()
            sync()
            if r >= warmup:
                samples[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) for name, v in samples.items()}


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--clients", type=_positive, default=50, help="clients per iteration S (default 50)")
    p.add_argument("--batch", type=_positive, default=64, help="rows per iteration B across the clients (default 64)")
    p.add_argument("--repeats", type=_positive, default=51, help="timed iterations per implementation (default 51)")
    p.add_argument("--warmup", type=_positive, default=3, help="untimed iterations first (default 3)")
    p.add_argument("--threads", type=_positive, default=1, help="torch threads (default 1, as client_scaling.py)")
    p.add_argument("--json", type=Path, default=None, help="also write every number to this JSON file")
    args = p.parse_args(argv)
    if args.clients > args.batch:
        p.error(f"--clients {args.clients} must be <= --batch {args.batch} (every client has a row)")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available: nothing measured")
        return 0
    retain_freed_memory()  # what the CLI does before every command
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cfg = cs.Config(ARCH, args.clients, args.batch)
    diff = same_weights(cfg, device)
    med = time_all(cfg, device, args.warmup, args.repeats)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(f"{ARCH} {cs.CUT}  S={cfg.clients} B={cfg.batch}: one SCALA local iteration, ms")
    print(f"{device.type} ({name}), torch {torch.__version__}, {torch.get_num_threads()} threads, ", end="")
    print(f"median of {args.repeats} after {args.warmup} warm-up, interleaved")
    for impl in IMPLS:
        print(f"  {impl:<14} {1000 * med[impl]:8.2f}")
    ratios = {
        "ours_over_hand_written": med["ours-stacked"] / med["hand-written"],
        "hand_written_over_centralized": med["hand-written"] / med["centralized"],
        "naive_over_hand_written": med["naive"] / med["hand-written"],
        "ours_over_centralized": med["ours-stacked"] / med["centralized"],
        "naive_over_ours": med["naive"] / med["ours-stacked"],
    }
    print(f"ours / hand-written          {ratios['ours_over_hand_written']:5.2f}   what the library adds")
    print(
        f"hand-written / centralized   {ratios['hand_written_over_centralized']:5.2f}   "
        f"the floor of ours / centralized (ours: {ratios['ours_over_centralized']:.2f})"
    )
    print(
        f"naive / hand-written         {ratios['naive_over_hand_written']:5.2f}   "
        f"the ceiling of naive / ours (ours: {ratios['naive_over_ours']:.2f})"
    )
    ok = diff < 1e-6
    print(f"weights after one float64 iteration: hand-written = ours-stacked: {'OK' if ok else 'DIFFER'} ({diff:.1e})")
    if args.json is not None:
        report = {"config": vars(cfg) | {"device": device.type, "threads": torch.get_num_threads()}}
        report |= {"median_s": med, "ratios": ratios, "weights_max_diff_over_update": diff, "weights_ok": ok}
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
