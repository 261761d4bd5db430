"""Per-round cost of Flower's simulation engine against ``lightning-sfl fit`` on the same FedAvg setting, as a ratio.

Run (from the repository root, in a virtual environment holding the package and Flower's simulation engine,
``pip install -e '.[dev,bench]'``; flwr 1.42's ``simulation`` extra brings Ray on Python >= 3.11 only)::

    python benchmarks/vs_flower.py                    # five settings, 1- and 21-round runs, 3 repeats (~20 min)
    python benchmarks/vs_flower.py --settings 100x50 --rounds 41 --repeats 5 --json vs_flower.json
    python benchmarks/vs_flower.py --ours-args='--model.client_bank stacked'   # overrides for our side
    python benchmarks/vs_flower.py --ours-only        # our side alone (Flower not needed)
    python benchmarks/vs_flower.py --quick            # 20x5 and 100x50, 1- and 3-round runs, 1 repeat (a smoke run)

Without ``flwr`` and ``ray`` importable it prints one line and exits 2 (``--ours-only`` needs neither).

The setting, the same on both sides: FedAvg on scikit-learn's bundled 8x8 digits with the data module's stratified
80/20 train/test split and quantity-skew partition (2 classes per client, ``--data.partition quantity
--data.alpha 2``, seed 0); ``K`` clients of which ``S`` train in a round (``ρ = S/K``; settings ``KxS``: 20x5, 20x10,
100x5, 100x10, 100x50); the zoo's ``cnn_small`` (unsplit); ``T = 5`` local SGD steps per round (lr 0.05, no
momentum) on ``B = 64`` rows per local iteration across the round's clients, split by eq. 3 (``B_k ∝ |D_k|``,
``client_batch_sizes``); ``|D_k|``-weighted averaging; test accuracy of the global model after every round.

Each side runs as a fresh process in an empty temporary folder (also Ray's), with ``WANDB_MODE=offline``,
``OMP_NUM_THREADS=1`` and Flower's and Ray's telemetry off, timed from its start to its exit:

``ours``
    ``lightning-sfl fit --config configs/digits/fedavg.yaml --data.num_clients K --data.participation ρ
    --trainer.max_epochs R --dissimilarity.every_n_rounds 0 --torch_threads N`` plus ``--ours-args``: one process on
    ``N = --ours-threads`` torch threads (default: as many as Flower's actors, so that both sides use the same cores;
    on 2 cores and 100x50 one thread took 174 ms a round, two 130 ms), the selected clients' copies in one client
    bank, and everything else the CLI does (W&B offline and CSV loggers, a checkpoint per round, per-class accuracy,
    byte ledger, simulated clock, progress bar).
``flower``
    This file with ``--flower-run``: ``flwr.simulation.run_simulation`` with ``K`` virtual nodes, a ``ServerApp``
    running the legacy ``flwr.server.strategy.FedAvg`` (subclassed only in ``configure_fit``, to send the round's
    clients their rows; evaluation on clients off, a centralized ``evaluate_fn`` on the same test split every round)
    and a ``ClientApp`` of ``NumPyClient`` s (``T`` SGD steps on their ``B_k``-row minibatches), on ``--actors`` Ray
    actors (default 2: a Ray node of 2 CPUs, ``client_resources`` ``num_cpus=1``; one torch thread each). The legacy
    server's thread pool holds ``S`` threads (``--flower-max-workers``). ``--flower-api message`` runs the Message
    API instead (``ClientApp`` handlers, ``flwr.serverapp.strategy.FedAvg``).

Per round = (R-round run − 1-round run) / (R − 1), from the medians of ``--repeats`` timings interleaved over
settings and sides (both see the same machine load), so what a process does once (imports, Ray's start, the actors'
first imports and data load, the checkpoint folder) cancels out. Next to it, "in process" is Flower's own round time
as its server sees it (evaluation to evaluation, median of rounds 2..R), a check on the difference of two noisy runs.
The ratio printed is Flower ÷ ours; the issue's target is ≥ 5 at 50 clients per round (``PASS``/``MISS``).

Same arithmetic: Flower's server takes each round's clients and their minibatch rows from the schedule our FedAvg
runs (``SyncRounds``: uniform selection seeded by the round, eq. 3, the seeded draw from each shard) and sends every
client its ``[T, B_k]`` rows, and both sides start from ``cnn_small`` built after ``torch.manual_seed(0)`` (the CLI's
``seed_everything: 0``). So the test accuracy after the first round is the same on both sides, which the report
checks (``same arithmetic``); over more rounds the two can drift apart by a few test digits, because Flower's legacy
FedAvg sums the clients' float32 weights in the order their replies arrive.

What makes the comparison unequal (observed with flwr 1.42.0, ray 2.55.1 and Python 3.11 on a 2-core CPU machine
busy with other jobs):

* Processes, messages and polling. Flower runs every client call as a task on a Ray actor (a separate process),
  pickles the ``ClientApp`` and the parameters into every call and polls for the replies (its in-memory grid sleeps
  0.1 s between pulls, the engine's message queue 0.1 s): a round of 5 clients took about 0.25 s, one of 50 clients
  0.9-1.1 s (about 20 ms per client call on 2 actors, for 5 SGD steps of about 1 ms). Ours steps every selected
  client's copy in one process and sends no message.
* Start-up, excluded by the formula but the source of the noise: a Flower process spent ~4 s before its server
  started (imports, Ray), ~7 s before round 1 (the server's imports and initial evaluation), 7-13 s in round 1 (the
  actors import torch and this package and load the data; the server asks each of the ``K`` nodes for its partition
  id once, as Flower's node ids are random in every run) and ~5 s after the last round (Ray's shutdown); ours ~9 s in
  all. The 1-round runs of either side vary by seconds on a busy machine: use R ≥ 21, several repeats, and compare
  Flower's figure with its in-process column.
* Flower's options that change its speed (100x50, in process): the legacy server's thread pool (Python's default
  ``min(32, cores + 4)`` = 6 threads here sends 50 clients in waves: 1.46 s per round against 0.93 s with 50, hence
  ``S`` threads by default); the number of actors (1: 1.13 s, 2: 0.93 s, 4: 0.94 s); the API (Message API: about the
  same as ``NumPyClient``). Offline, Flower's telemetry has to be off (``FLWR_TELEMETRY_ENABLED=0``).
* Ours logs, writes a checkpoint every round and computes per-class accuracy, byte counts and the simulated clock;
  Flower's side only trains and evaluates.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "digits" / "fedavg.yaml"
#: configs/digits/fedavg.yaml's setting, for the Flower side.
BATCH, LOCAL_ITERS, LR, SEED, ARCH = 64, 5, 0.05, 0, "cnn_small"
SETTINGS: tuple[tuple[int, int], ...] = ((20, 5), (20, 10), (100, 5), (100, 10), (100, 50))
QUICK_SETTINGS: tuple[tuple[int, int], ...] = ((20, 5), (100, 50))
TARGET_PER_ROUND, TARGET_RATIO = 50, 5.0
#: Keeps both sides offline and quiet: no W&B upload, no Flower or Ray telemetry.
ENV = {
    "WANDB_MODE": "offline",
    "OMP_NUM_THREADS": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
}


# ------------------------------------------------------------------------------------------------ the Flower side
# The Flower code below runs in the server process and, for the clients, in Ray's worker processes. Ray ships the
# ClientApp to its actors by pickling it; functions of ``__main__`` would travel by value and lose their caches on
# every call, so ``--flower-run`` imports this file as the module ``vs_flower`` (run as a script, its folder is the
# first entry of ``sys.path``, which Flower hands to the workers) and the workers import it by name once.


@functools.lru_cache(maxsize=4)
def datamodule(num_clients: int, per_round: int = 1):
    """Our data module for digits with ``K`` clients, 2 classes each (``--data.partition quantity --data.alpha 2``),
    ``S`` per round, ``B = 64``, seed 0: the split, the shards and ``|D_k|`` both sides train on (one per process)."""
    from lightning_sfl.data import FederatedDataModule

    return FederatedDataModule(dataset="digits", num_clients=num_clients, partition="quantity", alpha=2,
                               participation=per_round / num_clients, batch_size=BATCH, seed=SEED)  # fmt: skip


def round_plan(num_clients: int, per_round: int, server_round: int) -> dict[int, bytes]:
    """Flower's round ``server_round`` (counted from 1) as our round ``server_round - 1``: each selected client's
    partition id and the training rows of its ``T`` local iterations (``[T, B_k]`` int64, as bytes), from the schedule
    our FedAvg runs (``SyncRounds``: uniform selection, ``B_k`` by eq. 3, the seeded minibatch draw)."""
    import numpy as np
    import torch

    from lightning_sfl.loop import SyncRounds
    from lightning_sfl.loop.selection import UniformSelection

    stats = datamodule(num_clients, per_round).client_stats
    steps = SyncRounds(LOCAL_ITERS, UniformSelection()).plan_round(server_round - 1, stats)
    pieces = [step.rows.split(step.sizes.tolist()) for step in steps]  # T × S blocks of B_k rows
    return {
        int(k): np.ascontiguousarray(torch.stack([p[j] for p in pieces]).numpy(), dtype=np.int64).tobytes()
        for j, k in enumerate(steps[0].clients.tolist())
    }


@functools.lru_cache(maxsize=1)
def _net():
    """The zoo's ``cnn_small`` for 8x8 digits, one per process (weights are overwritten before every use); seeded as
    the CLI seeds ours (``seed_everything: 0``), so both start from the same weights."""
    import torch

    from lightning_sfl.models import build_model

    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    return build_model(ARCH, 10, (1, 8, 8))


def _arrays(net) -> list:
    return [v.detach().cpu().numpy().copy() for v in net.state_dict().values()]


def _load(net, arrays) -> None:
    import torch

    net.load_state_dict({k: torch.from_numpy(a) for k, a in zip(net.state_dict(), arrays)})


def local_fit(partition_id: int, num_clients: int, arrays, rows: bytes) -> tuple[list, int]:
    """Client ``partition_id``'s round: from the global weights ``arrays``, one SGD step (lr 0.05) on each row of
    ``rows`` (``[T, B_k]`` indices into its shard's part of the training split); its weights and ``|D_k|``."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    dm = datamodule(num_clients)
    splits = dm.splits
    idx = torch.from_numpy(np.frombuffer(rows, dtype=np.int64).reshape(LOCAL_ITERS, -1).copy())
    if not torch.isin(idx, dm.client_indices[partition_id]).all():
        raise ValueError(f"client {partition_id} was sent rows outside its shard")
    net = _net()
    _load(net, arrays)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    for step_rows in idx:
        loss = F.cross_entropy(net(splits.to_float(splits.train_x[step_rows])), splits.train_y[step_rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return _arrays(net), int(dm.client_sizes[partition_id])


@functools.lru_cache(maxsize=1)
def _test_set():
    splits = datamodule(1).splits
    return splits.to_float(splits.test_x), splits.test_y


def evaluate_global(arrays) -> tuple[float, float]:
    """Test loss and accuracy of the global weights ``arrays`` (the test split, 360 digits)."""
    import torch
    import torch.nn.functional as F

    x, y = _test_set()
    net = _net()
    _load(net, arrays)
    with torch.no_grad():
        logits = net(x)
    return float(F.cross_entropy(logits, y)), float((logits.argmax(1) == y).float().mean())


def client_fn(context):
    """The legacy ``ClientApp``'s factory: a ``NumPyClient`` for the node's partition (of ``num-partitions`` = K)."""
    from flwr.client import NumPyClient

    partition_id, num_clients = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])

    class DigitsClient(NumPyClient):
        def get_properties(self, config):
            return {"partition": partition_id}

        def fit(self, parameters, config):
            arrays, size = local_fit(partition_id, num_clients, parameters, config["rows"])
            return arrays, size, {}

    return DigitsClient().to_client()


def _strategy(num_clients: int, per_round: int, evals: list):
    """Flower's FedAvg, told which clients a round trains and their rows (:func:`round_plan`)."""
    from concurrent.futures import ThreadPoolExecutor

    from flwr.common import FitIns, GetPropertiesIns, ndarrays_to_parameters
    from flwr.server.strategy import FedAvg

    def evaluate_fn(server_round, arrays, config):
        loss, acc = evaluate_global(arrays)
        evals.append((time.perf_counter(), acc))
        return loss, {"accuracy": acc}

    class RoundPlanFedAvg(FedAvg):
        by_partition: dict | None = None

        def configure_fit(self, server_round, parameters, client_manager):
            if self.by_partition is None:  # node ids are random: ask every node once for its partition id
                client_manager.wait_for(num_clients)
                proxies = list(client_manager.all().values())
                with ThreadPoolExecutor(max_workers=len(proxies)) as pool:
                    replies = list(pool.map(lambda p: p.get_properties(GetPropertiesIns({}), None, 0), proxies))
                self.by_partition = {int(r.properties["partition"]): p for r, p in zip(replies, proxies)}
            plan = round_plan(num_clients, per_round, server_round)
            return [(self.by_partition[k], FitIns(parameters, {"rows": rows})) for k, rows in plan.items()]

    return RoundPlanFedAvg(
        fraction_fit=per_round / num_clients,
        fraction_evaluate=0.0,
        min_fit_clients=per_round,
        min_evaluate_clients=0,
        min_available_clients=num_clients,
        evaluate_fn=evaluate_fn,
        initial_parameters=ndarrays_to_parameters(_arrays(_net())),
    )


def message_train(msg, context):
    """The Message-API ``ClientApp``'s training handler (same work as :class:`DigitsClient`'s ``fit``)."""
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    partition_id, num_clients = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    config = msg.content["config"]
    global_arrays = msg.content["arrays"].to_numpy_ndarrays()
    arrays, size = local_fit(partition_id, num_clients, global_arrays, config["rows"])
    return Message(RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": size})}),
                   reply_to=msg)  # fmt: skip


def message_query(msg, context):
    """The Message-API ``ClientApp``'s query handler: the node's partition id."""
    from flwr.app import ConfigRecord, Message, RecordDict

    partition = int(context.node_config["partition-id"])
    return Message(RecordDict({"node": ConfigRecord({"partition": partition})}), reply_to=msg)


def _legacy_apps(num_clients: int, per_round: int, rounds: int, max_workers: int | None, evals: list):
    """``ServerApp`` (legacy ``Server`` + FedAvg) and ``ClientApp`` (``NumPyClient``) of the legacy API."""
    from flwr.client import ClientApp
    from flwr.server import Server, ServerApp, ServerAppComponents, ServerConfig, SimpleClientManager

    def server_fn(context):
        strategy = _strategy(num_clients, per_round, evals)
        server = Server(client_manager=SimpleClientManager(), strategy=strategy)
        server.set_max_workers(max_workers or per_round)
        return ServerAppComponents(server=server, config=ServerConfig(num_rounds=rounds))

    return ServerApp(server_fn=server_fn), ClientApp(client_fn=client_fn)


def _message_apps(num_clients: int, per_round: int, rounds: int, evals: list):
    """``ServerApp`` (``flwr.serverapp.strategy.FedAvg``) and ``ClientApp`` (handlers) of the Message API."""
    from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg

    client_app, server_app = ClientApp(), ServerApp()
    client_app.train()(message_train)
    client_app.query()(message_query)

    def evaluate_fn(server_round, arrays):
        loss, acc = evaluate_global(arrays.to_numpy_ndarrays())
        evals.append((time.perf_counter(), acc))
        return MetricRecord({"accuracy": acc, "loss": loss})

    @server_app.main()
    def main(grid, context):
        while len(nodes := list(grid.get_node_ids())) < num_clients:  # the nodes register as the run starts
            time.sleep(0.05)
        # node ids are random: ask every node once for its partition id
        queries = [Message(RecordDict(), dst_node_id=n, message_type=MessageType.QUERY) for n in nodes]
        by_partition = {int(r.content["node"]["partition"]): r.metadata.src_node_id
                        for r in grid.send_and_receive(queries)}  # fmt: skip
        if len(by_partition) != num_clients:
            raise RuntimeError(f"{len(by_partition)} of {num_clients} nodes told their partition id")

        class RoundPlanFedAvg(FedAvg):
            def configure_train(self, server_round, arrays, config, grid):
                return [
                    Message(
                        RecordDict({"arrays": arrays, "config": ConfigRecord({"rows": rows})}),
                        dst_node_id=by_partition[k],
                        message_type=MessageType.TRAIN,
                    )
                    for k, rows in round_plan(num_clients, per_round, server_round).items()
                ]

        strategy = RoundPlanFedAvg(fraction_train=per_round / num_clients, fraction_evaluate=0.0,
                                   min_train_nodes=per_round, min_available_nodes=num_clients)  # fmt: skip
        strategy.start(grid=grid, initial_arrays=ArrayRecord(_arrays(_net())), num_rounds=rounds,
                       evaluate_fn=evaluate_fn)  # fmt: skip

    return server_app, client_app


def flower_fedavg(
    num_clients: int, per_round: int, rounds: int, actors: int, api: str = "numpy", max_workers: int | None = None
) -> tuple[float, list[float]]:
    """``rounds`` rounds of FedAvg in Flower's simulation engine (see the module docstring): the final test accuracy
    and the seconds of every round seen from the server (evaluation to evaluation).

    ``api``: ``numpy`` (legacy ``NumPyClient`` and ``flwr.server.strategy.FedAvg``) or ``message`` (the Message API's
    ``ClientApp`` handlers and ``flwr.serverapp.strategy.FedAvg``); ``max_workers``: the legacy server's thread pool.
    """
    from flwr.simulation import run_simulation

    evals: list[tuple[float, float]] = []  # (time, test accuracy) of every evaluation, the initial one first
    if api == "numpy":
        server_app, client_app = _legacy_apps(num_clients, per_round, rounds, max_workers, evals)
    else:
        server_app, client_app = _message_apps(num_clients, per_round, rounds, evals)
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=num_clients,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {"num_cpus": actors, "num_gpus": 0, "log_to_driver": False, "logging_level": "ERROR"},
        },
    )
    if len(evals) != rounds + 1:  # the initial evaluation and one per round
        raise SystemExit(f"error: Flower evaluated {len(evals)} times in {rounds} rounds; see its log above")
    return evals[-1][1], [b[0] - a[0] for a, b in zip(evals, evals[1:])]


def flower_missing() -> str | None:
    """Why Flower's simulation engine cannot run here (a one-line message), or ``None``."""
    for name, hint in (("flwr", "flwr[simulation]"), ("ray", "flwr[simulation] (Ray)")):
        try:
            importlib.import_module(name)
        except Exception as err:  # ImportError, or a broken install
            why = f"{type(err).__name__}: {err}"
            return f"error: {name} is not importable ({why}); pip install '{hint}', or pass --ours-only"
    return None


# ------------------------------------------------------------------------------------------------ timing
def _ours_command(clients: int, per_round: int, rounds: int, threads: int, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "lightning_sfl.cli", "fit", "--config", str(CONFIG),
            f"--data.num_clients={clients}", f"--data.participation={per_round / clients}",
            f"--trainer.max_epochs={rounds}", "--dissimilarity.every_n_rounds=0", f"--torch_threads={threads}",
            *extra]  # fmt: skip


def _flower_command(clients: int, per_round: int, rounds: int, actors: int, api: str, workers: int | None) -> list:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--flower-run", "--clients", str(clients), "--per-round",
           str(per_round), "--rounds", str(rounds), "--actors", str(actors), "--flower-api", api]  # fmt: skip
    return cmd + (["--flower-max-workers", str(workers)] if workers else [])


def _printed(stdout: str, marker: str) -> float | None:
    """The number after the last ``marker`` in ``stdout`` (``None`` if absent)."""
    if marker not in stdout:
        return None
    word = stdout.rsplit(marker, 1)[1].split()[0]
    return None if word == "-" else float(word)


def _timed(cmd: list[str]) -> dict:
    """Wall seconds of ``cmd`` as a fresh process in an empty folder (also Ray's temporary folder), with the final
    test accuracy it printed and, for Flower, its later rounds' median seconds seen from the server; it must
    succeed."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as cwd:
        env = {**os.environ, **ENV, "RAY_TMPDIR": cwd}
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    accuracy = _printed(proc.stdout, "final test accuracy: ")  # ours
    if accuracy is None:
        accuracy = _printed(proc.stdout, "test accuracy ")  # flower
    return {"seconds": seconds, "accuracy": accuracy, "in_process_s": _printed(proc.stdout, "later rounds ")}


def measure(
    settings, rounds: int, repeats: int, sides, ours_args: list[str], actors: int, api: str, workers, threads: int
) -> dict:
    """Medians of ``repeats`` interleaved timings of every side and setting at 1 and ``rounds`` rounds."""
    commands = {
        "ours": lambda k, s, r: _ours_command(k, s, r, threads, ours_args),
        "flower": lambda k, s, r: _flower_command(k, s, r, actors, api, workers),
    }
    runs: dict = {(k, s, side, r): [] for k, s in settings for side in sides for r in (1, rounds)}
    load = [os.getloadavg()[0]]
    for _ in range(repeats):
        for (k, s, side, r), samples in runs.items():
            samples.append(_timed(commands[side](k, s, r)))
        load.append(os.getloadavg()[0])
    out: dict = {"rounds": rounds, "repeats": repeats, "sides": list(sides), "ours_args": ours_args,
                 "ours_threads": threads,
                 "flower": {"actors": actors, "api": api, "max_workers": workers or "S"} if "flower" in sides else None,
                 "load_avg_1min": load, "versions": _versions(), "settings": []}  # fmt: skip
    for k, s in settings:
        row: dict = {"clients": k, "per_round": s, "participation": s / k}
        for side in sides:
            one, long = runs[k, s, side, 1], runs[k, s, side, rounds]
            one_s = statistics.median(x["seconds"] for x in one)
            long_s = statistics.median(x["seconds"] for x in long)
            per_round = (long_s - one_s) / (rounds - 1)
            row[side] = {"one_round_s": one_s, "long_run_s": long_s, "per_round_s": per_round,
                         "startup_s": one_s - per_round, "samples_one_round_s": [x["seconds"] for x in one],
                         "samples_long_run_s": [x["seconds"] for x in long],
                         "accuracy_one_round": [x["accuracy"] for x in one],
                         "accuracy_long_run": [x["accuracy"] for x in long]}  # fmt: skip
            inner = [x["in_process_s"] for x in long if x["in_process_s"] is not None]
            if inner:  # Flower's own round times (rounds 2..R), a check on the difference of two runs
                row[side]["in_process_per_round_s"] = statistics.median(inner)
        if "flower" in sides:
            ours = row["ours"]["per_round_s"]
            row["ratio_flower_over_ours"] = row["flower"]["per_round_s"] / ours if ours > 0 else None
            # same clients, rows and initial weights: after one round both global models classify alike
            accs = row["ours"]["accuracy_one_round"] + row["flower"]["accuracy_one_round"]
            row["same_one_round_accuracy"] = None not in accs and max(accs) - min(accs) < 1.5 / 360
        out["settings"].append(row)
    at_target = [r.get("ratio_flower_over_ours") for r in out["settings"] if r["per_round"] == TARGET_PER_ROUND]
    if "flower" in sides and at_target:
        value = None if None in at_target else min(at_target)
        out["target"] = {"what": f"Flower / ours per round at {TARGET_PER_ROUND} clients per round", "op": ">=",
                         "target": TARGET_RATIO, "value": value,
                         "pass": value is not None and value >= TARGET_RATIO}  # fmt: skip
    return out


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version(), "cpus": os.cpu_count()}
    for name in ("lightning-sfl", "torch", "lightning", "flwr", "ray"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def _num(value, scale: float = 1.0, digits: int = 2) -> str:
    return "n/a" if value is None else f"{scale * value:.{digits}f}"


def report(r: dict) -> str:
    flower, v = r["flower"], r["versions"]
    head = f"ours: lightning-sfl {v['lightning-sfl']}, fedavg.yaml {shlex.join(r['ours_args'])}".rstrip()
    head += f", {r['ours_threads']} torch thread{'s' if r['ours_threads'] != 1 else ''}"
    if flower:
        head += (f"; flower: flwr {v['flwr']}, ray {v['ray']}, {flower['api']} API, {flower['actors']} actors"
                 + (f", server thread pool {flower['max_workers']}" if flower["api"] == "numpy" else ""))  # fmt: skip
    lines = [
        f"FedAvg on digits: per round = (R-round run - 1-round run) / (R - 1), R = {r['rounds']}, "
        f"medians of {r['repeats']} (interleaved)",
        head,
        f"{'K':>4}{'S':>4}{'ours 1 round':>14}{'ours/round':>12}"
        + (f"{'flower 1 round':>16}{'flower/round':>14}{'(in process)':>14}{'flower/ours':>13}" if flower else ""),
    ]
    for row in r["settings"]:
        o = row["ours"]
        line = f"{row['clients']:>4}{row['per_round']:>4}{o['one_round_s']:>12.2f} s{1e3 * o['per_round_s']:>9.1f} ms"
        if flower:
            f = row["flower"]
            inner = _num(f.get("in_process_per_round_s"), 1e3, 1)
            line += (f"{f['one_round_s']:>14.2f} s{1e3 * f['per_round_s']:>11.1f} ms{inner:>11} ms"
                     f"{_num(row['ratio_flower_over_ours']):>13}")  # fmt: skip
        lines.append(line)
    for rounds, key in ((1, "accuracy_one_round"), (r["rounds"], "accuracy_long_run")):
        accs = ", ".join(
            f"{row['clients']}x{row['per_round']} {_median(row['ours'][key])}"
            + (f" / {_median(row['flower'][key])}" if flower else "")
            for row in r["settings"]
        )
        who = "ours / flower" if flower else "ours"
        lines.append(f"test accuracy after {rounds} round{'s' * (rounds > 1)} ({who}): {accs}")
    if flower:
        same = all(row["same_one_round_accuracy"] for row in r["settings"])
        lines.append(f"same arithmetic (equal test accuracy after 1 round in every setting): {'yes' if same else 'NO'}")
    if "target" in r:
        t = r["target"]
        lines.append(f"target: {t['what']} >= {t['target']:g}: {_num(t['value'])} {'PASS' if t['pass'] else 'MISS'}")
    elif flower:
        lines.append(f"target: no setting with {TARGET_PER_ROUND} clients per round was run")
    load = r["load_avg_1min"]
    lines.append(f"1-minute load average during the runs: {min(load):.1f}-{max(load):.1f} on {v['cpus']} CPUs")
    return "\n".join(lines)


def _median(values) -> str:
    values = [v for v in values if v is not None]
    return f"{statistics.median(values):.3f}" if values else "?"


def _settings(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        k, _, s = item.strip().partition("x")
        if not (k.isdigit() and s.isdigit()) or not 1 <= int(s) <= int(k):
            raise argparse.ArgumentTypeError(f"{item!r} is not KxS with 1 <= S <= K (e.g. 20x5,100x50)")
        out.append((int(k), int(s)))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", type=_settings, default=list(SETTINGS), help="KxS,KxS,... (default: all five)")
    parser.add_argument("--rounds", type=int, default=21, help="rounds of the long run (>= 2)")
    parser.add_argument("--repeats", type=int, default=3, help="timings per configuration (median)")
    parser.add_argument("--quick", action="store_true", help="20x5 and 100x50, 3 rounds, 1 repeat (a smoke run)")
    parser.add_argument("--ours-only", action="store_true", help="time lightning-sfl only (Flower not needed)")
    parser.add_argument("--ours-args", default="", help="extra overrides for lightning-sfl fit, one shell string")
    parser.add_argument("--actors", type=int, default=2, help="Flower: Ray actors (CPUs of the Ray node), 1 CPU each")
    parser.add_argument("--ours-threads", type=int, default=None,
                        help="ours: torch threads (default: --actors, the cores Flower uses)")  # fmt: skip
    parser.add_argument("--flower-api", choices=("numpy", "message"), default="numpy",
                        help="Flower: legacy NumPyClient + flwr.server FedAvg (default), or the Message API's "
                        "ClientApp + flwr.serverapp FedAvg")  # fmt: skip
    parser.add_argument("--flower-max-workers", type=int, help="Flower, numpy API: server's thread pool (default: S)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--flower-run", action="store_true", help="run Flower's side itself (--clients, --per-round)")
    parser.add_argument("--clients", type=int, default=20, help="with --flower-run: K")
    parser.add_argument("--per-round", type=int, default=5, help="with --flower-run: S")
    args = parser.parse_args(argv)
    if args.flower_run:
        os.environ.update({k: v for k, v in ENV.items() if k not in os.environ})
        if (message := flower_missing()) is not None:
            print(message, file=sys.stderr)
            raise SystemExit(2)
        module = importlib.import_module("vs_flower")  # this file by name: Ray workers import it, see above
        acc, seconds = module.flower_fedavg(
            args.clients, args.per_round, args.rounds, args.actors, args.flower_api, args.flower_max_workers
        )
        later = f"{statistics.median(seconds[1:]):.4f}" if len(seconds) > 1 else "-"
        print(f"flower FedAvg: test accuracy {acc:.4f} after {args.rounds} rounds; round 1 {seconds[0]:.4f} s, "
              f"later rounds {later} s (median, seen from the server)")  # fmt: skip
        return
    if args.quick:
        args.settings, args.rounds, args.repeats = list(QUICK_SETTINGS), 3, 1
    args.ours_threads = args.actors if args.ours_threads is None else args.ours_threads
    if args.rounds < 2 or args.repeats < 1 or args.actors < 1 or args.ours_threads < 1:
        parser.error(f"--rounds={args.rounds} must be >= 2, --repeats={args.repeats}, --actors={args.actors} and "
                     f"--ours-threads={args.ours_threads} >= 1")  # fmt: skip
    sides = ("ours",) if args.ours_only else ("ours", "flower")
    if not args.ours_only and (message := flower_missing()) is not None:
        print(message, file=sys.stderr)
        raise SystemExit(2)
    result = measure(args.settings, args.rounds, args.repeats, sides, shlex.split(args.ours_args), args.actors,
                     args.flower_api, args.flower_max_workers, args.ours_threads)  # fmt: skip
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
