"""Speed and memory of ONE SCALA local iteration as the number of selected clients grows.

Run (from the repository root)::

    python benchmarks/client_scaling.py                          # CPU, 1 thread, all configurations (~2-4 min)
    python benchmarks/client_scaling.py --device cuda            # GPU
    python benchmarks/client_scaling.py --device cuda --clients 10,50,100   # both models at each S
    python benchmarks/client_scaling.py --threads 0 --repeats 9 --json results.json  # torch's default threads
    python benchmarks/client_scaling.py --quick --repeats 1      # smoke run (~30 s)

``--threads`` defaults to 1: the per-client operations are tiny, and with more OpenMP threads than free cores (a
shared machine) each small op can stall at its barrier for a scheduler time slice (an AlexNet iteration took 0.4 s
on 1 thread and 7-13 s on 2 threads of a 2-core machine busy with another job). On a dedicated machine pass
``--threads 0`` (torch's default) or the number of physical cores; ratios can differ between the two settings.

What is timed (synthetic data, label-skewed clients with unequal ``B_k`` from ``client_batch_sizes``): one SCALA
local iteration = every client's forward, concatenation, server forward, logit-adjusted server loss with ``P_s``,
client loss with each client's ``P_k``, backward passes, one SGD step of every client slot and of the server.
Four implementations of that work run in the same process on the same batch and the same initial weights:

``ours-sequential`` / ``ours-stacked``
    The library's real code path: a :class:`~lightning_sfl.algorithms.scala.SCALA` module with its client bank
    (``SequentialBank`` / ``StackedBank`` from ``make_bank``), buffers and optimiser set up as its ``setup`` /
    ``configure_optimizers`` / ``start_round`` do, and ``SCALA.local_iteration(batch)`` called directly. No
    Trainer is attached: the two Trainer services that method uses are replaced by their one-device equivalents
    (``optimizers()`` returns the ``torch.optim.SGD`` of ``configure_optimizers``; ``manual_backward(t, *a)`` is
    ``t.backward(*a)``, which is what Lightning's single-device strategy does at full precision). Lightning's
    loop overhead (logging, hooks) is therefore not included.
``naive``
    The loop of public SFL code: one ``copy.deepcopy`` of the client half and one ``torch.optim.SGD`` per client
    (made once per round, outside the timed iteration), clients one after another: forward, send activations
    (``detach().requires_grad_()``), server forward on the concatenation, server step, then every client
    backpropagates its gradient and steps its own optimiser.
``centralized``
    One SGD step of the unsplit model on the same ``B`` rows with the server's loss (CE with ``log P_s``).

The first (untimed warm-up) iteration of each implementation is also a correctness check: ours-sequential,
ours-stacked and naive must give the same weights for every client slot and the server (``allclose``), and the
centralized model the same server half (same activations, same loss, so the same server gradient). Timings are
interleaved (implementation after implementation, repeat after repeat) and reported as medians, so the ratios
compare runs made under the same machine load.

Memory: peak memory of a fresh subprocess that builds one round's state (global halves, ``S`` client copies,
optimiser, batch) and runs one local iteration, minus what that process held just before building it. On CUDA
that is ``torch.cuda.max_memory_allocated()`` (live tensors at the peak, allocator cache excluded). On CPU torch's
allocations are invisible to ``tracemalloc``, so the resident set size is used: on Linux the peak RSS is reset to
the current RSS (``echo 5 > /proc/self/clear_refs``) after the imports and the probe reports ``VmHWM`` at the end
minus ``VmRSS`` at the reset (elsewhere: the growth of ``getrusage().ru_maxrss``, a lower bound if the imports
peaked higher). RSS includes allocator slack and lazily created library state (a few MiB, oneDNN caches), so it
bounds the tensors' peak from above; the ratio of two such figures is what is reported.

``--quick`` keeps the four configurations but shrinks the AlexNet batch (``B = 100``), uses one warm-up, and
probes the memory of the faster ``ours`` bank only: its ratios are indicative, not the reference numbers.
The exit status is 0 whatever the numbers (this is a measurement, not a test).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from lightning_sfl.algorithms.scala import SCALA
from lightning_sfl.loop import ClientStats, Federation, Step
from lightning_sfl.loop.sampling import client_batch_sizes
from lightning_sfl.models import build_model, split_model
from lightning_sfl.process.memory import retain_freed_memory
from lightning_sfl.runtime.stacked_bank import StackedBank, make_bank
from lightning_sfl.system.wireless import WirelessCell

CUT = "s2"
LR = 0.01
NUM_CLASSES = 10
CLASSES_PER_CLIENT = 2
IMPLS = ("ours-sequential", "ours-stacked", "naive", "centralized")
BANK_OF = {"ours-sequential": "sequential", "ours-stacked": "stacked"}
AUTO_MARGIN = 0.10  # a bank must be this much faster than auto's pick to suggest changing the rule
MODELS = {"cnn_small": (1, 8, 8), "alexnet_cifar": (3, 32, 32)}


@dataclass(frozen=True)
class Config:
    arch: str
    clients: int
    batch: int

    @property
    def label(self) -> str:
        return f"{self.arch} {CUT}  S={self.clients:<3d} B={self.batch}"


def configs(quick: bool, clients: list[int] | None = None) -> list[Config]:
    """The configurations timed: by default cnn_small at S = 10, 50 and AlexNet at S = 10, 100; ``clients``: both
    models at each of those S, with ``B`` at least ``2 S`` (cnn_small at S = 100: B = 200)."""
    alex_b = 100 if quick else 320
    if clients:
        batch = {"cnn_small": lambda s: max(64, 2 * s), "alexnet_cifar": lambda s: max(alex_b, 2 * s)}  # B_k >= 1
        return [Config(arch, s, batch[arch](s)) for arch in MODELS for s in sorted(set(clients))]
    return [
        Config("cnn_small", 10, 64),
        Config("cnn_small", 50, 64),
        Config("alexnet_cifar", 10, alex_b),
        Config("alexnet_cifar", 100, alex_b),
    ]


# ---------------------------------------------------------------------------------------------------- synthetic data
@dataclass
class Round:
    batch: Step  # one synchronous step as FederatedDataModule yields it
    label_dist: torch.Tensor  # [S, N]: P_k of each client
    client_sizes: torch.Tensor  # [S]: |D_k|
    sizes: list[int]  # B_k as Python ints


def synthetic_round(cfg: Config, device: torch.device, seed: int = 0) -> Round:
    """Label-skewed clients (``CLASSES_PER_CLIENT`` classes each), ``|D_k|`` in [50, 500], ``B_k`` by eq. (3)."""
    g = torch.Generator().manual_seed(seed)
    s, n = cfg.clients, NUM_CLASSES
    client_sizes = torch.randint(50, 501, (s,), generator=g)
    sizes = client_batch_sizes(client_sizes, cfg.batch)
    label_dist = torch.zeros(s, n)
    for k in range(s):
        classes = torch.randperm(n, generator=g)[:CLASSES_PER_CLIENT]
        w = torch.rand(CLASSES_PER_CLIENT, generator=g) + 0.2
        label_dist[k, classes] = w / w.sum()
    y = torch.cat(
        [torch.multinomial(label_dist[k], int(b), replacement=True, generator=g) for k, b in enumerate(sizes)]
    )
    x = torch.randn(cfg.batch, *MODELS[cfg.arch], generator=g)
    batch = Step(
        "local",
        0,
        0,
        False,
        clients=torch.arange(s),
        sizes=sizes,
        rows=torch.arange(cfg.batch),
        x=x,
        y=y,
        owner=torch.repeat_interleave(torch.arange(s), sizes),
        local_sizes=sizes,
        label_counts=torch.bincount(y, minlength=n),
    ).to(device)
    return Round(batch, label_dist.to(device), client_sizes.to(device), sizes.tolist())


def initial_model(arch: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return build_model(arch, NUM_CLASSES, MODELS[arch])


# ---------------------------------------------------------------------------------------------------- implementations
class _BenchSCALA(SCALA):
    """SCALA without a Trainer: ``local_iteration`` needs only ``optimizers()`` and ``manual_backward``, ``setup`` a
    device for its banks."""

    bench_opt: torch.optim.Optimizer | None = None
    bench_device: torch.device = torch.device("cpu")

    def optimizers(self, use_pl_optimizer: bool = True):
        return self.bench_opt

    def manual_backward(self, loss: torch.Tensor, *args, **kwargs) -> None:
        loss.backward(*args, **kwargs)

    def make_bank(self, template: nn.Module, num_slots: int):
        return make_bank(template, num_slots, self.client_bank, device=self.bench_device)


def round_federation(m: SCALA, cfg: Config, rnd: Round) -> Federation:
    """The federation of the synthetic round's ``S`` clients (all of them selected), handed to ``m``."""
    counts = (rnd.label_dist.cpu().double() * rnd.client_sizes.cpu()[:, None]).round().long()
    stats = ClientStats(
        sizes=rnd.client_sizes.cpu(),
        label_counts=counts,
        label_distribution=rnd.label_dist.cpu(),
        shards=[torch.zeros(int(n), dtype=torch.long) for n in rnd.client_sizes.tolist()],
        clients_per_round=cfg.clients,
        batch_size=cfg.batch,
        seed=0,
    )
    federation = Federation(stats, m.schedule, WirelessCell())
    m.federate(federation)
    return federation


class Ours:
    """The library's SCALA with a ``sequential`` or ``stacked`` client bank (see the module docstring)."""

    def __init__(self, kind: str, init: nn.Module, cfg: Config, rnd: Round, device: torch.device) -> None:
        m = _BenchSCALA(
            arch=cfg.arch,
            split_point=CUT,
            lr=LR,
            num_classes=NUM_CLASSES,
            input_shape=MODELS[cfg.arch],
            client_bank=kind,
        )
        client, server = split_model(copy.deepcopy(init), CUT)
        m.client.net.load_state_dict(client.state_dict())
        m.server.net.load_state_dict(server.state_dict())
        m.bench_device = device
        round_federation(m, cfg, rnd)
        m.setup("fit")  # the federation's numbers as buffers, the bank of S slots
        m.to(device).train()
        m.bench_opt = m.configure_optimizers()
        # Round start (what training_step does before a round's first step):
        m.ledger.start(len(m.bank))
        m.start_round(rnd.batch)
        self.m, self.batch = m, rnd.batch

    def step(self) -> None:
        self.m.local_iteration(self.batch)

    def weights(self) -> tuple[list[list[torch.Tensor]], list[torch.Tensor]]:
        slots = [[p.detach().cpu().clone() for p in slot.parameters()] for slot in self.m.bank.slots]
        return slots, [p.detach().cpu().clone() for p in self.m.server.net.parameters()]


class Naive:
    """Per-client deep copies and optimisers, clients one after another (see the module docstring)."""

    def __init__(self, init: nn.Module, cfg: Config, rnd: Round, device: torch.device) -> None:
        client, server = split_model(copy.deepcopy(init), CUT)
        self.client_global, self.server = client.to(device), server.to(device)
        self.server_opt = torch.optim.SGD(self.server.parameters(), lr=LR)
        self.priors = list(rnd.label_dist.unbind(0))  # client k knows its own P_k
        self.sizes = rnd.sizes
        self.batch = rnd.batch
        self.start_round()

    def start_round(self) -> None:
        self.clients = [copy.deepcopy(self.client_global) for _ in self.sizes]
        self.opts = [torch.optim.SGD(c.parameters(), lr=LR) for c in self.clients]

    def step(self) -> None:
        xs, ys = self.batch.x.split(self.sizes), self.batch.y.split(self.sizes)
        acts, sent = [], []
        for client, opt, x in zip(self.clients, self.opts, xs):  # clients, one after another
            opt.zero_grad()
            a = client(x)
            acts.append(a)
            sent.append(a.detach().requires_grad_(True))  # "send" the activations
        self.server_opt.zero_grad()
        logits = self.server(torch.cat(sent))
        y = torch.cat(ys)
        p_s = torch.bincount(y, minlength=NUM_CLASSES).float()
        server_loss = F.cross_entropy(logits + (p_s / p_s.sum()).log(), y)
        client_loss = sum(
            F.cross_entropy(lk + pk.log(), yk) for lk, pk, yk in zip(logits.split(self.sizes), self.priors, ys)
        )
        grads = torch.autograd.grad(client_loss, sent, retain_graph=True)  # G_k, from the pre-update server
        server_loss.backward()
        self.server_opt.step()
        for a, g, opt in zip(acts, grads, self.opts):  # "receive" G_k, backpropagate, step
            a.backward(g)
            opt.step()

    def weights(self) -> tuple[list[list[torch.Tensor]], list[torch.Tensor]]:
        slots = [[p.detach().cpu().clone() for p in c.parameters()] for c in self.clients]
        return slots, [p.detach().cpu().clone() for p in self.server.parameters()]


class Centralized:
    """One SGD step of the unsplit model on the same ``B`` rows (server loss: CE with ``log P_s``)."""

    def __init__(self, init: nn.Module, cfg: Config, rnd: Round, device: torch.device) -> None:
        self.model = copy.deepcopy(init).to(device).train()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=LR)
        self.batch = rnd.batch

    def step(self) -> None:
        self.opt.zero_grad()
        logits = self.model(self.batch.x)
        p_s = self.batch.label_counts.float()
        F.cross_entropy(logits + (p_s / p_s.sum()).log(), self.batch.y).backward()
        self.opt.step()

    def weights(self) -> tuple[None, list[torch.Tensor]]:
        _, server = split_model(self.model, CUT)
        return None, [p.detach().cpu().clone() for p in server.parameters()]


def build(impl: str, init: nn.Module, cfg: Config, rnd: Round, device: torch.device):
    if impl in BANK_OF:
        return Ours(BANK_OF[impl], init, cfg, rnd, device)
    return {"naive": Naive, "centralized": Centralized}[impl](init, cfg, rnd, device)


# ---------------------------------------------------------------------------------------------------- measurement
def _sync(device: torch.device) -> Callable[[], None]:
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def check_arithmetic(cfg: Config, device: torch.device) -> dict:
    """Whether the four implementations do the same arithmetic: one iteration of each from the same start on the
    same batch, in float64 (:func:`check_weights`). In float32 the banks' convolutions sum in other orders, and on
    AlexNet with 1-6 rows per client a slot's first-layer update can differ by ~1% of itself (cancellation in its
    gradient) where float64 agrees to 1e-7; float64 makes the check tight enough to catch a wrong gradient."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        rnd = synthetic_round(cfg, device)
        rnd.batch = rnd.batch.replace(x=rnd.batch.x.double())
        init = initial_model(cfg.arch)
        snapshots = {}
        for name in IMPLS:
            impl = build(name, init, cfg, rnd, device)
            impl.step()
            snapshots[name] = impl.weights()
            del impl
        return check_weights(snapshots, init, device)
    finally:
        torch.set_default_dtype(default)


def check_weights(snapshots: dict, init: nn.Module, device: torch.device) -> dict:
    """Weights after one iteration from the same start ``init`` (float64, :func:`check_arithmetic`): every client
    slot and the server of ours-sequential, ours-stacked and naive agree; the centralized model's server half agrees
    with theirs.

    The comparison is ``allclose`` on the UPDATES ``w - w0`` (an SGD step is small next to the weights, so a check
    on the weights alone could pass with wrong gradients): ``rtol`` 1e-5 per element, ``atol`` = a few ulps of the
    tensor's weights plus 1e-5 times its largest update (the label priors enter in float32: differences up to ~2e-7
    of the update were measured); a wrong gradient (e.g. ``P_s`` instead of a client's ``P_k``) differs by about the
    size of the update itself."""
    rtol, atol_rel = 1e-5, 1e-5
    client0, server0 = (list(h.parameters()) for h in split_model(copy.deepcopy(init), CUT))
    ref_slots, ref_server = snapshots["naive"]
    worst, ok = 0.0, True
    for name in ("ours-sequential", "ours-stacked", "centralized"):
        slots, server = snapshots[name]
        triples = list(zip(server, ref_server, server0))
        if slots is not None:
            ok = ok and len(slots) == len(ref_slots)
            triples += [(a, b, w0) for sa, sb in zip(slots, ref_slots) for a, b, w0 in zip(sa, sb, client0)]
        for a, b, w0 in triples:
            w0 = w0.detach().cpu()
            if a.shape != b.shape or a.shape != w0.shape:
                ok = False
                continue
            da, db = a - w0, b - w0
            scale = float(db.abs().max())
            atol = 8 * torch.finfo(w0.dtype).eps * float(w0.abs().max()) + atol_rel * scale
            ok = ok and bool(torch.allclose(da, db, rtol=rtol, atol=atol))
            worst = max(worst, float((a - b).abs().max()) / max(scale, 1e-30))
    return {"ok": bool(ok), "max_diff_over_update": worst, "rtol": rtol, "atol_rel": atol_rel}


def time_config(cfg: Config, device: torch.device, warmup: int, repeats: int, clock=time.perf_counter) -> dict:
    """Interleaved timing of the four implementations on one configuration; medians in seconds (``clock``: wall
    time, or the thread's CPU time with ``--clock cpu``)."""
    rnd = synthetic_round(cfg, device)
    init = initial_model(cfg.arch)
    impls = {name: build(name, init, cfg, rnd, device) for name in IMPLS}
    sync = _sync(device)
    samples: dict[str, list[float]] = {name: [] for name in IMPLS}
    for r in range(warmup + repeats):
        for name, impl in impls.items():
            sync()
            t0 = clock()
            impl.step()
            sync()
            dt = clock() - t0
            if r >= warmup:
                samples[name].append(dt)
    del impls
    gc.collect()
    check = check_arithmetic(cfg, device)
    return {
        "arch": cfg.arch,
        "clients": cfg.clients,
        "batch": cfg.batch,
        "client_rows": {"min": min(rnd.sizes), "max": max(rnd.sizes)},
        "median_s": {name: statistics.median(v) for name, v in samples.items()},
        "samples_s": samples,
        "weights_check": check,
    }


def _proc_status_bytes(field: str) -> int:
    """``VmRSS`` / ``VmHWM`` (current / peak resident set size) of this process from ``/proc/self/status``."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_rss_peak() -> bool:
    """Reset the peak RSS to the current RSS (Linux >= 4.0: ``echo 5 > /proc/self/clear_refs``)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return _proc_status_bytes("VmHWM") <= _proc_status_bytes("VmRSS") + 2**20
    except OSError:
        return False


def _ru_maxrss_bytes() -> int:
    import resource  # Unix only

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # macOS: bytes, Linux: KiB


def memory_probe(spec: dict) -> dict:
    """In a fresh process: peak memory of building one round's state and running one local iteration, minus
    what the process held just before (see the module docstring)."""
    device = torch.device(spec["device"])
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    cfg = Config(spec["arch"], spec["clients"], spec["batch"])
    init = initial_model(cfg.arch)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        method, base = "cuda.max_memory_allocated", torch.cuda.memory_allocated()
    elif _reset_rss_peak():  # the peak RSS now starts from the current RSS (imports may have peaked higher)
        method, base = "VmHWM - VmRSS", _proc_status_bytes("VmRSS")
    else:  # a lower bound when the imports peaked above what follows
        method, base = "ru_maxrss growth", _ru_maxrss_bytes()
    rnd = synthetic_round(cfg, device)
    impl = build(spec["impl"], init, cfg, rnd, device)
    impl.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    elif method == "VmHWM - VmRSS":
        peak = _proc_status_bytes("VmHWM") - base
    else:
        peak = _ru_maxrss_bytes() - base
    return {**spec, "peak_bytes": int(peak), "method": method}


def run_probe(spec: dict) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-probe", json.dumps(spec)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {**spec, "peak_bytes": None, "error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------------- report
def _ms(t: float | None) -> str:
    return "      -" if t is None else f"{1000 * t:9.2f}"


def _mb(b: int | None) -> str:
    return "     -" if b is None else f"{b / 2**20:8.1f}"


def ratio(value: float | None, target: float, op: str, what: str) -> dict:
    ok = None if value is None else (value <= target if op == "<=" else value >= target)
    return {"value": value, "target": target, "op": op, "pass": ok, "what": what}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch.set_num_threads on the CPU (default 1; 0: torch's default)",
    )
    p.add_argument("--repeats", type=int, default=None, help="timed iterations per implementation (default 7, quick 3)")
    p.add_argument("--warmup", type=int, default=None, help="untimed iterations first (default 2, quick 1)")
    p.add_argument("--quick", action="store_true", help="short run: AlexNet B=100, one memory probe pair")
    p.add_argument("--no-memory", action="store_true", help="skip the memory probes")
    p.add_argument(
        "--clients",
        type=lambda v: sorted({int(c) for c in v.split(",")}),
        default=None,
        help="comma-separated S for both models, e.g. 10,50,100 (default: cnn_small 10,50; AlexNet 10,100)",
    )
    p.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time (default) or this thread's CPU time (one thread on a shared machine: no waiting for a core)",
    )
    p.add_argument(
        "--glibc-defaults",
        action="store_true",
        help="keep glibc's allocator defaults (default: retain freed memory, as lightning-sfl does)",
    )
    p.add_argument("--json", type=Path, default=None, help="also write every number to this JSON file")
    p.add_argument("--memory-probe", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    probe = json.loads(args.memory_probe) if args.memory_probe is not None else {}
    defaults = args.glibc_defaults or probe.get("glibc_defaults", False)
    retained = False if defaults else retain_freed_memory()  # what the CLI does before every command

    if args.memory_probe is not None:
        print(json.dumps(memory_probe(probe)))
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available: nothing measured")
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 7)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    cfgs = configs(args.quick, args.clients)
    large = {arch: max(c.clients for c in cfgs if c.arch == arch) for arch in MODELS}
    small = {arch: min(c.clients for c in cfgs if c.arch == arch) for arch in MODELS}
    auto = {}  # what client_bank="auto" builds for the client half of each model at its largest S
    for arch in MODELS:
        bank = make_bank(split_model(initial_model(arch), CUT)[0], large[arch], "auto", device)
        auto[arch] = "stacked" if isinstance(bank, StackedBank) else "sequential"
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"

    print(
        f"lightning_sfl client scaling: one SCALA local iteration, cut {CUT}, SGD lr={LR}, synthetic label-skewed data"
    )
    print(
        f"device {device.type} ({dev_name}), torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"median of {repeats} after {warmup} warm-up, interleaved, {args.clock} clock, "
        f"freed memory {'retained' if retained else 'returned (glibc defaults)'}{'  [--quick]' if args.quick else ''}"
    )
    print()
    head = f"{'configuration':<30} {'B_k':>6} " + " ".join(f"{n:>15}" for n in IMPLS)
    print(head + "   (ms per local iteration)")
    results = []
    for cfg in cfgs:
        res = time_config(cfg, device, warmup, repeats, clock)
        results.append(res)
        rows = f"{res['client_rows']['min']}-{res['client_rows']['max']}"
        cells = " ".join(f"{_ms(res['median_s'][n]):>15}" for n in IMPLS)
        flag = "" if res["weights_check"]["ok"] else "   WEIGHTS DIFFER"
        print(f"{cfg.label:<30} {rows:>6} {cells}{flag}", flush=True)

    def t(arch: str, clients: int, impl: str) -> float:
        return next(r["median_s"][impl] for r in results if r["arch"] == arch and r["clients"] == clients)

    checks = [r["weights_check"] for r in results]
    weights_ok = all(c["ok"] for c in checks)
    print()
    print(
        "weights after one float64 iteration (same start, same batch): ours-sequential = ours-stacked = naive for "
        "every client slot and the server, centralized = the others' server half: "
        f"{'OK' if weights_ok else 'MISMATCH'} (largest difference {max(c['max_diff_over_update'] for c in checks):.1e}"
        f" of the update; allclose on updates, rtol {checks[0]['rtol']:g})"
    )

    # "ours" per model = the faster bank at that model's largest S
    ours: dict[str, str] = {}
    banks: dict[str, dict] = {}
    print()
    for arch in MODELS:
        s = large[arch]
        seq, stk = t(arch, s, "ours-sequential"), t(arch, s, "ours-stacked")
        ours[arch] = "ours-stacked" if stk < seq else "ours-sequential"
        faster = BANK_OF[ours[arch]]
        print(
            f"{arch}: at S={s} stacked/sequential = {stk / seq:.2f}; faster bank: {faster}; "
            f'client_bank="auto" picks {auto[arch]} on {device.type}'
        )
        gain = max(stk, seq) / min(stk, seq)
        banks[arch] = {
            "clients": s,
            "stacked_over_sequential": stk / seq,
            "faster": faster,
            "auto": auto[arch],
            "suggest_changing_auto": faster != auto[arch] and gain > 1 + AUTO_MARGIN,
        }
        if faster != auto[arch] and gain > 1 + AUTO_MARGIN:
            print(
                f'  NOTE: on {device.type} the {faster} bank is {gain:.2f}x FASTER than the one client_bank="auto" '
                f"picks ({auto[arch]}) for {arch} at S={s}: consider changing the auto rule."
            )
        elif faster != auto[arch]:
            print(f"  (the {faster} bank is faster by only {gain:.2f}x, within the {AUTO_MARGIN:.0%} noise margin)")

    memory = []
    mem_ratio = bank_mem_ratio = None
    if not args.no_memory:
        arch = "alexnet_cifar"
        b = next(c.batch for c in cfgs if c.arch == arch)
        impls = ["ours-sequential", "ours-stacked"] if args.quick else [*BANK_OF, "naive", "centralized"]
        print()
        print(f"memory (MiB): {arch} B={b}, a fresh process per probe builds one round and runs one local iteration")
        peaks: dict[tuple[str, int], int | None] = {}
        for impl in impls:
            for s in (small[arch], large[arch]) if impl != "centralized" else (small[arch],):
                spec = {"impl": impl, "arch": arch, "clients": s, "batch": b, "device": device.type}
                spec["threads"] = args.threads
                spec["glibc_defaults"] = args.glibc_defaults
                res = run_probe(spec)
                memory.append(res)
                peaks[(impl, s)] = res["peak_bytes"]
            if impl == "centralized":
                print(f"  {impl:<16} (no clients) {_mb(peaks[(impl, small[arch])])}   [{res.get('method')}]")
            else:
                lo, hi = peaks[(impl, small[arch])], peaks[(impl, large[arch])]
                r = f"{hi / lo:.2f}" if lo and hi else "-"
                print(
                    f"  {impl:<16} S={small[arch]}: {_mb(lo)}   S={large[arch]}: {_mb(hi)}   ratio {r:>5}"
                    f"   [{res.get('method') or res.get('error')}]",
                    flush=True,
                )
        lo, hi = peaks.get((ours[arch], small[arch])), peaks.get((ours[arch], large[arch]))
        mem_ratio = hi / lo if lo and hi else None
        seq, stk = peaks.get(("ours-sequential", large[arch])), peaks.get(("ours-stacked", large[arch]))
        bank_mem_ratio = stk / seq if seq and stk else None

    ca, cc = "alexnet_cifar", "cnn_small"
    ratios = {
        "cnn_ours_over_centralized": ratio(
            t(cc, large[cc], ours[cc]) / t(cc, large[cc], "centralized"),
            1.5,
            "<=",
            f"{cc} S={large[cc]}: ours / centralized",
        ),
        "cnn_naive_over_ours": ratio(
            t(cc, large[cc], "naive") / t(cc, large[cc], ours[cc]), 3.0, ">=", f"{cc} S={large[cc]}: naive / ours"
        ),
        "alexnet_ours_over_naive": ratio(
            t(ca, large[ca], ours[ca]) / t(ca, large[ca], "naive"), 1.0, "<=", f"{ca} S={large[ca]}: ours / naive"
        ),
        "cnn_scaling": ratio(
            t(cc, large[cc], ours[cc]) / t(cc, small[cc], ours[cc]),
            1.5,
            "<=",
            f"{cc} ours: S={large[cc]} / S={small[cc]}",
        ),
        "alexnet_scaling": ratio(
            t(ca, large[ca], ours[ca]) / t(ca, small[ca], ours[ca]),
            1.5,
            "<=",
            f"{ca} ours: S={large[ca]} / S={small[ca]}",
        ),
        "alexnet_memory": ratio(mem_ratio, 2.0, "<=", f"{ca} ours peak memory: S={large[ca]} / S={small[ca]}"),
        "alexnet_stacked_memory": ratio(
            bank_mem_ratio, 1.1, "<=", f"{ca} S={large[ca]} peak memory: stacked / sequential"
        ),
    }

    print()
    print("==== summary (ours = the faster bank per model: " + ", ".join(f"{a} {ours[a]}" for a in MODELS) + ") ====")
    for r in ratios.values():
        value = "-" if r["value"] is None else f"{r['value']:.2f}"
        verdict = {True: "PASS", False: "MISS", None: "n/a"}[r["pass"]]
        print(f"{r['what']:<44} {value:>7}   target {r['op']} {r['target']:<4g} {verdict}")
    print(f"{'weights equal across implementations':<44} {'yes' if weights_ok else 'NO':>7}")
    print("====")

    if args.json:
        report = {
            "device": device.type,
            "device_name": dev_name,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "repeats": repeats,
            "warmup": warmup,
            "quick": args.quick,
            "cut": CUT,
            "lr": LR,
            "auto_bank": auto,
            "clock": args.clock,
            "freed_memory_retained": retained,
            "ours": ours,
            "banks": banks,
            "configs": results,
            "memory": memory,
            "weights_ok": weights_ok,
            "ratios": ratios,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("WANDB_MODE", "offline")
    sys.exit(main())
