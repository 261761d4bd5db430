"""``LocalEpochs``: synchronous rounds in which every client trains ``E`` epochs over its own shard with its own batch
size, so clients with more data take more local steps (the setting of FedNova, Wang et al. 2020, §2).

Client ``k`` of round ``i`` takes ``τ_k = ⌈E·|D_k| / b_k⌉`` steps of ``b_k = min(b, |D_k|)`` rows. Step ``t`` lists only
the clients still training (``τ_k > t``) with their bank slots, so a client that has finished is not touched (its
parameters get no gradient and SGD skips them: no momentum or weight-decay drift). A last step of kind
``"aggregate"`` (no rows) lists every client of the round and ends it: the method aggregates all of them.

>>> import torch
>>> from lightning_sfl.loop.selection import UniformSelection
>>> stats = ClientStats(sizes=torch.tensor([4, 12]), label_counts=torch.tensor([[4, 0], [6, 6]]),
...     label_distribution=torch.tensor([[1.0, 0.0], [0.5, 0.5]]),
...     shards=[torch.arange(0, 4), torch.arange(4, 16)], clients_per_round=2, batch_size=8, seed=0)
>>> steps = LocalEpochs(1.0, 4, UniformSelection()).plan_round(0, stats)  # τ = (1, 3)
>>> [(s.kind, s.clients.tolist(), s.slots_tensor.tolist(), s.sizes.tolist(), s.round_end) for s in steps]
[('local', [0, 1], [0, 1], [4, 4], False), ('local', [1], [1], [4], False), ('local', [1], [1], [4], False), \
('aggregate', [0, 1], [0, 1], [0, 0], True)]
"""

from __future__ import annotations

import math

import torch
from typing_extensions import override

from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.sampling import minibatch_indices, round_generator
from lightning_sfl.loop.schedule import SyncRounds
from lightning_sfl.loop.selection import ClientSelection
from lightning_sfl.loop.step import ClientStats, Step

__all__ = ["LocalEpochs"]


class LocalEpochs(SyncRounds):
    """``E`` local epochs of ``b``-row minibatches per client and round (see the module docstring).

    Args:
        local_epochs: ``E > 0`` (fractions allowed: ``τ_k`` is rounded up).
        local_batch_size: ``b >= 1``, rows per client and step; ``None``: ``⌊B / S⌋`` (the data module's batch size
            shared by the round's clients).
        selection: the client-selection policy.
    """

    kinds = ("local", "aggregate")
    partial_steps = True

    def __init__(self, local_epochs: float, local_batch_size: int | None, selection: ClientSelection) -> None:
        if not local_epochs > 0:
            raise ConfigError(f"local_epochs={local_epochs} must be > 0")
        if local_batch_size is not None and (int(local_batch_size) != local_batch_size or local_batch_size < 1):
            raise ConfigError(f"local_batch_size={local_batch_size} must be a whole number >= 1")
        super().__init__(1, selection)
        self.local_epochs = float(local_epochs)
        self.local_batch_size = None if local_batch_size is None else int(local_batch_size)

    @property
    @override
    def steps_per_round(self) -> None:
        return None  # depends on the round's clients

    def batch_sizes(self, sizes: torch.Tensor, stats: ClientStats) -> torch.Tensor:
        """``b_k = min(b, |D_k|)`` for clients of sizes ``sizes`` ``[S]``."""
        b = self.local_batch_size or max(1, stats.batch_size // stats.clients_per_round)
        return sizes.clamp(max=b)

    @override
    def local_steps(self, sizes: torch.Tensor, stats: ClientStats) -> torch.Tensor:
        """``τ_k = ⌈E·|D_k| / b_k⌉`` for clients of sizes ``sizes`` ``[S]`` (int64)."""
        b = self.batch_sizes(sizes, stats)
        return torch.tensor([math.ceil(self.local_epochs * int(n) / int(bk) - 1e-9) for n, bk in zip(sizes, b)])

    @override
    def plan_round(self, round_idx: int, stats: ClientStats) -> list[Step]:
        clients = self.select_clients(round_idx, stats)
        sizes = stats.sizes[clients]
        b, taus = self.batch_sizes(sizes, stats), self.local_steps(sizes, stats)
        g = round_generator(stats.seed, round_idx, stream=1)
        draws = [minibatch_indices(stats.shards[k], int(bk), int(tk), g) for k, bk, tk in zip(clients, b, taus)]
        steps = []
        for t in range(int(taus.max())):
            active = (taus > t).nonzero().flatten()
            rows = torch.cat([draws[k][t] for k in active.tolist()])
            steps.append(Step("local", round_idx, t, False, clients[active], b[active], rows, slots=active))
        every = torch.arange(len(clients))
        empty = torch.zeros(0, dtype=torch.long)
        steps.append(Step("aggregate", round_idx, len(steps), True, clients, torch.zeros_like(b), empty, slots=every))
        return steps
