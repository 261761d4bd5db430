"""What every asynchronous method shares (GAS, AsyncSFL, FedBuff, CA²FL): ``C`` clients in flight on the simulated
clock of :class:`~lightning_sfl.loop.AsyncEvents`, persistent client slots, the model buffer, and the clock's times
from the run's system model.

A client takes a slot when it starts, downloading the global model as it is then, and keeps it (weights and
optimiser state) until its upload, across rounds. Every upload enters the model buffer; the ``Q_c``-th ends the
round: :meth:`AsyncMethod.aggregate` replaces the global model (eq. 10 of GAS by default), and the client drawn to
take the slot next downloads it.

Simulated times (:meth:`AsyncMethod.client_times`) use the run's :class:`~lightning_sfl.callbacks.SimulatedClock`
(placement, compute speeds ``f_k``, bandwidth ``W``; the GAS paper's ``f_k ~ U[1e9, 1e10]`` is
``--clock.flops_high 1e10``), each client's rate ``r_k`` at ``W / C`` of the bandwidth (the GAS code gives every
client all of ``W``: ``full_bandwidth=True``). With ``b_k`` rows per minibatch, ``c_fwd``/``c_bwd`` FLOPs per sample
of a forward/backward pass of the client model, ``a`` bytes of one row's activations and label and ``m`` bytes of
the client model:

* split methods: forward ``b_k·c_fwd / f_k``, activation upload ``8·b_k·a / r_k``, backward ``b_k·c_bwd / f_k``,
  model upload ``8·m / r_k``;
* FL methods: a local iteration ``b_k·(c_fwd + c_bwd) / f_k``, model upload ``8·m / r_k``.
"""

from __future__ import annotations

import math

import torch

from lightning_sfl.algorithms.base import SplitFedAlgorithm
from lightning_sfl.algorithms.client_bank import ClientBank
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import AsyncEvents, ClientStats, ClientTimes, Schedule
from lightning_sfl.loop.async_events import UploadStep
from lightning_sfl.system.channel import uplink_rates
from lightning_sfl.system.comm import module_bytes
from lightning_sfl.system.flops import forward_flops_per_sample, training_flops_per_sample

__all__ = ["AGGREGATIONS", "AsyncMethod", "choice"]

AGGREGATIONS = ("data_size", "uniform")


def choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    """``value`` if it is one of ``allowed``, else a one-line :class:`~lightning_sfl.errors.ConfigError`."""
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} must be one of: {', '.join(allowed)}")
    return value


class AsyncMethod(SplitFedAlgorithm):
    """Base of the asynchronous methods (see the module docstring).

    Args:
        concurrency: ``C``, clients in flight.
        flush_every: ``Q_s``, activation arrivals per server update (split methods).
        aggregate_every: ``Q_c``, uploads per aggregation (one round).
        client_batch_size: ``B``, rows per client minibatch (``None``: the data module's ``batch_size``).
        aggregation: ``data_size`` (``|D_k|`` weights, GAS eq. 10) or ``uniform`` (the GAS code).
        full_bandwidth: every client gets the whole bandwidth (the GAS code) instead of ``W / C``.
        batch_arrivals: process the arrivals of distinct clients between two server updates as one batched step
            (exact); ``False``: one step per arrival.
        **kwargs: the base's (``local_iters`` is ``E``, local iterations per participation).
    """

    step_handlers = {"arrivals": "no_training", "upload": "upload"}

    def __init__(
        self,
        concurrency: int = 10,
        flush_every: int = 10,
        aggregate_every: int = 10,
        client_batch_size: int | None = None,
        aggregation: str = "data_size",
        full_bandwidth: bool = False,
        batch_arrivals: bool = True,
        **kwargs,
    ) -> None:
        self._async = {
            "concurrency": concurrency,
            "flush_every": flush_every,
            "aggregate_every": aggregate_every,
            "batch_size": client_batch_size,
            "batch_arrivals": batch_arrivals,
        }
        self.aggregation = choice("aggregation", aggregation, AGGREGATIONS)
        super().__init__(**kwargs)
        self.full_bandwidth = bool(full_bandwidth)
        self.uploads: list[tuple[dict[str, torch.Tensor], int]] = []  # the model buffer; empty at every round end

    def configure_schedule(self) -> Schedule:
        return AsyncEvents(local_iters=self.local_iters, **self._async)

    # ------------------------------------------------------------------ setup: the clock's times
    def setup(self, stage: str) -> None:
        if stage == "fit":
            if self.world_size > 1:
                raise ConfigError(f"{type(self).__name__} runs on one process (got {self.world_size})")
            stats: ClientStats = self.trainer.datamodule.client_stats
            rows = torch.tensor([self.schedule.rows_per_batch(k, stats) for k in range(stats.num_clients)])
            self._act_shape = self.activation_shape()
            if self.schedule.times is None:
                self.schedule.bind_times(self.client_times(stats, rows))
        super().setup(stage)

    @torch.no_grad()
    def activation_shape(self) -> tuple[int, ...]:
        """Shape of one sample's output of the client model (the global one in eval mode: no statistics move)."""
        param = next(self.client.parameters())
        was_training = self.client.training
        self.client.eval()
        out = self.client(self.example_input_array.to(param.device, param.dtype))
        self.client.train(was_training)
        return tuple(out.shape[1:])

    def client_times(self, stats: ClientStats, rows: torch.Tensor) -> ClientTimes:
        """Per-client seconds of the clock's events (see the module docstring)."""
        from lightning_sfl.callbacks import SimulatedClock

        clock = next((cb for cb in self.trainer.callbacks if isinstance(cb, SimulatedClock)), None)
        if clock is None:  # used without the CLI: the GAS paper's system (f_k ~ U[1e9, 1e10])
            clock = SimulatedClock(flops_high=1e10, seed=stats.seed)
        if clock.distances_m is None or len(clock.distances_m) != stats.num_clients:
            clock.draw_system(stats.num_clients)
        shape = tuple(self.hparams.input_shape)
        forward = forward_flops_per_sample(self.client.net, shape)
        backward = training_flops_per_sample(self.client.net, shape) - forward
        bandwidth = clock.bandwidth_hz if self.full_bandwidth else clock.bandwidth_hz / self.schedule.concurrency
        rate = uplink_rates(clock.distances_m, bandwidth, clock.tx_power_w, clock.noise_dbm_per_hz)
        rows, caps = rows.double(), clock.capacities
        model_upload = 8.0 * module_bytes(self.client.net) / rate
        if not self.split:
            return ClientTimes.local(rows * (forward + backward) / caps, model_upload)
        value_bytes = next(self.client.parameters()).element_size()
        act_bits = 8.0 * (math.prod(self._act_shape) * value_bytes + 8)  # per row: activations and an int64 label
        return ClientTimes.split(rows * forward / caps, rows * backward / caps, rows * act_bits / rate, model_upload)

    # ------------------------------------------------------------------ round edges, uploads, aggregation
    def start_round(self, step) -> None:
        if step.round == 0:  # the first C clients download the initial model; later clients when they start
            self.reset_slots()

    def upload(self, step: UploadStep) -> None:
        """Eq. (9): the client's model enters the buffer; unless the buffer is full (the round's end, where
        :meth:`aggregate` follows), the next client takes the slot with the global model as it is now."""
        slot = int(step.slots[0])
        self.uploads.append((self.bank.snapshot(slot), int(step.clients[0])))
        self.ledger.add("up", self.client_kind, module_bytes(self.client.net), step.slots)
        self.log("train/staleness", float(step.round - step.version), on_step=False, on_epoch=True, batch_size=1)
        if not step.aggregate:
            self.reset_slots(step.slots)

    def upload_weights(self, clients: list[int]) -> torch.Tensor:
        """Weights of the buffered uploads of ``clients`` in the aggregation: ``|D_k|`` or uniform, ``[Q_c]``."""
        sizes = self.client_sizes[clients].double()
        return sizes if self.aggregation == "data_size" else torch.ones_like(sizes)

    def aggregate(self, step: UploadStep) -> None:
        """Eq. (10): the global model ← the weighted mean of the buffered uploads; the buffer empties and the next
        client takes the finished client's slot."""
        states, clients = zip(*self.uploads)
        ClientBank.aggregate_snapshots(self.client.net, states, self.upload_weights(list(clients)))
        self.uploads.clear()
        self.reset_slots(step.slots)
