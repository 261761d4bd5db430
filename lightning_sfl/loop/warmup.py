"""``WarmupRounds``: synchronous rounds in which each client, before its first local iteration ever, warms up a model of
its own on its shard (kind ``"warmup"``: ``epochs`` passes over the shard in batches of ``batch_size`` rows); then the
round's ``T`` local iterations follow exactly as in :class:`~lightning_sfl.loop.SyncRounds`.

SCALA-PE uses it for ResSFL's pre-training of the simulated inversion models (30 epochs of MSE on (activation, image)
pairs before the alternating training). ResSFL pre-trains every client's decoder before the first epoch, in which all
its clients take part; with partial participation a client warms up at the start of the first round it is selected
in, against the client half it receives then (the same thing when every client takes part in round 0).

A warm-up step (:class:`WarmupStep`) lists the round's clients (as the round's local iterations do) with the rows of
the clients that warm up in it (``sizes`` 0 for the others), and carries no labels. Its rows train no client half:
they are not counted in the round's samples and iterations (:class:`~lightning_sfl.loop.RoundEnd`), so the simulated
clock and the traffic ledger see the same rounds as without the warm-up. Rows come from a generator seeded by
``(seed, round, stream 3)``; which clients have warmed up is the schedule's state (checkpointed with the federation),
so a resumed run warms up the same clients at the same rounds.

>>> import torch
>>> from lightning_sfl.loop.selection import UniformSelection
>>> stats = ClientStats(sizes=torch.tensor([3, 5]), label_counts=torch.tensor([[3, 0], [0, 5]]),
...     label_distribution=torch.tensor([[1.0, 0.0], [0.0, 1.0]]), shards=[torch.arange(0, 3), torch.arange(3, 8)],
...     clients_per_round=2, batch_size=4, seed=0)
>>> schedule = WarmupRounds(local_iters=2, selection=UniformSelection(), epochs=2, batch_size=2)
>>> [(s.kind, s.index, s.sizes.tolist()) for s in schedule.plan_round(0, stats)]  # 2 epochs of ceil(5 / 2) batches
[('warmup', 0, [2, 2]), ('warmup', 1, [1, 2]), ('warmup', 2, [0, 1]), ('warmup', 3, [2, 2]), ('warmup', 4, [1, 2]),
 ('warmup', 5, [0, 1]), ('local', 6, [2, 2]), ('local', 7, [2, 2])]
>>> [s.kind for s in schedule.plan_round(1, stats)]  # both clients are warm
['local', 'local']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from typing_extensions import override

from lightning_sfl.errors import whole_number
from lightning_sfl.loop.sampling import round_generator
from lightning_sfl.loop.schedule import SyncRounds
from lightning_sfl.loop.selection import ClientSelection
from lightning_sfl.loop.step import ClientStats, Step

__all__ = ["WarmupRounds", "WarmupStep"]


@dataclass
class WarmupStep(Step):
    """Rows for the clients' own warm-up (``sizes[k]`` of client ``clients[k]``; 0 for a client that is warm already).
    No labels; no client half trains on them."""

    carries_labels: ClassVar[bool] = False
    trains_client_halves: ClassVar[bool] = False


class WarmupRounds(SyncRounds):
    """Synchronous rounds with a warm-up phase for the clients that take part for the first time (see the module
    docstring).

    Args:
        local_iters: ``T >= 1``.
        selection: the client-selection policy.
        epochs: passes over a warming client's shard (``>= 1``).
        batch_size: rows of each warming client per warm-up step (``>= 1``).
    """

    kinds = ("warmup", "local")

    def __init__(self, local_iters: int, selection: ClientSelection, epochs: int, batch_size: int) -> None:
        super().__init__(local_iters, selection)
        self.epochs, self.batch_size = (
            whole_number("epochs", epochs),
            whole_number("batch_size", batch_size),
        )
        self.warm = torch.zeros(0, dtype=torch.bool)  # [K]: client k has warmed up (sized at the first round)

    @property
    @override
    def steps_per_round(self) -> None:
        return None  # rounds with newcomers are longer

    def warmup_steps(self, round_idx: int, clients: torch.Tensor, new: torch.Tensor, stats: ClientStats) -> list[Step]:
        """The warm-up steps of round ``round_idx`` for the clients ``clients[new]`` (``new``: ``[S]`` bool): every
        epoch a fresh permutation of each shard, cut into batches; step ``j`` of an epoch holds batch ``j`` of each."""
        g = round_generator(stats.seed, round_idx, stream=3)
        batches: list[list[tuple[torch.Tensor, ...]]] = []  # [epoch][client] -> its batches
        for _ in range(self.epochs):
            batches.append([])
            for k, is_new in zip(clients.tolist(), new.tolist()):
                shard = stats.shards[k]
                perm = shard[torch.randperm(len(shard), generator=g)] if is_new else shard[:0]
                batches[-1].append(perm.split(self.batch_size) if len(perm) else ())
        steps: list[Step] = []
        none = torch.zeros(0, dtype=torch.long)
        for epoch in batches:
            for j in range(max(len(b) for b in epoch)):
                parts = [b[j] if j < len(b) else none for b in epoch]
                sizes = torch.tensor([len(p) for p in parts], dtype=torch.long)
                steps.append(WarmupStep("warmup", round_idx, len(steps), False, clients, sizes, torch.cat(parts)))
        return steps

    @override
    def plan_round(self, round_idx: int, stats: ClientStats) -> list[Step]:
        local = super().plan_round(round_idx, stats)
        if len(self.warm) != stats.num_clients:
            self.warm = torch.zeros(stats.num_clients, dtype=torch.bool)
        clients = local[0].clients
        new = ~self.warm[clients]
        self.warm[clients] = True
        warm = self.warmup_steps(round_idx, clients, new, stats) if bool(new.any()) else []
        return [*warm, *(s.replace(index=s.index + len(warm)) for s in local)]

    @override
    def state_dict(self) -> dict:
        return {**super().state_dict(), "warm": self.warm.clone()}

    @override
    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if "warm" in state:
            self.warm = torch.as_tensor(state["warm"], dtype=torch.bool).clone()
