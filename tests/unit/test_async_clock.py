"""The asynchronous event simulator (GAS's clock) against event sequences worked out by hand."""

from __future__ import annotations

import pytest
import torch

from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.async_clock import Arrival, AsyncClock, Upload
from lightning_sfl.system.timing import ClientTimes


def two_clients(**kwargs) -> AsyncClock:
    # K = C = 2: both clients in flight from time 0; client 1 is slower to compute and to upload
    times = ClientTimes.split(
        forward=[1.0, 2.0], backward=[0.5, 1.0], activation_upload=[1.0, 3.0], model_upload=[2, 4]
    )
    return AsyncClock(times, **{"concurrency": 2, "local_iters": 2, "flush_every": 2, "aggregate_every": 2, **kwargs})


def test_two_clients_by_hand():
    clock = two_clients(seed=0)
    assert clock.slot_client.tolist() == [0, 1]
    events = [clock.next_event() for _ in range(7)]
    # client 0: arrives 1+1 = 2; backward .5, forward 1, upload 1 -> 4.5; backward .5 + model 2 -> 7
    # client 1: arrives 2+3 = 5; 5 + 1 + 2 + 3 = 11; 11 + 1 + 4 = 16
    # at 7 client 0's model arrives; K = C: the only free client is client 0 itself, which restarts at 7 -> 9
    want = [
        (Arrival, 0, 2.0, False),
        (Arrival, 0, 4.5, True),  # second activation arrival: flush (Q_s = 2)
        (Arrival, 1, 5.0, False),
        (Upload, 0, 7.0, False),  # first model arrival of Q_c = 2
        (Arrival, 0, 9.0, True),
        (Arrival, 1, 11.0, False),
        (Arrival, 0, 11.5, True),
    ]
    got = [(type(e), e.client, e.time, e.flush if isinstance(e, Arrival) else e.aggregate) for e in events]
    assert got == want
    assert [e.progress for e in events if isinstance(e, Arrival)] == [1, 2, 1, 1, 2, 2]  # t = 0: n = e
    assert events[4].participation == 1 and events[3].next_client == 0
    up = clock.next_event()  # client 0's second model at 11.5 + .5 + 2 = 14 < client 1's at 16: aggregate
    assert (type(up), up.client, up.time, up.aggregate, up.version) == (Upload, 0, 14.0, True, 0)
    nxt = clock.next_event()  # client 0 restarted at 14 with version 1: progress n = 1·E + 1
    assert (nxt.client, nxt.time, nxt.progress) == (0, 16.0, 3)
    assert clock.next_event().time == 16.0 and clock.aggregations == 1  # tie at 16: slot 1 (client 1's upload)


def test_federated_clients_train_locally_then_upload():
    times = ClientTimes.local(iteration=[1.0, 2.0, 3.0], model_upload=[1.0, 1.0, 1.0])
    clock = AsyncClock(times, concurrency=2, local_iters=3, flush_every=1, aggregate_every=1, seed=0)
    events = [clock.next_event() for _ in range(6)]
    assert all(isinstance(e, Upload) and e.aggregate for e in events)
    for e in events:  # the client that finished is replaced by one not in flight, never by itself (K > C)
        assert e.next_client != e.client
    first = events[0]
    assert first.time == 3 * times.forward[first.client] + 1.0


def test_in_flight_clients_are_distinct_and_the_state_resumes_exactly():
    g = torch.Generator().manual_seed(0)
    times = ClientTimes.split(*(torch.rand(10, generator=g, dtype=torch.float64) + 0.1 for _ in range(4)))
    kwargs = {"concurrency": 4, "local_iters": 3, "flush_every": 3, "aggregate_every": 2, "seed": 5}
    clock = AsyncClock(times, **kwargs)
    for _ in range(50):
        clock.next_event()
        assert len(set(clock.slot_client.tolist())) == 4
    saved = clock.state_dict()
    tail = [clock.next_event() for _ in range(100)]
    resumed = AsyncClock(times, **kwargs)
    resumed.load_state_dict(saved)
    assert [resumed.next_event() for _ in range(100)] == tail
    times_seen = [e.time for e in tail]
    assert times_seen == sorted(times_seen)
    arrivals = [e for e in tail if isinstance(e, Arrival)]
    assert len(arrivals) // 3 <= sum(e.flush for e in arrivals) <= len(arrivals) // 3 + 1  # every 3rd arrival
    uploads = [e for e in tail if isinstance(e, Upload)]
    assert len(uploads) // 2 <= sum(e.aggregate for e in uploads) <= len(uploads) // 2 + 1  # every 2nd upload


@pytest.mark.parametrize(
    "kwargs,match",
    [({"concurrency": 3}, "concurrency=3 must be <= the number of clients"), ({"local_iters": 0}, "local_iters=0")],
)
def test_bad_settings_fail_at_construction(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        two_clients(seed=0, **kwargs)
