"""Where oneDNN's time goes in one SCALA local iteration on a CPU: convolutions, weight reorders, other reorders.

Run (from the repository root)::

    python benchmarks/onednn_anatomy.py                                # cnn_small s2, B=64, S=50, 1 thread (~30 s)
    python benchmarks/onednn_anatomy.py --clients 10 --steps 20 --impls ours-stacked centralized

On a CPU PyTorch runs every convolution through oneDNN, which computes on its own blocked memory layouts (channels
in blocks of 16). Before each primitive it *reorders* the plain tensors it is given into those layouts, and after
it reorders the result back. A plain model hands it one small weight per layer. The stacked client bank hands it
the weights of every client of a group at once (``[G·O, C, k, k]``), and these are reordered in each of the three
passes: forward, gradient of the input, and gradient of the weight (reordered back to plain).

This script measures that cost from oneDNN's own log (``torch.backends.mkldnn.verbose``). Each implementation of
``client_scaling.py`` (same synthetic round, same model, same cut) runs in a child process. The child warms up,
times ``--steps`` iterations without the log (the median is the ``wall`` column), then logs ``--steps`` more. The
parent sums the logged execution times per kind (:func:`summarize`) and divides by ``--steps``:

``convolution``     the convolution primitives (forward, backward data, backward weights)
``weight reorder``  reorders of tensors shaped like a convolution weight (``O×C×k×k``, or grouped ``G×O×C×k×k``)
``other reorder``   reorders of activations and their gradients
``other``           any other oneDNN primitive

The log adds I/O between primitives, not to the primitives' own times; ``wall`` is measured with the log off.
The exit status is 0 whatever the numbers (a measurement, not a test). Without oneDNN (other CPUs, builds without
it) nothing is logged and the script says so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import client_scaling as cs  # the sibling benchmark (this folder is on sys.path when run as a script)
import torch
from torch import nn

KINDS = ("convolution", "weight reorder", "other reorder", "other")
MARKER = "==== onednn log starts ===="


def weight_shapes(model: nn.Module) -> set[tuple[int, ...]]:
    """``(O, C / groups, kh, kw)`` of every 2-d convolution weight in ``model``."""
    return {tuple(m.weight.shape) for m in model.modules() if isinstance(m, nn.Conv2d)}


def summarize(lines: Iterable[str], weights: set[tuple[int, ...]]) -> dict[str, float]:
    """Milliseconds per kind (:data:`KINDS`) in oneDNN verbose ``lines``: the ``exec`` records only, whose last two
    fields are the tensor dimensions and the time in ms. A reorder counts as a weight reorder when its dimensions are
    a weight's of ``weights`` (4-d) or a group of them (5-d: ``G`` first). Other lines are ignored.

    >>> log = [
    ...     "onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f32 dst:f32,,,36x64x32x3x3,0.25",
    ...     "onednn_verbose,v1,primitive,exec,cpu,reorder,jit:blk,undef,src:f32 dst:f32,,,1x1152x8x8,0.04",
    ...     "onednn_verbose,exec,cpu,convolution,jit:avx512_core,forward_training,src:f32,,alg,g36mb1_ic1152oc2304,0.6",
    ...     "onednn_verbose,v1,primitive,exec,cpu,pooling,jit,forward,src:f32,,,2x3x4x4,0.01",
    ...     "onednn_verbose,v1,info,cpu,isa:Intel AVX-512",
    ... ]
    >>> summarize(log, {(64, 32, 3, 3)})
    {'convolution': 0.6, 'weight reorder': 0.25, 'other reorder': 0.04, 'other': 0.01}
    """
    totals = dict.fromkeys(KINDS, 0.0)
    for line in lines:
        fields = line.strip().split(",")
        if not fields[0].endswith("onednn_verbose") or "exec" not in fields:
            continue
        at = fields.index("exec")
        if len(fields) < at + 5:
            continue
        try:
            ms = float(fields[-1])
        except ValueError:
            continue
        primitive = fields[at + 2]
        if primitive == "convolution":
            kind = "convolution"
        elif primitive == "reorder":
            try:
                dims = tuple(int(d) for d in fields[-2].split("x"))
            except ValueError:
                dims = ()
            kind = "weight reorder" if dims[-4:] in weights and len(dims) in (4, 5) else "other reorder"
        else:
            kind = "other"
        totals[kind] += ms
    return totals


def child(impl: str, arch: str, clients: int, batch: int, warmup: int, steps: int, out: Path) -> None:
    """Run ``impl`` of ``client_scaling.py``: warm up, time ``steps`` iterations, then log ``steps`` more."""
    cfg = cs.Config(arch, clients, batch)
    device = torch.device("cpu")
    rnd = cs.synthetic_round(cfg, device)
    impl_obj = cs.build(impl, cs.initial_model(arch), cfg, rnd, device)
    for _ in range(warmup):
        impl_obj.step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        impl_obj.step()
        times.append(time.perf_counter() - t0)
    out.write_text(json.dumps({"wall_ms": 1e3 * statistics.median(times)}))
    print(MARKER, flush=True)
    with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
        for _ in range(steps):
            impl_obj.step()


def measure(impl: str, args: argparse.Namespace, weights: set[tuple[int, ...]]) -> dict:
    """One child process for ``impl``: its wall time per iteration and oneDNN's time per kind per iteration
    (``weights``: :func:`weight_shapes` of the model)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "wall.json"
        spec = [impl, args.arch, str(args.clients), str(args.batch), str(args.warmup), str(args.steps), str(out)]
        cmd = [sys.executable, str(Path(__file__).resolve()), "--threads", str(args.threads), "--child", *spec]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"{impl}: the child process failed:\n{proc.stderr[-3000:]}")
        wall = json.loads(out.read_text())["wall_ms"]
    log = proc.stdout.split(MARKER, 1)[-1].splitlines()
    totals = summarize(log, weights)
    return {"wall_ms": wall, **{k: v / args.steps for k, v in totals.items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", choices=sorted(cs.MODELS), default="cnn_small")
    p.add_argument("--clients", type=int, default=50, help="selected clients S (default 50)")
    p.add_argument("--batch", type=int, default=64, help="rows per local iteration B, split by eq. 3 (default 64)")
    p.add_argument("--steps", type=int, default=10, help="timed iterations, then as many logged ones (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations first (default 3)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1; 0: torch's default)")
    p.add_argument("--impls", nargs="+", choices=cs.IMPLS, default=list(cs.IMPLS))
    p.add_argument("--json", type=Path, default=None, help="also write every number to this JSON file")
    p.add_argument("--child", nargs=7, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if min(args.clients, args.batch, args.steps) < 1 or args.warmup < 0 or args.threads < 0:
        p.error(
            f"--clients={args.clients}, --batch={args.batch} and --steps={args.steps} must be >= 1, "
            f"--warmup={args.warmup} and --threads={args.threads} >= 0"
        )
    cs.retain_freed_memory()  # what the CLI and client_scaling.py do
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child is not None:
        impl, arch, clients, batch, warmup, steps, out = args.child
        child(impl, arch, int(clients), int(batch), int(warmup), int(steps), Path(out))
        return 0
    if not torch.backends.mkldnn.is_available():
        print("this torch has no oneDNN (mkldnn) backend: nothing to measure")
        return 0

    print(
        f"oneDNN time per SCALA local iteration: {args.arch} cut {cs.CUT}, B={args.batch}, S={args.clients}, "
        f"{args.threads or torch.get_num_threads()} thread(s), {args.steps} iterations (ms)"
    )
    head = f"{'implementation':<16} {'wall':>7} " + " ".join(f"{k:>14}" for k in KINDS) + f" {'oneDNN total':>13}"
    print(head)
    results = {}
    weights = weight_shapes(cs.initial_model(args.arch))
    for impl in args.impls:
        r = results[impl] = measure(impl, args, weights)
        cells = " ".join(f"{r[k]:>14.2f}" for k in KINDS)
        print(f"{impl:<16} {r['wall_ms']:>7.2f} {cells} {sum(r[k] for k in KINDS):>13.2f}", flush=True)
    if sum(results[i]["convolution"] for i in results) == 0:
        print("oneDNN logged no convolution: this CPU or build does not run them through oneDNN")
    elif "ours-stacked" in results and "centralized" in results:
        ours, cen = results["ours-stacked"], results["centralized"]
        print(
            f"ours-stacked - centralized: wall {ours['wall_ms'] - cen['wall_ms']:+.2f} ms, of which convolutions "
            f"{ours['convolution'] - cen['convolution']:+.2f}, weight reorders "
            f"{ours['weight reorder'] - cen['weight reorder']:+.2f}, other reorders "
            f"{ours['other reorder'] - cen['other reorder']:+.2f}"
        )
    if args.json is not None:
        config = {k: getattr(args, k) for k in ("arch", "clients", "batch", "steps", "threads")}
        args.json.write_text(json.dumps({"config": config, "torch": torch.__version__, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
