"""Asynchronous clients on a simulated clock (GAS, Alg. 1; FedBuff, CA²FL): which event happens next, and when.

``C`` clients are in flight at once, each in its own slot with its own clock. A client of a split method (GAS)
runs ``E`` local iterations; iteration ``e`` costs a forward pass of the client half, then the upload of its
activations, which *arrive* at the server at that time; the gradient comes back at once (no downlink or server
time) and the backward pass follows. After the ``E``-th iteration the client uploads its half; when it *arrives*,
a new client, drawn uniformly from the clients not in flight (not the one that just finished), takes over the
slot and that clock. A client of a plain FL method (FedBuff, CA²FL) trains ``E`` iterations of the whole model
locally, then uploads it. The server counts arrivals: every ``Q_s``-th activation arrival *flushes* the activation
buffer (a server update), every ``Q_c``-th model arrival *aggregates* (one global iteration ``t``).

Events come in time order (ties: lower slot first). Everything here depends on the system model only, never on
the training, so a schedule plans the events ahead and the state (:meth:`AsyncClock.state_dict`) resumes them
exactly.

>>> times = ClientTimes.split(forward=[1.0, 2.0], backward=[0.5, 0.5], activation_upload=[1.0, 1.0],
...     model_upload=[3.0, 3.0])
>>> clock = AsyncClock(times, concurrency=1, local_iters=2, flush_every=1, aggregate_every=1, seed=0)
>>> [(type(e).__name__, e.client, e.time) for e in (clock.next_event() for _ in range(3))]
[('Arrival', 1, 3.0), ('Arrival', 1, 6.5), ('Upload', 1, 10.0)]
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from typing_extensions import override

from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.sampling import round_generator
from lightning_sfl.system.timing import ClientTimes

__all__ = ["Arrival", "AsyncClock", "Upload"]


@dataclass(frozen=True)
class Arrival:
    """Client ``client`` (in ``slot``) uploaded the activations of its local iteration ``iteration`` (1-based) of its
    ``participation``-th participation (0-based); they arrive at ``time``. ``progress`` is GAS's ``n = t·E + e``
    (``t``: global iterations done when the client started). ``flush``: this arrival fills the activation buffer."""

    slot: int
    client: int
    time: float
    iteration: int
    participation: int
    progress: int
    flush: bool


@dataclass(frozen=True)
class Upload:
    """Client ``client``'s model (trained ``E`` iterations in ``slot`` from the global model of version ``version``)
    arrives at ``time``; ``aggregate``: it fills the model buffer (global iteration ``t`` ends). ``next_client``
    takes over the slot (and the clock) with the global model as it is after this upload."""

    slot: int
    client: int
    time: float
    participation: int
    version: int
    aggregate: bool
    next_client: int


class AsyncClock:
    """The event simulator (state: one clock per slot, the clients in flight, their progress, the buffers' counts).

    Args:
        times: per-client seconds (:class:`ClientTimes`).
        concurrency: ``C``, clients in flight (``1 <= C <= K``).
        local_iters: ``E``, local iterations per participation.
        flush_every: ``Q_s``, activation arrivals per server update (split methods; ignored for FL).
        aggregate_every: ``Q_c``, model arrivals per aggregation.
        seed: seeds the draws of clients (the ``d``-th draw uses its own generator: resumable).
    """

    def __init__(
        self,
        times: ClientTimes,
        concurrency: int,
        local_iters: int,
        flush_every: int,
        aggregate_every: int,
        seed: int,
    ) -> None:
        k = times.num_clients
        for name, value, low in (
            ("concurrency", concurrency, 1),
            ("local_iters", local_iters, 1),
            ("flush_every", flush_every, 1),
            ("aggregate_every", aggregate_every, 1),
        ):
            if int(value) != value or value < low:
                raise ConfigError(f"{name}={value!r} must be a whole number >= {low}")
        if concurrency > k:
            raise ConfigError(f"concurrency={concurrency} must be <= the number of clients ({k})")
        self.times, self.concurrency, self.local_iters = times, int(concurrency), int(local_iters)
        self.flush_every, self.aggregate_every, self.seed = int(flush_every), int(aggregate_every), seed
        self.draws = 0
        first = torch.randperm(k, generator=round_generator(seed, 0, stream=7))[: self.concurrency]
        # the state as Python numbers (the same float64 arithmetic as tensors, without a tensor op per event);
        # state_dict() gives it as tensors
        self._slot_client: list[int] = first.sort().values.tolist()  # [C] client in each slot (-1: being replaced)
        self._clock: list[float] = [0.0] * self.concurrency  # [C] time of each slot's next event
        self._iteration: list[int] = [0] * self.concurrency  # [C] local iterations done
        self._version: list[int] = [0] * self.concurrency  # [C] global iteration at the client's start
        self._participations: list[int] = [0] * k  # [K] participations started
        self._times = [t.tolist() if t is not None else None for t in (times.forward, times.backward)]
        self._uploads = (times.activation_upload.tolist() if times.is_split else None, times.model_upload.tolist())
        self.activations_buffered = 0
        self.models_buffered = 0
        self.aggregations = 0
        for slot in range(self.concurrency):
            self._start(slot, self._slot_client[slot], 0.0)

    def _start(self, slot: int, client: int, time: float) -> None:
        """``client`` takes ``slot`` at ``time``: its first event is its first arrival (split) or its upload (FL)."""
        (forward, _), (activation_upload, model_upload) = self._times, self._uploads
        self._slot_client[slot] = client
        self._iteration[slot] = 0
        self._version[slot] = self.aggregations
        self._participations[client] += 1
        if activation_upload is not None:
            self._clock[slot] = time + forward[client] + activation_upload[client]
        else:
            self._iteration[slot] = self.local_iters
            self._clock[slot] = time + self.local_iters * forward[client] + model_upload[client]

    def _draw(self, finished: int) -> int:
        """A client not in flight, uniformly, not ``finished`` (unless it is the only one left)."""
        busy = {c for c in self._slot_client if c >= 0}
        busy.add(finished)
        candidates = [c for c in range(self.times.num_clients) if c not in busy]
        g = round_generator(self.seed, self.draws, stream=8)
        self.draws += 1
        if not candidates:
            return finished
        return candidates[int(torch.randint(len(candidates), (1,), generator=g))]

    def next_event(self) -> Arrival | Upload:
        """The next event in time order; moves the state past it."""
        clock = self._clock
        slot = min(range(self.concurrency), key=clock.__getitem__)  # the first minimum: ties go to the lower slot
        client, time = self._slot_client[slot], clock[slot]
        (forward, backward), (activation_upload, model_upload) = self._times, self._uploads
        participation = self._participations[client] - 1
        if self._iteration[slot] < self.local_iters:  # an activation arrival (split methods only)
            self._iteration[slot] += 1
            e = self._iteration[slot]
            self.activations_buffered += 1
            flush = self.activations_buffered == self.flush_every
            if flush:
                self.activations_buffered = 0
            progress = self._version[slot] * self.local_iters + e
            if e < self.local_iters:
                clock[slot] = time + backward[client] + forward[client] + activation_upload[client]
            else:
                clock[slot] = time + backward[client] + model_upload[client]
            return Arrival(slot, client, time, e, participation, progress, flush)
        version = self._version[slot]
        self.models_buffered += 1
        aggregate = self.models_buffered == self.aggregate_every
        if aggregate:
            self.models_buffered = 0
            self.aggregations += 1
        self._slot_client[slot] = -1  # not in flight while the next client is drawn
        nxt = self._draw(client)
        self._start(slot, nxt, time)
        return Upload(slot, client, time, participation, version, aggregate, nxt)

    #: The state's lists and their dtypes as tensors (the properties of the same names, ``state_dict()``).
    _STATE = {
        "slot_client": torch.long,
        "clock": torch.float64,
        "iteration": torch.long,
        "version": torch.long,
        "participations": torch.long,
    }
    _COUNTS = ("draws", "activations_buffered", "models_buffered", "aggregations")

    slot_client = property(lambda self: self._tensor("slot_client"), doc="``[C]`` the client in each slot.")
    clock = property(lambda self: self._tensor("clock"), doc="``[C]`` the time of each slot's next event.")
    iteration = property(lambda self: self._tensor("iteration"), doc="``[C]`` local iterations done in each slot.")
    version = property(lambda self: self._tensor("version"), doc="``[C]`` global iteration at each client's start.")
    participations = property(lambda self: self._tensor("participations"), doc="``[K]`` participations started.")

    def _tensor(self, name: str) -> torch.Tensor:
        return torch.tensor(getattr(self, f"_{name}"), dtype=self._STATE[name])

    @override
    def state_dict(self) -> dict:
        return {
            **{name: self._tensor(name) for name in self._STATE},
            **{name: getattr(self, name) for name in self._COUNTS},
        }

    @override
    def load_state_dict(self, state: dict) -> None:
        for name, dtype in self._STATE.items():
            values, mine = torch.as_tensor(state[name]).to(dtype).tolist(), getattr(self, f"_{name}")
            if len(values) != len(mine):
                raise ValueError(f"clock state {name!r} has {len(values)} entries, expected {len(mine)}")
            setattr(self, f"_{name}", values)
        for name in self._COUNTS:
            setattr(self, name, int(state[name]))
