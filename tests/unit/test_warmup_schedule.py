"""``WarmupRounds``: the local iterations are ``SyncRounds``' own, each newcomer's shard is covered once per warm-up
epoch in batches, clients warm up once, and a schedule restored from its state plans what the uninterrupted one
plans."""

from __future__ import annotations

import pytest
import torch
from _helpers import small_digits

from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import SyncRounds, WarmupRounds, WarmupStep
from lightning_sfl.loop.selection import UniformSelection


def _same(a, b) -> bool:
    return (a.kind, a.round, a.round_end) == (b.kind, b.round, b.round_end) and all(
        torch.equal(getattr(a, f), getattr(b, f)) for f in ("clients", "sizes", "rows")
    )


def test_local_steps_are_sync_rounds_and_each_new_shard_is_covered_once_per_epoch():
    stats = small_digits().client_stats
    warm = WarmupRounds(local_iters=3, selection=UniformSelection(), epochs=2, batch_size=5)
    sync = SyncRounds(local_iters=3, selection=UniformSelection())
    seen: set[int] = set()
    for round_idx in range(4):
        steps, plain = warm.plan_round(round_idx, stats), sync.plan_round(round_idx, stats)
        warmups = [s for s in steps if s.kind == "warmup"]
        local = steps[len(warmups) :]
        assert [s.index for s in steps] == list(range(len(steps)))  # positions in the round, warm-up first
        assert all(isinstance(s, WarmupStep) and not s.round_end for s in warmups)
        assert len(local) == 3 and all(_same(a, b) for a, b in zip(local, plain))  # SyncRounds' steps, unchanged
        clients = plain[0].clients.tolist()
        new = [k for k in clients if k not in seen]
        assert bool(warmups) == bool(new)
        for pos, k in enumerate(clients):
            blocks = [s.rows[int(s.sizes[:pos].sum()) : int(s.sizes[: pos + 1].sum())] for s in warmups]
            assert all(torch.equal(s.clients, plain[0].clients) for s in warmups)
            assert max((len(b) for b in blocks), default=0) <= 5
            rows = torch.cat(blocks) if blocks else torch.zeros(0, dtype=torch.long)
            if k in new:  # epoch after epoch, a permutation of the shard
                shard = stats.shards[k].sort().values
                per_epoch = rows.view(2, -1)
                assert all(torch.equal(e.sort().values, shard) for e in per_epoch)
            else:
                assert len(rows) == 0
        seen.update(clients)


def test_clients_warm_up_once_and_a_restored_schedule_plans_the_same_rounds():
    stats = small_digits().client_stats
    first = WarmupRounds(local_iters=2, selection=UniformSelection(), epochs=1, batch_size=8)
    for round_idx in range(3):
        first.plan_round(round_idx, stats)
    state = first.state_dict()
    assert state["warm"].dtype == torch.bool and int(state["warm"].sum()) >= 4
    restored = WarmupRounds(local_iters=2, selection=UniformSelection(), epochs=1, batch_size=8)
    restored.load_state_dict(state)
    for round_idx in range(3, 8):
        a, b = first.plan_round(round_idx, stats), restored.plan_round(round_idx, stats)
        assert len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    assert bool(first.warm.all())  # 8 clients, 4 a round, 8 rounds: everyone has come


@pytest.mark.parametrize("kwargs,message", [({"epochs": 0}, "epochs=0"), ({"batch_size": 1.5}, "batch_size=1.5")])
def test_bad_warmup_settings_are_one_line_errors(kwargs, message):
    with pytest.raises(ConfigError, match=rf"^{message} must be a whole number >= 1$"):
        WarmupRounds(**{"local_iters": 2, "selection": UniformSelection(), "epochs": 1, "batch_size": 4, **kwargs})
