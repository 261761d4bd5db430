"""The asynchronous schedule (GAS, FedBuff, CA²FL): events of the clock grouped into batched steps with rows,
against the clock's own event sequence and sequences worked out by hand; resumable from its state."""

from __future__ import annotations

import pytest
import torch

from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.async_clock import Arrival, AsyncClock
from lightning_sfl.loop.async_events import ArrivalStep, AsyncEvents, UploadStep
from lightning_sfl.loop.step import ClientStats
from lightning_sfl.system.timing import ClientTimes


def stats(num_clients: int = 6, per_client: int = 10, batch_size: int = 4, seed: int = 3) -> ClientStats:
    sizes = torch.tensor([per_client + k for k in range(num_clients)])
    ends = sizes.cumsum(0)
    shards = [torch.arange(int(e - n), int(e)) for n, e in zip(sizes, ends)]
    counts = torch.stack([torch.tensor([int(n) // 2, int(n) - int(n) // 2]) for n in sizes])
    return ClientStats(sizes, counts, counts / counts.sum(1, keepdim=True), shards, 2, batch_size, seed)


def random_times(num_clients: int, split: bool = True, seed: int = 0) -> ClientTimes:
    g = torch.Generator().manual_seed(seed)
    draw = lambda: torch.rand(num_clients, generator=g, dtype=torch.float64) + 0.1  # noqa: E731
    return ClientTimes.split(draw(), draw(), draw(), draw()) if split else ClientTimes.local(draw(), draw())


KW = {"concurrency": 3, "local_iters": 4, "flush_every": 3, "aggregate_every": 2}


def _flatten(steps) -> list[tuple]:
    """The steps as events: (kind, client, slot, time, flush / aggregate), in the order the steps run them."""
    replay = []
    for s in steps:
        if isinstance(s, ArrivalStep):
            assert s.kind == "arrivals" and not s.round_end
            n = len(s.clients)
            flags = [False] * (n - 1) + [s.flush]
            replay += [
                ("a", c, sl, t, f) for c, sl, t, f in zip(s.clients.tolist(), s.slots_list(), s.times.tolist(), flags)
            ]
        else:
            assert isinstance(s, UploadStep) and s.kind == "upload" and s.round_end == s.aggregate
            replay.append(("u", int(s.clients[0]), s.slots_list()[0], s.time, s.aggregate))
    return replay


def _greedy_groups(events: list[tuple]) -> int:
    """Arrival groups of the earlier rule (time order kept: a group ends at a flush, an upload or a repeated client)."""
    groups, group = 0, set()
    for kind, client, _, _, flag in events:
        if kind == "u" or client in group:
            groups, group = groups + bool(group), set()
        if kind == "a":
            group.add(client)
            if flag:
                groups, group = groups + 1, set()
    return groups + bool(group)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_steps_run_the_clock_events_in_waves_between_server_updates(seed):
    """The batched steps run every event of the clock once; each slot's events in its own order; between two flushes
    exactly the clock's arrivals (the server weights they see); groups of distinct clients and slots whose flush, if
    any, is the last; rounds end with their aggregation; fewer groups than when groups keep time order."""
    st, times = stats(), random_times(6, seed=seed)
    schedule = AsyncEvents(**KW, times=times)
    steps = [s for r in range(6) for s in schedule.plan_round(r, st)]
    clock = AsyncClock(times, KW["concurrency"], KW["local_iters"], KW["flush_every"], KW["aggregate_every"], st.seed)
    replay = _flatten(steps)
    want = []
    for _ in range(len(replay)):
        e = clock.next_event()
        kind = "a" if isinstance(e, Arrival) else "u"
        want.append((kind, e.client, e.slot, e.time, e.flush if isinstance(e, Arrival) else e.aggregate))
    assert sorted(replay) == sorted(want)
    for slot in range(KW["concurrency"]):
        assert [e for e in replay if e[2] == slot] == [e for e in want if e[2] == slot]

    def windows(events):  # the arrivals between flushes, as sets
        out, current = [], set()
        for e in events:
            if e[0] == "a":
                current.add(e)
                if e[4]:
                    out, current = out + [current], set()
        return out + [current]

    assert windows(replay) == windows(want)
    for s in steps:
        if isinstance(s, ArrivalStep):
            assert len(set(s.clients.tolist())) == len(s.clients) == len(set(s.slots_list()))
            assert s.time == s.times.max().item() == s.times[-1].item()
    for r in range(6):
        rs = [s for s in steps if s.round == r]
        assert [s.index for s in rs] == list(range(len(rs)))
        assert rs[-1].round_end and sum(s.round_end for s in rs) == 1
    arrivals = sum(len(s.clients) for s in steps if isinstance(s, ArrivalStep))
    flushes = sum(s.flush for s in steps if isinstance(s, ArrivalStep))
    assert flushes == arrivals // KW["flush_every"]
    groups = sum(isinstance(s, ArrivalStep) for s in steps)
    assert groups < _greedy_groups(want)


def test_unbatched_schedule_plans_one_step_per_arrival_with_the_same_rows():
    st, times = stats(), random_times(6)
    batched_schedule, single = AsyncEvents(**KW, times=times), AsyncEvents(**KW, times=times, batch_arrivals=False)
    batched = [s for r in range(3) for s in batched_schedule.plan_round(r, st)]
    one_by_one = [s for r in range(3) for s in single.plan_round(r, st)]
    assert all(len(s.clients) == 1 for s in one_by_one)
    assert len(one_by_one) > len(batched)
    flat = lambda steps: [  # noqa: E731
        (s.kind, c, b.tolist()) for s in steps for c, b in zip(s.clients.tolist(), s.rows.split(s.sizes.tolist()))
    ]
    assert sorted(flat(one_by_one)) == sorted(flat(batched))  # the same rows, each client's in its own order:
    for client in range(6):
        assert [e for e in flat(one_by_one) if e[1] == client] == [e for e in flat(batched) if e[1] == client]


def test_rows_are_each_participation_s_minibatches_in_order():
    st = stats(per_client=16, batch_size=4)
    schedule = AsyncEvents(**KW, times=random_times(6))
    steps = [s for r in range(4) for s in schedule.plan_round(r, st)]
    seen: dict[tuple[int, int], list[list[int]]] = {}  # (client, participation) -> its minibatches in order
    participation = {c: 0 for c in range(6)}
    for s in steps:
        if isinstance(s, UploadStep):
            assert s.rows.numel() == 0 and s.sizes.tolist() == [0]  # split clients train through their arrivals
            participation[int(s.clients[0])] += 1
            continue
        for c, block, e in zip(s.clients.tolist(), s.rows.split(s.sizes.tolist()), s.iterations.tolist()):
            assert len(block) == 4 and set(block.tolist()) <= set(st.shards[c].tolist())  # b rows of its own shard
            batches = seen.setdefault((c, participation[c]), [])
            assert e == len(batches) + 1  # iterations 1..E in order
            batches.append(block.tolist())
    for (c, p), batches in seen.items():
        want = schedule.participation_rows(c, p, st)[: len(batches)].tolist()
        assert batches == want
        full = [r for b in batches for r in b]
        assert len(set(full)) == len(full)  # E·b = 16 <= |D_k|: without replacement within a participation
    assert len(seen) > 6  # clients took part more than once


def test_plain_fl_uploads_carry_the_local_minibatches():
    st = stats(batch_size=4)
    schedule = AsyncEvents(**KW, times=random_times(6, split=False))
    steps = schedule.plan_round(0, st)
    assert all(isinstance(s, UploadStep) for s in steps) and steps[-1].aggregate
    for s in steps:
        c = int(s.clients[0])
        assert s.sizes.tolist() == [16] and s.local_iters == 4 and len(s.rows) == 16  # E = 4 minibatches of b = 4
        assert s.rows.tolist() == schedule.participation_rows(c, 0, st).reshape(-1).tolist() or s.version > 0


def test_state_resumes_the_same_steps_and_batch_size_caps_at_the_shard():
    st = stats(per_client=3, batch_size=5)
    times = random_times(6)
    first = AsyncEvents(**KW, times=times)
    for r in range(3):
        first.plan_round(r, st)
    saved = first.state_dict()
    tail = [first.plan_round(r, st) for r in range(3, 6)]
    resumed = AsyncEvents(**KW)
    resumed.load_state_dict(saved)  # before the clock exists (as when a checkpoint is loaded before fit starts)
    resumed.times = times
    again = [resumed.plan_round(r, st) for r in range(3, 6)]
    flat = lambda rounds: [  # noqa: E731
        (s.kind, s.clients.tolist(), s.rows.tolist(), s.time, s.slots_list()) for r in rounds for s in r
    ]
    assert flat(again) == flat(tail)
    sizes = {int(c): int(b) for s in flat_steps(tail) for c, b in zip(s.clients, s.sizes) if s.kind == "arrivals"}
    assert sizes and all(b == min(5, int(st.sizes[c])) for c, b in sizes.items())  # b_k = min(b, |D_k|)


def flat_steps(rounds):
    return [s for r in rounds for s in r]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"flush_every": 0}, "flush_every=0 must be a whole number >= 1"),
        ({"aggregate_every": 0}, "aggregate_every=0 must be a whole number >= 1"),
        ({"local_iters": 0}, "local_iters=0 must be a whole number >= 1"),
        ({"concurrency": 1.5}, "concurrency=1.5 must be a whole number >= 1"),
        ({"batch_size": 0}, "batch_size=0 must be a whole number >= 1"),
    ],
)
def test_bad_settings_fail_at_construction(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        AsyncEvents(**{**KW, **kwargs})


def test_more_clients_in_flight_than_clients_fails_and_times_must_be_bound():
    with pytest.raises(ConfigError, match="concurrency=7 must be <= the number of clients"):
        AsyncEvents(**{**KW, "concurrency": 7}).num_slots(stats())
    with pytest.raises(RuntimeError, match="give times= or a system model"):
        AsyncEvents(**KW).plan_round(0, stats())
    with pytest.raises(ConfigError, match="times are given for 5 clients"):
        AsyncEvents(**KW, times=random_times(5)).plan_round(0, stats())


def test_waves_keep_every_client_s_events_in_order_across_slots():
    """A client that finishes in one slot can be drawn into another within the window (here k: slot 0 at 0.3, slot 1
    at 0.5): its events still run in time order, and plain FL clocks (uploads only) keep the clock's order."""
    from lightning_sfl.loop.async_clock import Upload
    from lightning_sfl.loop.async_events import arrival_waves

    up = lambda slot, client, time, nxt: Upload(slot, client, time, 0, 0, False, nxt)  # noqa: E731
    window = [up(0, 1, 0.1, 2), up(0, 2, 0.2, 5), up(0, 5, 0.3, 6), up(1, 3, 0.4, 5), up(1, 5, 0.5, 7)]
    items = arrival_waves(window)
    assert [(u.client, u.time) for u in items if u.client == 5] == [(5, 0.3), (5, 0.5)]
    assert sorted(items, key=lambda u: u.time) == window
    schedule = AsyncEvents(**KW, times=random_times(6, split=False))
    st = stats()
    steps = [s for r in range(4) for s in schedule.plan_round(r, st)]
    times = [s.time for s in steps]
    assert times == sorted(times)  # FL clocks: one upload after another, as the clock has them


@pytest.mark.parametrize("seed", [0, 1])
def test_with_flush_alone_the_flushing_arrival_is_a_step_of_its_own_and_nothing_else_moves(seed):
    """GAS's Alg. 1 order (the server updates before the flushing arrival's gradient): every flushing arrival is
    alone in its step, the same events run in the same per-slot order, and at least one flush that the batched rule
    would group with other arrivals is taken out of its group."""
    st, times = stats(), random_times(6, seed=seed)
    grouped = [s for r in range(6) for s in AsyncEvents(**KW, times=times).plan_round(r, st)]
    alone = [s for r in range(6) for s in AsyncEvents(**KW, times=times, flush_alone=True).plan_round(r, st)]
    for s in alone:
        if isinstance(s, ArrivalStep) and s.flush:
            assert len(s.clients) == 1
    assert sorted(_flatten(alone)) == sorted(_flatten(grouped))
    for slot in range(KW["concurrency"]):
        assert [e for e in _flatten(alone) if e[2] == slot] == [e for e in _flatten(grouped) if e[2] == slot]
    assert any(isinstance(s, ArrivalStep) and s.flush and len(s.clients) > 1 for s in grouped)
