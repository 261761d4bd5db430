"""``AsyncEvents``: the asynchronous schedule of GAS (Alg. 1), FedBuff and CA²FL, as typed steps for the loop.

The events come from :class:`~lightning_sfl.loop.async_clock.AsyncClock` in simulated-time order; this schedule
gives them rows and groups them into steps:

* ``"arrivals"`` (:class:`ArrivalStep`): activation arrivals of *distinct* clients (and slots) with no server
  update between them, processed as one batched step. The server weights ``w_s`` are the same for every arrival
  between two flushes, and each slot's half moves only through its own events, so the arrivals between two flushes
  run in waves (:func:`arrival_waves`): one step for every slot's next arrival, each slot's events in their order,
  the flushing arrival in the last step (:attr:`ArrivalStep.flush`). The gradients are those of processing the
  arrivals one at a time, in time order; only float sums over the activation buffer change their order.
* ``"upload"`` (:class:`UploadStep`): one client's model arrives (into the model buffer; ``aggregate``: the
  buffer is full and the global half is replaced, eq. 10); ``next_client`` then takes the slot with the global
  model as it is after this upload. For plain FL methods (FedBuff, CA²FL: no activation arrivals) the step also
  carries the client's ``E`` local minibatches (``sizes = [E·b_k]`` rows), trained in its slot before the upload.

One round (Lightning epoch, the x-axis) is one global iteration ``t``: it ends with the upload that aggregates.
Client ``k``'s ``p``-th participation draws its ``E`` minibatches of ``b_k = min(b, |D_k|)`` rows from a generator
seeded by ``(seed, k, p)``; with the clock's state in ``state_dict()``, a resumed run plans the same steps.

>>> import torch
>>> from lightning_sfl.system.timing import ClientTimes
>>> stats = ClientStats(sizes=torch.tensor([4, 4]), label_counts=torch.tensor([[4, 0], [0, 4]]),
...     label_distribution=torch.tensor([[1.0, 0.0], [0.0, 1.0]]), shards=[torch.arange(0, 4), torch.arange(4, 8)],
...     clients_per_round=2, batch_size=2, seed=0)
>>> times = ClientTimes.split(forward=[1.0, 1.0], backward=[0.0, 0.0], activation_upload=[1.0, 1.5],
...     model_upload=[1.0, 1.0])
>>> schedule = AsyncEvents(concurrency=2, local_iters=2, flush_every=2, aggregate_every=1, times=times)
>>> [(s.kind, s.clients.tolist(), s.time, s.round_end) for s in schedule.plan_round(0, stats)]
[('arrivals', [0, 1], 2.5, False), ('arrivals', [0], 4.0, False), ('upload', [0], 5.0, True)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from typing_extensions import override

from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.async_clock import Arrival, AsyncClock, Upload
from lightning_sfl.loop.sampling import minibatch_indices, round_generator
from lightning_sfl.loop.schedule import Schedule
from lightning_sfl.loop.step import ClientStats, Step
from lightning_sfl.system.timing import ClientTimes, SystemModel

__all__ = ["ArrivalStep", "AsyncEvents", "UploadStep", "arrival_waves"]

_ROWS_STREAM = 9  # generator stream of the participations' minibatches (AsyncClock uses 7 and 8)


@dataclass
class ArrivalStep(Step):
    """Activation arrivals of distinct clients (``clients`` ``[S]``, in arrival order, each ``b_k`` rows; ``time``:
    the last arrival's).

    Attributes:
        flush: the last arrival fills the activation buffer (``Q_s`` arrivals): the server updates after it.
        progress: ``[S]`` GAS's progress ``n = t·E + e`` of each arrival (the weight ``s(n)`` of eqs. 11-12).
        iterations: ``[S]`` local iteration ``e`` (1-based) of each arrival.
        times: ``[S]`` arrival time (s) of each arrival.
    """

    flush: bool = False
    progress: torch.Tensor | None = None
    iterations: torch.Tensor | None = None
    times: torch.Tensor | None = None


@dataclass
class UploadStep(Step):
    """Client ``clients[0]``'s model arrives at ``time`` from slot ``slots[0]``.

    Attributes:
        aggregate: the model buffer is full (``Q_c`` uploads): the global half is replaced (eq. 10).
        version: the global iteration ``t`` the client started from (its staleness is ``round − version``).
        next_client: the client that takes the slot next, from the global model after this upload.
        local_iters: ``E``; for plain FL clocks ``rows`` hold ``E`` minibatches of ``sizes[0] / E`` rows, in order.
    """

    aggregate: bool = False
    version: int = 0
    next_client: int = 0
    local_iters: int = 0


def arrival_waves(window: list[Arrival | Upload], flush_alone: bool = False) -> list[list[Arrival] | Upload]:
    """The events between two server updates (``window``, in time order: up to a flush or the round's aggregation)
    as batched groups of arrivals and single uploads, each slot's events in its own order.

    Every arrival of the window sees the same server weights, and a slot's events depend only on that slot's earlier
    ones (its client's half moves through its own arrivals; an upload hands the slot to the next client), so the
    window is run in *waves*: the uploads at the head of the slots, then one group of every slot's next arrival (its
    clients distinct); an event waits while its client has an earlier one pending in another slot (a client that
    finishes may be drawn into another slot), so every client's events also keep their order. The event that ends
    the window comes last: the flushing arrival joins the last group when its slot and client allow (the server
    updates after it; ``flush_alone``: always a group of its own, for a server that updates before it answers that
    arrival), the aggregating upload follows everything.

    >>> a = lambda slot, client, time, flush=False: Arrival(slot, client, time, 1, 0, 1, flush)  # noqa: E731
    >>> waves = arrival_waves([a(0, 5, 1.0), a(0, 5, 2.0), a(1, 6, 2.5), a(0, 5, 3.0), a(2, 7, 4.0, flush=True)])
    >>> [[(e.slot, e.time) for e in group] for group in waves]
    [[(0, 1.0), (1, 2.5)], [(0, 2.0)], [(0, 3.0), (2, 4.0)]]
    """
    end = window[-1] if window else None
    held = end if isinstance(end, Upload) and end.aggregate or isinstance(end, Arrival) and end.flush else None
    chains: dict[int, list[Arrival | Upload]] = {}  # slot -> its events, in time order
    for event in window[:-1] if held is not None else window:
        chains.setdefault(event.slot, []).append(event)
    out: list[list[Arrival] | Upload] = []
    emitted: dict[int, int] = {}  # slot -> index in out of its last event so far
    by_client: dict[int, int] = {}  # client -> the same (a client that finishes may be drawn into another slot)
    while chains:
        first: dict[int, float] = {}  # client -> time of its earliest pending event: a client's events in time order
        for chain in chains.values():
            for event in chain:
                first[event.client] = min(first.get(event.client, event.time), event.time)
        heads = sorted((chain[0] for chain in chains.values()), key=lambda e: (e.time, e.slot))
        heads = [e for e in heads if e.time == first[e.client]]  # never empty: the earliest pending event is here
        taken = [e for e in heads if isinstance(e, Upload)]
        if taken:
            for upload in taken:
                out.append(upload)
                emitted[upload.slot] = by_client[upload.client] = len(out) - 1
        else:
            clients: set[int] = set()
            for arrival in heads:
                if arrival.client not in clients:
                    taken.append(arrival)
                    clients.add(arrival.client)
            out.append(taken)
            for arrival in taken:
                emitted[arrival.slot] = by_client[arrival.client] = len(out) - 1
        for event in taken:
            chain = chains[event.slot]
            chain.pop(0)
            if not chain:
                del chains[event.slot]
    if isinstance(held, Arrival):
        last = max((i for i, item in enumerate(out) if isinstance(item, list)), default=-1)
        before = emitted.get(held.slot, -1) < last and by_client.get(held.client, -1) < last
        if not flush_alone and last >= 0 and before and all(e.client != held.client for e in out[last]):
            out[last].append(held)
        else:
            out.append([held])
    elif held is not None:
        out.append(held)
    return out


class AsyncEvents(Schedule):
    """Asynchronous clients on a simulated clock (see the module docstring).

    Args:
        concurrency: ``C``, clients in flight (the method's bank has ``C`` persistent slots).
        local_iters: ``E``, local iterations per participation.
        flush_every: ``Q_s``, activation arrivals per server update.
        aggregate_every: ``Q_c``, uploads per aggregation (global iteration).
        batch_size: ``b``, rows per client minibatch (GAS's ``B``); ``None``: the data module's ``batch_size``.
        times: per-client seconds (:class:`~lightning_sfl.system.timing.ClientTimes`); ``None``: from the federation's
            system model (:meth:`bind_system`; they depend on the model's FLOPs and the channel).
        batch_arrivals: group arrivals into batched steps (``False``: one step per arrival, the reference the
            batched path must equal).
        full_bandwidth: times from the system model give every client the whole bandwidth (the GAS code) instead of
            ``W / C``.
        flush_alone: the arrival that fills the activation buffer is a step of its own (the server updates before
            its gradient is taken: GAS's Alg. 1), not batched with the arrivals before it.
    """

    kinds: ClassVar[tuple[str, ...]] = ("arrivals", "upload")
    persistent_slots = True
    partial_steps = True

    def __init__(
        self,
        concurrency: int,
        local_iters: int,
        flush_every: int,
        aggregate_every: int,
        batch_size: int | None = None,
        times: ClientTimes | None = None,
        batch_arrivals: bool = True,
        full_bandwidth: bool = False,
        flush_alone: bool = False,
    ) -> None:
        for name, value in (
            ("concurrency", concurrency),
            ("local_iters", local_iters),
            ("flush_every", flush_every),
            ("aggregate_every", aggregate_every),
            ("batch_size", 1 if batch_size is None else batch_size),
        ):
            if int(value) != value or value < 1:
                raise ConfigError(f"{name}={value!r} must be a whole number >= 1")
        self.concurrency, self.local_iters = int(concurrency), int(local_iters)
        self.flush_every, self.aggregate_every = int(flush_every), int(aggregate_every)
        self.batch_size = None if batch_size is None else int(batch_size)
        self.times, self.batch_arrivals, self.full_bandwidth = times, bool(batch_arrivals), bool(full_bandwidth)
        self.flush_alone = bool(flush_alone)
        self.clock: AsyncClock | None = None
        self._pending_state: dict | None = None

    @override
    def bind_system(self, system: SystemModel, stats: ClientStats) -> None:
        """Every client's seconds per event from the system model (``b_k`` rows per minibatch, ``C`` in flight; with
        ``full_bandwidth`` each client gets the whole bandwidth), unless ``times`` were given."""
        if self.times is None:
            rows = torch.tensor([self.rows_per_batch(k, stats) for k in range(stats.num_clients)])
            self.times = system.client_times(rows, self.concurrency, self.full_bandwidth)

    @override
    def num_slots(self, stats: ClientStats) -> int:
        if self.concurrency > stats.num_clients:
            raise ConfigError(f"concurrency={self.concurrency} must be <= the number of clients ({stats.num_clients})")
        return self.concurrency

    def _clock(self, stats: ClientStats) -> AsyncClock:
        if self.clock is None:
            if self.times is None:
                raise RuntimeError("AsyncEvents has no client times: give times= or a system model (bind_system)")
            if self.times.num_clients != stats.num_clients:
                raise ConfigError(
                    f"times are given for {self.times.num_clients} clients, the data has {stats.num_clients}"
                )
            self.clock = AsyncClock(
                self.times, self.concurrency, self.local_iters, self.flush_every, self.aggregate_every, stats.seed
            )
            if self._pending_state is not None:
                self.clock.load_state_dict(self._pending_state)
                self._pending_state = None
        return self.clock

    def rows_per_batch(self, client: int, stats: ClientStats) -> int:
        """``b_k = min(b, |D_k|)``."""
        return min(self.batch_size or stats.batch_size, int(stats.sizes[client]))

    def participation_rows(self, client: int, participation: int, stats: ClientStats) -> torch.Tensor:
        """The ``E`` minibatches of client ``client``'s ``participation``-th participation, ``[E, b_k]``."""
        g = round_generator(stats.seed, client * 1_000_003 + participation, stream=_ROWS_STREAM)
        return minibatch_indices(stats.shards[client], self.rows_per_batch(client, stats), self.local_iters, g)

    @override
    def plan_round(self, round_idx: int, stats: ClientStats) -> list[Step]:
        clock = self._clock(stats)
        events: list[Arrival | Upload] = []
        while not (events and isinstance(events[-1], Upload) and events[-1].aggregate):
            events.append(clock.next_event())
        if self.batch_arrivals and clock.times.is_split:  # plain FL clocks have no arrivals: their uploads in order
            windows, start = [], 0  # the events up to each flush, and from the last flush to the round's end
            for i, event in enumerate(events):
                if isinstance(event, Arrival) and event.flush:
                    windows.append(events[start : i + 1])
                    start = i + 1
            windows.append(events[start:])
            items = [item for window in windows for item in arrival_waves(window, self.flush_alone)]
        else:
            items = [[e] if isinstance(e, Arrival) else e for e in events]
        split = clock.times.is_split
        minibatches: dict[tuple[int, int], torch.Tensor] = {}  # a participation's E minibatches, drawn once a round
        return [
            self._upload_step(round_idx, i, item, stats, split)
            if isinstance(item, Upload)
            else self._arrival_step(round_idx, i, item, stats, minibatches)
            for i, item in enumerate(items)
        ]

    def _arrival_step(
        self,
        round_idx: int,
        index: int,
        group: list[Arrival],
        stats: ClientStats,
        minibatches: dict[tuple[int, int], torch.Tensor],
    ) -> ArrivalStep:
        rows = []
        for a in group:
            key = (a.client, a.participation)
            if key not in minibatches:
                minibatches[key] = self.participation_rows(a.client, a.participation, stats)
            rows.append(minibatches[key][a.iteration - 1])
        long = lambda values: torch.tensor(values, dtype=torch.long)  # noqa: E731
        return ArrivalStep(
            "arrivals",
            round_idx,
            index,
            False,
            clients=long([a.client for a in group]),
            sizes=long([len(r) for r in rows]),
            rows=torch.cat(rows),
            slots=long([a.slot for a in group]),
            time=group[-1].time,
            flush=group[-1].flush,
            progress=long([a.progress for a in group]),
            iterations=long([a.iteration for a in group]),
            times=torch.tensor([a.time for a in group], dtype=torch.float64),
        )

    def _upload_step(self, round_idx: int, index: int, event: Upload, stats: ClientStats, split: bool) -> UploadStep:
        if split:  # the client trained through its arrivals: the upload carries no rows
            rows, b = torch.zeros(0, dtype=torch.long), 0
        else:
            rows = self.participation_rows(event.client, event.participation, stats).reshape(-1)
            b = len(rows)
        return UploadStep(
            "upload",
            round_idx,
            index,
            event.aggregate,
            clients=torch.tensor([event.client]),
            sizes=torch.tensor([b]),
            rows=rows,
            slots=torch.tensor([event.slot]),
            time=event.time,
            aggregate=event.aggregate,
            version=event.version,
            next_client=event.next_client,
            local_iters=self.local_iters,
        )

    @override
    def state_dict(self) -> dict:
        if self.clock is not None:
            return {"clock": self.clock.state_dict()}
        return {} if self._pending_state is None else {"clock": self._pending_state}

    @override
    def load_state_dict(self, state: dict) -> None:
        if "clock" not in state:
            return
        if self.clock is None:
            self._pending_state = state["clock"]
        else:
            self.clock.load_state_dict(state["clock"])
