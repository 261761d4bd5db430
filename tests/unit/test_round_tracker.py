"""The round's bookkeeping (``runtime/round_tracker.py``) against counts made by hand: events in order, the ledger's
round, per-slot clients, rows and local iterations, and the :class:`RoundEnd` the federation stamps."""

from __future__ import annotations

import dataclasses

import torch
from _helpers import make_step

from lightning_sfl.loop.warmup import WarmupStep
from lightning_sfl.runtime.round_tracker import RoundTracker


class _Ledger:
    def __init__(self):
        self.started = []

    def start(self, num_slots):
        self.started.append(num_slots)


class _Federation:
    """Records what the tracker tells a federation; stamps the end time as a real one does."""

    def __init__(self):
        self.ledger, self.events = _Ledger(), []

    def emit(self, hook, arg):
        self.events.append((hook, arg))

    def end_round(self, event):
        return dataclasses.replace(event, time=7.5, seconds=2.5)


def test_a_round_counts_each_slots_client_rows_and_iterations_and_ends_with_the_stamped_event():
    federation = _Federation()
    first = make_step([4, 9], [3, 0], slots=torch.tensor([0, 2]))
    second = dataclasses.replace(make_step([9, 1], [2, 5], slots=torch.tensor([2, 1])), index=1, round_end=True)
    server = dataclasses.replace(make_step([], []), rows=torch.arange(4))  # rows the server holds, no clients
    tracker = RoundTracker.start(federation, first, num_slots=3)
    assert federation.events == [("on_round_start", first)] and federation.ledger.started == [3]
    for step in (first, server, second):
        tracker.count(step)
    event = tracker.end(second, metrics={"supervised_loss": 0.25})
    # by hand: slot 0 holds client 4 (3 rows, 1 iteration), slot 2 client 9 (0 + 2 rows, 1 iteration: the step with
    # no rows for it does not count), slot 1 client 1 (5 rows, 1 iteration)
    assert event.clients.tolist() == [4, 1, 9] and event.samples.tolist() == [3, 5, 2]
    assert event.iterations.tolist() == [1, 1, 1]
    assert (event.round, event.time, event.seconds, event.server_rows) == (0, 7.5, 2.5, 4)
    assert event.metrics == {"supervised_loss": 0.25} and event.ledger is federation.ledger
    assert federation.events[-1] == ("on_round_end", event) and len(federation.events) == 2


def test_steps_that_do_not_train_the_client_halves_are_not_counted():
    federation = _Federation()
    first = make_step([0], [4])
    tracker = RoundTracker.start(federation, first, num_slots=1)
    warmup = WarmupStep(**{f.name: getattr(first, f.name) for f in dataclasses.fields(first)})
    tracker.count(warmup)
    assert tracker.samples.tolist() == [0] and tracker.clients.tolist() == [-1]
