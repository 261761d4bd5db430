"""What every asynchronous method shares (GAS, AsyncSFL, FedBuff, CA²FL): ``C`` clients in flight on the simulated
clock of :class:`~lightning_sfl.loop.AsyncEvents`, persistent client slots, the model buffer.

A client takes a slot when it starts, downloading the global model as it is then, and keeps it (weights and
optimiser state) until its upload, across rounds. Every upload enters the model buffer; the ``Q_c``-th ends the
round: :meth:`AsyncMethod.aggregate` replaces the global model (eq. 10 of GAS by default), and the client drawn to
take the slot next downloads it.

The clock's times come from the federation's system model (:meth:`~lightning_sfl.system.wireless.WirelessCell.
client_times`: forward, activation upload, backward and model upload of each client, each client at ``W / C`` of the
bandwidth, or all of it with ``full_bandwidth=True`` as in the GAS code). Without the CLI the system model is the GAS
paper's (``f_k ~ U[1e9, 1e10]``, placement seeded by the data seed); the CLI's is ``--clock.*`` (GAS's
``f_k ~ U[1e9, 1e10]``: ``--clock.flops_high 1e10``).
"""

from __future__ import annotations

import torch
from typing_extensions import override

from lightning_sfl.algorithms import banks, federated
from lightning_sfl.algorithms.base import SplitFedAlgorithm
from lightning_sfl.algorithms.client_bank import ClientBank
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import AsyncEvents, Schedule
from lightning_sfl.loop.async_events import UploadStep
from lightning_sfl.system.comm import module_bytes
from lightning_sfl.system.wireless import WirelessCell

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
        batch_arrivals: process the arrivals between two server updates in batched steps, one for every slot's
            next arrival (exact); ``False``: one step per arrival.
        **kwargs: the base's (``local_iters`` is ``E``, local iterations per participation).
    """

    step_handlers = {"arrivals": None, "upload": "upload"}

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
        super().__init__(**kwargs)
        self.concurrency, self.flush_every, self.aggregate_every = concurrency, flush_every, aggregate_every
        self.client_batch_size, self.batch_arrivals = client_batch_size, batch_arrivals
        self.aggregation = choice("aggregation", aggregation, AGGREGATIONS)
        self.full_bandwidth = bool(full_bandwidth)
        self.uploads: list[tuple[dict[str, torch.Tensor], int]] = []  # the model buffer; empty at every round end
        federated.checked_schedule(self, self.async_events())  # the settings are checked now (one-line errors)

    @override
    def configure_schedule(self) -> Schedule:
        return self.async_events()

    def async_events(self, **options) -> AsyncEvents:
        """The asynchronous schedule of this method's settings (``C``, ``E``, ``Q_s``, ``Q_c``, ``B``) and
        ``options`` of :class:`~lightning_sfl.loop.AsyncEvents`."""
        return AsyncEvents(
            concurrency=self.concurrency,
            local_iters=self.local_iters,
            flush_every=self.flush_every,
            aggregate_every=self.aggregate_every,
            batch_size=self.client_batch_size,
            batch_arrivals=self.batch_arrivals,
            full_bandwidth=self.full_bandwidth,
            **options,
        )

    @override
    def default_system(self) -> WirelessCell:
        """The GAS paper's system (``f_k ~ U[1e9, 1e10]``), placed with the data seed."""
        return WirelessCell(flops_high=1e10, seed=None)

    @override
    def one_process_only(self) -> str | None:
        """The asynchronous clock and its slots live in one process."""
        return type(self).__name__

    @override
    def setup(self, stage: str) -> None:
        if stage == "fit":
            self._act_shape = federated.activation_shape(self)
        super().setup(stage)

    # ------------------------------------------------------------------ round edges, uploads, aggregation
    @override
    def start_round(self, step) -> None:
        if step.round == 0:  # the first C clients download the initial model; later clients when they start
            self.reset_slots()

    def upload(self, step: UploadStep) -> None:
        """Eq. (9): the client's model enters the buffer; unless the buffer is full (the round's end, where
        :meth:`aggregate` follows), the next client takes the slot with the global model as it is now."""
        slot = int(step.slots[0])
        self.uploads.append((self.bank.snapshot(slot), int(step.clients[0])))
        self.ledger.add("up", banks.traffic_kind(self), module_bytes(self.client.net), step.slots)
        self.log("train/staleness", float(step.round - step.version), on_step=False, on_epoch=True, batch_size=1)
        if not step.aggregate:
            self.reset_slots(step.slots)

    def upload_weights(self, clients: list[int]) -> torch.Tensor:
        """Weights of the buffered uploads of ``clients`` in the aggregation: ``|D_k|`` or uniform, ``[Q_c]``."""
        sizes = self.client_sizes[clients].double()
        return sizes if self.aggregation == "data_size" else torch.ones_like(sizes)

    @override
    def aggregate(self, step: UploadStep) -> None:
        """Eq. (10): the global model ← the weighted mean of the buffered uploads; the buffer empties and the next
        client takes the finished client's slot."""
        states, clients = zip(*self.uploads)
        ClientBank.aggregate_snapshots(self.client.net, states, self.upload_weights(list(clients)))
        self.uploads.clear()
        self.reset_slots(step.slots)
