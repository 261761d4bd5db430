"""The loop: schedules as data (a toy asynchronous and a toy phased schedule through the real Trainer and
CLI, resumed bit-exactly), round events, checkpointed method state, step-kind checks, and the structure rules
(no round arithmetic in callbacks or methods, no import circle)."""

from __future__ import annotations

import ast
import csv
from pathlib import Path

import lightning as L
import pytest
import torch
from _helpers import REPO, quiet_trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from toy_schedules import ToyAsync, ToyAsyncSFL

from lightning_sfl.algorithms import SCALA, FedAvg
from lightning_sfl.callbacks import CommunicationBytes, RoundCallback
from lightning_sfl.cli import main
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Schedule, Step


def _dm() -> FederatedDataModule:
    return FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)


# ----------------------------------------------------------------------------- the toy asynchronous schedule
def test_toy_async_schedule_orders_events_by_simulated_time():
    """Clients 0, 1, 2 take 1, 1.75 and 3 s per iteration, upload 0.5 s after their 2nd; rounds end at every 2nd
    upload. Derived by hand: client 0 arrives at 1 and 2 and uploads at 2.5, when a newcomer with speed
    ``seconds[k % 3]`` joins its slot; client 1 arrives at 1.75 and 3.5 and uploads at 4 (end of round 0)."""
    stats = _dm().client_stats
    schedule = ToyAsync()
    r0 = schedule.plan_round(0, stats)
    got = [(s.kind, int(s.slots[0]), s.time) for s in r0]
    want = [("join", 0, 0.0), ("join", 1, 0.0), ("join", 2, 0.0), ("arrival", 0, 1.0), ("arrival", 1, 1.75)]
    want += [("arrival", 0, 2.0), ("upload", 0, 2.5), ("join", 0, 2.5), ("arrival", 2, 3.0)]
    newcomer = int(r0[7].clients[0])
    assert newcomer not in (0, 1, 2)  # drawn from the idle clients
    first = 1.0 * (newcomer % 3 == 0) + 1.75 * (newcomer % 3 == 1) + 3.0 * (newcomer % 3 == 2)
    tail = sorted([("arrival", 0, 2.5 + first), ("arrival", 1, 3.5)], key=lambda e: (e[2], e[1]))
    upload_1 = ("upload", 1, 4.0)
    assert got[:9] == want and got[-1] == upload_1 and got[9:-1] == [e for e in tail if e[2] <= 4.0]
    assert [s.round_end for s in r0] == [False] * (len(r0) - 1) + [True]
    assert [s.index for s in r0] == list(range(len(r0))) and all(s.round == 0 for s in r0)
    for s in r0:  # arrivals carry rows of their client's shard; joins and uploads none
        assert len(s.rows) == (8 if s.kind == "arrival" else 0) == int(s.sizes.sum())
        assert set(s.rows.tolist()) <= set(stats.shards[int(s.clients[0])].tolist())
    # state at the round's end: a resumed schedule plans the same next round
    other = ToyAsync()
    other.load_state_dict(schedule.state_dict())
    a, b = schedule.plan_round(1, stats), other.plan_round(1, stats)
    assert [(s.kind, s.clients.tolist(), s.time, s.rows.tolist()) for s in a] == [
        (s.kind, s.clients.tolist(), s.time, s.rows.tolist()) for s in b
    ]
    assert a[0].round_start and not a[1].round_start


# ----------------------------------------------------------------------------- through the CLI, resumed
def _cli_args(model: str, folder: Path, rounds: int, *extra: str) -> list[str]:
    return [
        "fit",
        f"--model={model}",
        "--model.local_iters=2",
        "--model.lr=0.05",
        "--model.momentum=0.5",  # optimiser state that must survive the resume
        "--data.dataset=digits",
        "--data.num_clients=8",
        "--data.alpha=2",
        "--data.participation=0.5",
        "--data.batch_size=24",
        "--data.seed=1",
        f"--trainer.max_epochs={rounds}",
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.save_dir={folder}",
        "--trainer.logger.name=csv",
        f"--checkpoint.dirpath={folder / 'ckpt'}",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--dissimilarity.every_n_rounds=2",
        *extra,
    ]


def _per_round(folder: Path) -> dict[int, dict[str, str]]:
    rows: dict[int, dict[str, str]] = {}
    for path in sorted(folder.glob("csv/version_*/metrics.csv")):
        with open(path) as f:
            for row in csv.DictReader(f):
                if not row.get("epoch"):  # rows logged outside an epoch (the partition report)
                    continue
                rows.setdefault(int(row["epoch"]), {}).update({k: v for k, v in row.items() if v != ""})
    return rows


def _fit_full_and_resumed(model: str, tmp_path: Path, rounds: int = 6, stop: int = 3):
    main(_cli_args(model, tmp_path / "full", rounds))
    main(_cli_args(model, tmp_path / "part", stop))
    main(_cli_args(model, tmp_path / "part", rounds, f"--ckpt_path={tmp_path / 'part' / 'ckpt' / 'last.ckpt'}"))
    full = torch.load(tmp_path / "full" / "ckpt" / "last.ckpt", weights_only=True)
    resumed = torch.load(tmp_path / "part" / "ckpt" / "last.ckpt", weights_only=True)
    assert full["epoch"] == resumed["epoch"] == rounds - 1 and full["global_step"] == resumed["global_step"]
    assert full["state_dict"].keys() == resumed["state_dict"].keys()
    for key, value in full["state_dict"].items():
        assert torch.equal(resumed["state_dict"][key], value), f"{model}: {key} differs after resume"
    federations = full["lightning_sfl"]["federation"], resumed["lightning_sfl"]["federation"]
    assert federations[0]["schedule"] == federations[1]["schedule"]  # the schedule's state
    assert federations[0]["elapsed_seconds"] == federations[1]["elapsed_seconds"]  # the simulated time
    assert federations[0]["system"] == federations[1]["system"]  # the system model's draws (seed, K, digest)
    assert federations[0]["system"]["draws"] is not None
    want, got = _per_round(tmp_path / "full"), _per_round(tmp_path / "part")
    assert sorted(want) == sorted(got) == list(range(rounds))
    for epoch in range(stop, rounds):
        for key in want[epoch]:
            assert got[epoch][key] == want[epoch][key], (model, epoch, key)
    return full, want


@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")
def test_toy_async_schedule_runs_through_the_cli_and_resumes_bit_exactly(tmp_path):
    full, metrics = _fit_full_and_resumed("toy_schedules.ToyAsyncSFL", tmp_path)
    # the slots of clients in flight outlive rounds: they are in the checkpoint (synchronous slots are not)
    assert any(k.startswith("client_banks.client.slots.2.") for k in full["state_dict"])
    # one round per aggregation; simulated time = the schedule's time of the round's last upload
    schedule, stats = ToyAsync(), _dm().client_stats
    ends = [schedule.plan_round(r, stats)[-1].time for r in range(6)]
    assert [float(metrics[e]["round"]) for e in range(6)] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert [float(metrics[e]["clock/elapsed_seconds"]) for e in range(6)] == pytest.approx(ends)
    assert all(b > a for a, b in zip(ends, ends[1:]))
    # traffic: every round 2 uploads of the client half, and as many joins
    half = sum(v.numel() * v.element_size() for k, v in full["state_dict"].items() if k.startswith("client.net."))
    assert [float(metrics[e]["comm/up/client_half_bytes"]) for e in range(6)] == [2.0 * half] * 6


@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")
def test_toy_phased_schedule_adapts_its_length_and_resumes_bit_exactly(tmp_path):
    full, metrics = _fit_full_and_resumed("toy_schedules.ToyPhasedSFL", tmp_path)
    server_steps = [2] + [int(float(metrics[e]["schedule/server_steps"])) for e in range(5)]  # K_s of rounds 0..5
    assert len(set(server_steps)) > 1, "K_s never changed"
    assert full["global_step"] == sum(k + 2 for k in server_steps)  # rounds of K_s server steps + T = 2 client steps
    assert "loss_trace" in full["state_dict"]  # the method's declared state is checkpointed


# ----------------------------------------------------------------------------- round events
class _Events(RoundCallback):
    def __init__(self) -> None:
        self.starts: list[Step] = []
        self.ends: list = []

    def on_round_start(self, trainer, pl_module, step) -> None:
        self.starts.append(step)

    def on_round_end(self, trainer, pl_module, event) -> None:
        self.ends.append((event, event.ledger.totals(), dict(trainer.callback_metrics)))


def test_callbacks_receive_round_events_with_who_took_part():
    events, comm = _Events(), CommunicationBytes()
    dm = _dm()
    quiet_trainer(3, callbacks=[events, comm], limit_val_batches=0).fit(SCALA(local_iters=3, lr=0.05), dm)
    assert [s.round for s in events.starts] == [0, 1, 2] and all(s.index == 0 for s in events.starts)
    assert [e.round for e, _, _ in events.ends] == [0, 1, 2]
    cumulative, elapsed = 0, 0.0
    for start, (event, totals, _) in zip(events.starts, events.ends):
        assert torch.equal(event.clients, start.clients)  # slot k holds client k of the round
        assert torch.equal(event.samples, 3 * start.sizes)  # T·B_k rows per client
        assert event.seconds > 0 and event.time == pytest.approx(elapsed + event.seconds)  # the system model's
        elapsed = event.time
        cumulative += totals["total"]
    assert comm.cumulative == cumulative


def test_async_round_end_carries_the_schedules_time():
    events = _Events()
    torch.manual_seed(0)
    quiet_trainer(2, callbacks=[events], limit_val_batches=0).fit(ToyAsyncSFL(local_iters=2, lr=0.05), _dm())
    schedule, stats = ToyAsync(), _dm().client_stats
    assert [e.time for e, _, _ in events.ends] == [schedule.plan_round(r, stats)[-1].time for r in range(2)]
    assert [s.kind for s in events.starts] == ["join", "join"]  # round 1 starts with the newcomer of the last upload


def test_a_step_kind_without_handler_is_a_one_line_error_when_the_schedule_is_configured():
    """Before anything trains: when the method's schedule is first used (``model.schedule``, ``Federation.build``, the
    start of ``trainer.fit``)."""

    class Phases(Schedule):
        kinds = ("server", "local")

    class Method(FedAvg):
        def configure_schedule(self):
            return Phases()

    with pytest.raises(ConfigError, match=r"Method has no handler for step kind\(s\) \['server'\] of Phases"):
        _ = Method(local_iters=1).schedule
    with pytest.raises(ConfigError, match=r"Method has no handler for step kind\(s\) \['server'\] of Phases"):
        quiet_trainer(1).fit(Method(local_iters=1), _dm())


# ----------------------------------------------------------------------------- checkpointed method state
class _Counting(FedAvg):
    """FedAvg that counts each client's participations in a declared state."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("participations", lambda: torch.zeros(self.client_stats.num_clients))

    def aggregate(self, step: Step) -> None:
        super().aggregate(step)
        self.participations[step.clients] += 1


def test_declared_state_is_built_at_fit_saved_and_restored(tmp_path):
    model = _Counting(local_iters=1, lr=0.05)
    assert not hasattr(model, "participations")  # shape known only once the clients are
    trainer = quiet_trainer(3, enable_checkpointing=True, callbacks=[ModelCheckpoint(tmp_path, save_last=True)])
    trainer.fit(model, _dm())
    assert model.participations.shape == (8,) and model.participations.sum() == 3 * 4
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert torch.equal(saved["state_dict"]["participations"], model.participations)
    assert not any(k.startswith("client_banks.") for k in saved["state_dict"])  # synchronous slots: rebuilt
    fresh = _Counting(local_iters=1, lr=0.05)  # outside fit: made from the checkpoint's tensor
    checkpointing = {"enable_checkpointing": True, "callbacks": [ModelCheckpoint(tmp_path, save_last=True)]}
    quiet_trainer(1, **checkpointing).validate(fresh, _dm(), ckpt_path=str(tmp_path / "last.ckpt"), verbose=False)
    assert torch.equal(fresh.participations, model.participations)
    quiet_trainer(1).fit(model, _dm())  # a second fit on the same module continues from its state
    assert model.participations.sum() == 3 * 4 + 4


# ----------------------------------------------------------------------------- structure rules
def _sources(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


def test_no_callback_reads_local_iters_and_no_method_branches_on_batch_idx():
    for path in _sources("callbacks"):
        tree = ast.parse(path.read_text())
        names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        names |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert "local_iters" not in names, f"{path.name} reads local_iters"
    for path in _sources("lightning_sfl/algorithms"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                assert "batch_idx" not in used, f"{path.name}:{node.lineno} compares batch_idx"


def test_no_module_imports_the_console_entry_point():
    """``lightning_sfl.cli`` only dispatches (to the LightningCLI and to ``compare``): nothing imports it back but
    ``python -m lightning_sfl``'s ``__main__`` (the same entry point), so ``cli → compare → runner → cli`` cannot come
    back."""
    for path in [*_sources("lightning_sfl"), *_sources("callbacks")]:
        if path.name in ("cli.py", "__main__.py") and path.parent.name == "lightning_sfl":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                target = node.module
            elif isinstance(node, ast.Import):
                target = " ".join(a.name for a in node.names)
            else:
                continue
            assert "lightning_sfl.cli" not in target.split(), f"{path} imports lightning_sfl.cli"


def test_the_lightning_cli_module_does_not_import_compare():
    tree = ast.parse((REPO / "lightning_sfl" / "lightning_cli.py").read_text())
    modules = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not any(m and m.startswith("lightning_sfl.compare") for m in modules)


def test_trainer_steps_are_typed_steps():
    seen = []

    class Record(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append(batch)

    quiet_trainer(1, callbacks=[Record()], limit_val_batches=0).fit(SCALA(local_iters=2, lr=0.05), _dm())
    assert [type(s) for s in seen] == [Step, Step] and [s.index for s in seen] == [0, 1]
    assert seen[0].x.dtype == torch.float32  # normalised on the device


# ----------------------------------------------------------------------------- the federation
def test_a_federated_method_pickles_without_the_trainer():
    """A method holding its federation travels to other processes (``ddp_spawn`` pickles it): the copy keeps the
    federation's statistics, schedule and system model, and none of the fit's parts."""
    import pickle

    from lightning_sfl.loop import Federation

    model, dm = SCALA(local_iters=1, lr=0.05), _dm()
    Federation.build(model, dm)
    trainer = quiet_trainer(1, limit_val_batches=0)
    trainer.fit(model, dm)
    model.federation.connect(trainer, model, [])  # as during a fit
    copy = pickle.loads(pickle.dumps(model))
    assert copy.federation is not model.federation and copy.federation._listeners == ()
    assert torch.equal(copy.federation.stats.sizes, dm.client_stats.sizes)
    assert torch.equal(copy.federation.system.distances_m, model.federation.system.distances_m)


def test_the_federations_state_is_saved_with_the_method_also_after_validate(tmp_path):
    """The federation's state (schedule, system model, simulated time) travels with the method's in every checkpoint:
    also in one written after a ``validate`` of the fitted model (no federation is built for evaluation)."""
    model = SCALA(local_iters=1, lr=0.05)
    trainer = quiet_trainer(2, limit_val_batches=1)
    trainer.fit(model, _dm())
    elapsed = model.federation.elapsed_seconds
    assert elapsed > 0
    trainer.validate(model, _dm(), verbose=False)
    trainer.save_checkpoint(tmp_path / "after_validate.ckpt")
    saved = torch.load(tmp_path / "after_validate.ckpt", weights_only=True)["lightning_sfl"]["federation"]
    assert saved["elapsed_seconds"] == elapsed and saved["schedule"] == model.federation.schedule.state_dict()
