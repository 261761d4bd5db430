"""The federation: what a fit's parts share, built once per fit and handed to each of them explicitly.

A :class:`Federation` holds the clients' statistics (``|D_k|``, ``n_{k,y}``, ``P_k``, shards), the schedule (how
rounds unfold), the system model (how long the clients take), the byte ledger, and the clients' data (for metrics).
:meth:`Federation.build` makes it from a method and a data module and hands it to both (``federate``); the
:class:`Federate` callback (every method adds it, ``configure_callbacks``) builds it when a fit starts unless the
caller built it first (the CLI does, so that a bad setting is a one-line error before anything is written), and
hands it to the callbacks (``on_federation``). It is the one place that looks up the trainer's parts.

Round events go through the federation: the method announces a round's start and end, the federation stamps the
end with its simulated time (:meth:`Federation.end_round`) and delivers both to every callback that defines
``on_round_start``/``on_round_end``, then to the method's own hook, then to the schedule (e.g. Semi-SFL's ``K_s``).

Its state (the schedule's, the system model's draws, the simulated time) is checkpointed by the method
(:mod:`lightning_sfl.runtime.federated`). A federation serves one fit: a later fit of the same method builds its
own (with the method's schedule, which continues, and the same system model).

>>> import lightning_sfl.loop.federation as federation
>>> sorted(n for n in federation.__all__)
['ClientData', 'Federate', 'Federation', 'legacy_federation_state']
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import lightning as L
import torch
from typing_extensions import override

from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.step import ClientStats, RoundEnd
from lightning_sfl.system.comm import CommLedger
from lightning_sfl.system.timing import RoundTraffic, SystemModel

if TYPE_CHECKING:
    from lightning_sfl.loop.schedule import Schedule

__all__ = ["ClientData", "Federate", "Federation", "legacy_federation_state"]


class ClientData(Protocol):
    """The federation's view of the clients' data (:class:`~lightning_sfl.data.FederatedDataModule` is one)."""

    client_stats: ClientStats
    #: Per-channel mean and standard deviation the inputs are normalised with.
    pixel_mean: tuple[float, ...]
    pixel_std: tuple[float, ...]

    def train_labels(self, rows: torch.Tensor) -> torch.Tensor:
        """True labels ``[n]`` of training rows ``rows`` (also of unlabelled clients: for metrics only)."""

    def train_inputs(self, rows: torch.Tensor, device: torch.device) -> torch.Tensor:
        """Normalised model inputs ``[n, C, H, W]`` of training rows ``rows`` on ``device``."""

    #: Images in the test split (what a server may hold as public data: FSHA).
    num_test: int

    def test_inputs(self, rows: torch.Tensor, device: torch.device) -> torch.Tensor:
        """Normalised model inputs ``[n, C, H, W]`` of test rows ``rows`` on ``device``."""

    def describe(self) -> str:
        """One line naming the dataset and its partition (plot titles)."""

    def federate(self, federation: Federation) -> None:
        """Receive the federation (the data module executes its schedule)."""


@dataclass(eq=False)
class Federation:
    """Everything a fit's parts share (see the module docstring).

    Attributes:
        stats: the clients' statistics (``|D_k|``, ``n_{k,y}``, ``P_k``, shards, ``S``, ``B``, seed).
        schedule: how rounds unfold (executed by the data module).
        system: the system model (the clients' compute and channel; every simulated time).
        data: the clients' data, for metrics (``None``: not available).
        ledger: the byte ledger of the current round.
        elapsed_seconds: simulated time at the end of the last round (s).
    """

    stats: ClientStats
    schedule: Schedule
    system: SystemModel
    data: ClientData | None = None
    ledger: CommLedger = field(default_factory=CommLedger)
    elapsed_seconds: float = 0.0
    #: The federation has served a fit (a later fit of the same method builds its own).
    served: bool = False
    _listeners: tuple = field(default=(), repr=False)

    @classmethod
    def build(cls, method: Any, data: ClientData, system: SystemModel | None = None) -> Federation:
        """The federation of ``method`` (a :class:`~lightning_sfl.algorithms.SplitFedAlgorithm`) on ``data``'s
        clients with the system model ``system`` (default: the method's, ``default_system()``), handed to both; the
        schedule is checked against the clients first (:meth:`Schedule.check`: a one-line error before any round)."""
        stats = data.client_stats
        schedule = method.schedule  # configured (and checked) once, after the method's construction
        schedule.check(stats)  # what it refuses of these clients (Semi-SFL without a labelled set), before any round
        system = method.default_system() if system is None else system
        method.check_system(system)  # what the method refuses of it (S²FL's fixed cut on a clock that never slides)
        system.bind(stats.num_clients, stats.seed, method.client_costs())
        schedule.bind_system(system, stats)
        federation = cls(stats, schedule, system, data)
        method.federate(federation)
        data.federate(federation)
        return federation

    # ------------------------------------------------------------------ round events
    def connect(self, trainer: L.Trainer, module: L.LightningModule, callbacks: list) -> None:
        """Deliver round events to ``callbacks`` (those defining ``on_round_start``/``on_round_end``) as
        ``hook(trainer, module, arg)``, then to ``module``'s own hook, then to the schedule's ``on_round_end``; the
        federation now serves that fit (:attr:`served`)."""
        self._listeners = (trainer, module, tuple(callbacks))
        self.served = True

    def disconnect(self) -> None:
        """The fit is over: no more round events (the trainer's parts are let go)."""
        self._listeners = ()

    def emit(self, hook: str, arg) -> None:
        """Round event ``hook`` (``on_round_start`` with the round's first step, ``on_round_end`` with its
        :class:`~lightning_sfl.loop.RoundEnd`)."""
        if not self._listeners:
            raise RuntimeError("the federation is not connected to a fit (the Federate callback connects it)")
        trainer, module, callbacks = self._listeners
        for callback in callbacks:
            fn = getattr(callback, hook, None)
            if callable(fn):
                fn(trainer, module, arg)
        fn = getattr(module, hook, None)  # the method's own (on_round_end; none has on_round_start)
        if callable(fn):
            fn(arg)
        fn = getattr(self.schedule, hook, None)
        if callable(fn):
            fn(arg)

    def end_round(self, event: RoundEnd) -> RoundEnd:
        """``event`` stamped with its simulated end time and duration: the schedule's clock where it keeps one
        (asynchronous events), else the system model's duration of the round's traffic."""
        if event.time is None:
            ledger = event.ledger
            traffic = RoundTraffic(
                event.clients,
                event.samples,
                event.iterations,
                ledger.per_client("up"),
                ledger.per_client("down"),
                ledger.totals().get("up/activations", 0),
                round=event.round,
                server_rows=event.server_rows,
                by_kind=ledger.bytes,
            )
            seconds = self.system.round_seconds(traffic)
            time = self.elapsed_seconds + seconds
        else:
            time = float(event.time)
            seconds = time - self.elapsed_seconds
        self.elapsed_seconds = time
        return replace(event, time=time, seconds=seconds)

    # ------------------------------------------------------------------ checkpointed state
    @override
    def state_dict(self) -> dict:
        return {
            "schedule": self.schedule.state_dict(),
            "system": self.system.state_dict(),
            "elapsed_seconds": self.elapsed_seconds,
        }

    @override
    def load_state_dict(self, state: dict) -> None:
        self.schedule.load_state_dict(state.get("schedule", {}))
        self.system.load_state_dict(state.get("system", {}))
        self.elapsed_seconds = float(state.get("elapsed_seconds", 0.0))

    def __getstate__(self) -> dict:  # a copy for another process (ddp_spawn) leaves the trainer's parts behind
        return {**self.__dict__, "_listeners": ()}


class Federate(L.Callback):
    """Builds the fit's :class:`Federation` if its method has none (or only one that served an earlier fit), connects
    it to the fit's callbacks and the method (round events), and hands it to every callback defining
    ``on_federation(trainer, module, federation)``. Every method adds it for a fit (``configure_callbacks``); nothing
    to configure, no state of its own (the method checkpoints the federation's)."""

    def __init__(self) -> None:
        self.federation: Federation | None = None

    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        federation = getattr(pl_module, "federation", None)
        if federation is None or federation.served or federation.data is not trainer.datamodule:
            data = trainer.datamodule
            if data is None or not hasattr(data, "client_stats"):
                raise ConfigError(
                    f"{type(pl_module).__name__} trains on a FederatedDataModule: "
                    "call trainer.fit(model, datamodule=FederatedDataModule(...))"
                )
            system = None if federation is None else federation.system  # a later fit keeps the system model
            federation = Federation.build(pl_module, data, system)
        federation.connect(trainer, pl_module, list(trainer.callbacks))
        self.federation = federation
        for callback in trainer.callbacks:
            hook = getattr(callback, "on_federation", None)
            if callable(hook):
                hook(trainer, pl_module, federation)

    @override
    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit" and self.federation is not None:
            self.federation.disconnect()


def legacy_federation_state(checkpoint: dict) -> dict:
    """The federation's state from a checkpoint written before the federation existed: the schedule's state with the
    data module, the wireless cell's draws and the simulated time with the ``SimulatedClock`` callback (``{}``: none).

    >>> legacy_federation_state({"FederatedDataModule": {"schedule": {"selection": {}}}})
    {'schedule': {'selection': {}}}
    """
    state: dict = {}
    old_data = checkpoint.get("FederatedDataModule") or {}
    if "schedule" in old_data or "selection" in old_data:
        state["schedule"] = old_data.get("schedule", {"selection": old_data.get("selection", {})})
    for key, value in (checkpoint.get("callbacks") or {}).items():
        if key.startswith("SimulatedClock") and isinstance(value, dict):
            state["system"] = {k: value.get(k) for k in ("seed", "distances_m", "capacities")}
            state["elapsed_seconds"] = value.get("elapsed_seconds", 0.0)
    return state
