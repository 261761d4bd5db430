"""What every asynchronous method shares (GAS, AsyncSFL, FedBuff, CA²FL): ``C`` clients in flight on the simulated
clock of :class:`~lightning_sfl.loop.AsyncEvents`, persistent client slots, the model buffer; as functions their hooks
call (:func:`async_events`, :func:`start_round`, :func:`upload`, :func:`aggregate`) and, for the plain-FL ones, the
base :class:`AsyncMethod` (the split ones are split methods: :class:`~lightning_sfl.algorithms.gas.AsyncSFL`).

A client takes a slot when it starts, downloading the global model as it is then, and keeps it (weights and
optimiser state) until its upload, across rounds. Every upload enters the model buffer; the ``Q_c``-th ends the
round: :func:`aggregate` replaces the global model (eq. 10 of GAS by default), and the client drawn to take the slot
next downloads it.

The clock's times come from the federation's system model
(:meth:`~lightning_sfl.system.wireless.WirelessCell.client_times`: forward, activation upload, backward and model upload
of each client, each client at ``W / C`` of the
bandwidth, or all of it with ``full_bandwidth=True`` as in the GAS code). Without the CLI the system model is the GAS
paper's (``f_k ~ U[1e9, 1e10]``, placement seeded by the data seed); the CLI's is ``--clock.*`` (GAS's
``f_k ~ U[1e9, 1e10]``: ``--clock.flops_high 1e10``).
"""

from __future__ import annotations

import torch
from typing_extensions import override

from lightning_sfl.algorithms.base import SplitFedAlgorithm
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import AsyncEvents, Schedule
from lightning_sfl.loop.async_events import UploadStep
from lightning_sfl.runtime import banks, federated
from lightning_sfl.runtime.client_bank import ClientBank
from lightning_sfl.system.comm import module_bytes
from lightning_sfl.system.wireless import WirelessCell

__all__ = [
    "AGGREGATIONS",
    "UNUSED_OPTIONS",
    "AsyncMethod",
    "RoundMeans",
    "aggregate",
    "async_events",
    "choice",
    "default_system",
    "keep_settings",
    "start_round",
    "upload",
]

AGGREGATIONS = ("data_size", "uniform")
#: The base's options the asynchronous methods have no use for (their ``unused_options``): a client that finishes hands
#: its slot to one drawn uniformly among the idle ones (:class:`~lightning_sfl.loop.async_clock.AsyncClock`), not by a
#: selection policy.
UNUSED_OPTIONS = {
    "client_selection": "an asynchronous client's slot goes to an idle client drawn uniformly (AsyncClock), "
    "not by a selection policy"
}


def choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    """``value`` if it is one of ``allowed``, else a one-line :class:`~lightning_sfl.errors.ConfigError`."""
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} must be one of: {', '.join(allowed)}")
    return value


def async_events(method, **options) -> AsyncEvents:
    """The asynchronous schedule of ``method``'s settings (``C``, ``E``, ``Q_s``, ``Q_c``, ``B``, its attributes
    of the same names as :class:`AsyncMethod`'s arguments) and ``options`` of
    :class:`~lightning_sfl.loop.AsyncEvents`."""
    return AsyncEvents(
        concurrency=method.concurrency,
        local_iters=method.local_iters,
        flush_every=method.flush_every,
        aggregate_every=method.aggregate_every,
        batch_size=method.client_batch_size,
        batch_arrivals=method.batch_arrivals,
        full_bandwidth=method.full_bandwidth,
        **options,
    )


def keep_settings(
    method,
    concurrency: int,
    flush_every: int,
    aggregate_every: int,
    client_batch_size: int | None,
    aggregation: str,
    full_bandwidth: bool,
    batch_arrivals: bool,
) -> None:
    """``method``'s asynchronous settings (:class:`AsyncMethod`'s arguments), checked by the schedule they describe
    (one-line errors at construction); its model buffer starts empty."""
    method.concurrency, method.flush_every, method.aggregate_every = concurrency, flush_every, aggregate_every
    method.client_batch_size, method.batch_arrivals = client_batch_size, batch_arrivals
    method.aggregation = choice("aggregation", aggregation, AGGREGATIONS)
    method.full_bandwidth = bool(full_bandwidth)
    method.uploads = []  # the model buffer: (state, client) of each upload; empty at every round end
    federated.checked_schedule(method, async_events(method))


def start_round(method, step) -> None:
    """The first ``C`` clients download the initial model; later ones when they start (:func:`upload`)."""
    if step.round == 0:
        method.reset_slots()


class RoundMeans:
    """Means over a round of what a method would ``log`` at every step (``on_epoch=True``), logged once, at the round's
    end (:meth:`log_to`): Lightning's ``log`` costs a few hundred µs a call, and an asynchronous round has hundreds of
    steps. :meth:`add` takes a sum over ``count`` items (a tensor or a number): the mean is the one that per-step logs
    of ``sum / count`` with ``batch_size=count`` give.

    >>> means = RoundMeans()
    >>> means.add("a", 3.0, 2)
    >>> means.add("a", 1.0)
    >>> means.means()
    {'a': (1.3333333333333333, 3)}
    """

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor | float] = {}
        self.counts: dict[str, int] = {}

    def add(self, key: str, total: torch.Tensor | float, count: int = 1) -> None:
        """``total``, a sum over ``count`` items (tensors stay where they are: no read of the device)."""
        self.sums[key] = self.sums[key] + total if key in self.sums else total
        self.counts[key] = self.counts.get(key, 0) + count

    def means(self) -> dict[str, tuple[torch.Tensor | float, int]]:
        """Each key's mean and count."""
        return {key: (self.sums[key] / self.counts[key], self.counts[key]) for key in self.sums}

    def log_to(self, method) -> None:
        """``method.log`` each key's mean over the round (``batch_size``: its count), then start over."""
        for key, (mean, count) in self.means().items():
            method.log(key, mean, on_step=False, on_epoch=True, batch_size=count)
        self.clear()

    def clear(self) -> None:
        self.sums.clear()
        self.counts.clear()


def upload(method, step: UploadStep, means: RoundMeans | None = None) -> None:
    """Eq. (9): the client's model enters the buffer; unless the buffer is full (the round's end, where the aggregation
    follows), the next client takes the slot with the global model as it is now. The client's staleness is logged
    (``train/staleness``, the round's mean), or added to ``means``."""
    slot = int(step.slots[0])
    method.uploads.append((method.bank.snapshot(slot), int(step.clients[0])))
    method.ledger.add("up", banks.traffic_kind(method), module_bytes(method.client.net), step.slots)
    staleness = float(step.round - step.version)
    if means is not None:
        means.add("train/staleness", staleness)
    else:
        method.log("train/staleness", staleness, on_step=False, on_epoch=True, batch_size=1)
    if not step.aggregate:
        method.reset_slots(step.slots)


def aggregate(method, step: UploadStep) -> None:
    """Eq. (10): the global model ← the mean of the buffered uploads weighted by ``|D_k|`` (``aggregation=
    "data_size"``) or uniformly; the buffer empties and the next client takes the finished client's slot."""
    states, clients = zip(*method.uploads)
    sizes = method.client_sizes[list(clients)].double()
    weights = sizes if method.aggregation == "data_size" else torch.ones_like(sizes)
    ClientBank.aggregate_snapshots(method.client.net, states, weights)
    method.uploads.clear()
    method.reset_slots(step.slots)


def default_system() -> WirelessCell:
    """The GAS paper's system (``f_k ~ U[1e9, 1e10]``), placed with the data seed."""
    return WirelessCell(flops_high=1e10, seed=None)


class AsyncMethod(SplitFedAlgorithm):
    """Base of the asynchronous plain-FL methods (FedBuff, CA²FL; the split ones, AsyncSFL and GAS, are split methods
    with the same settings and the functions of this module).

    Args:
        concurrency: ``C``, clients in flight.
        flush_every: ``Q_s``, activation arrivals per server update (split methods; FedBuff and CA²FL refuse it).
        aggregate_every: ``Q_c``, uploads per aggregation (one round).
        client_batch_size: ``B``, rows per client minibatch (``None``: the data module's ``batch_size``).
        aggregation: ``data_size`` (``|D_k|`` weights, GAS eq. 10) or ``uniform`` (the GAS code); FedBuff and CA²FL,
            whose ``update`` is their own, refuse it.
        full_bandwidth: every client gets the whole bandwidth (the GAS code) instead of ``W / C``.
        batch_arrivals: process the arrivals between two server updates in batched steps, one for every slot's
            next arrival (exact); ``False``: one step per arrival.
        **kwargs: the base's (``local_iters`` is ``E``, local iterations per participation; ``client_selection`` is
            refused: the clock draws the next client).
    """

    averages_uploaded_models = False  # its uploads are buffered and aggregated as they arrive

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
        settings = (concurrency, flush_every, aggregate_every, client_batch_size, aggregation, full_bandwidth)
        keep_settings(self, *settings, batch_arrivals)

    @classmethod
    @override
    def unused_options(cls) -> dict[str, str]:
        return {**super().unused_options(), **UNUSED_OPTIONS}

    @override
    def configure_schedule(self) -> Schedule:
        return async_events(self)

    @override
    def default_system(self) -> WirelessCell:
        return default_system()

    @override
    def one_process_only(self) -> str | None:
        """The asynchronous clock and its slots live in one process."""
        return type(self).__name__

    @override
    def start_round(self, step) -> None:
        start_round(self, step)

    def upload(self, step: UploadStep) -> None:
        """A client's upload (eq. 9, :func:`upload`)."""
        upload(self, step)

    @override
    def aggregate(self, step: UploadStep) -> None:
        aggregate(self, step)
