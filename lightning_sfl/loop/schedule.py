"""Schedules: how a global round unfolds, as data. Configured by the method, part of the federation, executed by the
data module.

A schedule turns a round index into the list of typed :class:`~lightning_sfl.loop.Step` of that round: which kind
of step, which clients, which rows, when. The data module calls :meth:`Schedule.plan_round` once at the start of
every round (Lightning epoch) and yields the steps one by one to the method, which runs the handler of each kind.
Rounds may have any number of steps (one epoch = one round of variable length).

Planning a round moves the schedule's state (selection history, clocks, per-client progress, adaptive counts)
to the round's end, so the state saved in a checkpoint (with the federation's state) is exactly the state the
next round starts from: a run resumed from a round boundary plans the same rounds as an uninterrupted one.

* :class:`SyncRounds` — synchronous rounds of ``T`` local iterations (every method of the SCALA and FedLC
  papers);
* asynchronous event schedules (GAS, FedBuff) and phased schedules (Semi-SFL) are subclasses of
  :class:`Schedule` with their own step kinds (see :doc:`/architecture`).

>>> import torch
>>> from lightning_sfl.loop.selection import UniformSelection
>>> stats = ClientStats(sizes=torch.tensor([4, 4, 8]), label_counts=torch.tensor([[4, 0], [0, 4], [4, 4]]),
...     label_distribution=torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]),
...     shards=[torch.arange(0, 4), torch.arange(4, 8), torch.arange(8, 16)], clients_per_round=2,
...     batch_size=4, seed=0)
>>> steps = SyncRounds(local_iters=3, selection=UniformSelection()).plan_round(0, stats)
>>> [(s.kind, s.index, s.round_end) for s in steps]
[('local', 0, False), ('local', 1, False), ('local', 2, True)]
"""

from __future__ import annotations

from typing import ClassVar

import torch
from typing_extensions import override

from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.sampling import client_batch_sizes, minibatch_indices, round_generator
from lightning_sfl.loop.selection import ClientSelection
from lightning_sfl.loop.step import ClientStats, Step
from lightning_sfl.system.timing import SystemModel

__all__ = ["Schedule", "SyncRounds"]


class Schedule:
    """Protocol of every schedule (subclass it and implement :meth:`plan_round`).

    Class attributes:
        kinds: the step kinds this schedule produces; the method must have a handler for each (checked when the
            method configures its schedule, with a one-line error naming the missing ones).
        persistent_slots: ``True`` when a client keeps its bank slot across rounds (asynchronous clients hold a
            slot across several server updates): the method then checkpoints its banks. ``False``: slots are
            rebuilt from the global model every round and not saved.
        partial_steps: ``True`` when a step may leave some of the round's clients out (their slots must not move):
            ``client_bank="auto"`` then runs a sequential bank, whose optimiser skips slots without gradient; a
            stacked bank copies the left-out rows around the step.
    """

    kinds: ClassVar[tuple[str, ...]] = ()
    persistent_slots: ClassVar[bool] = False
    partial_steps: ClassVar[bool] = False

    @property
    def steps_per_round(self) -> int | None:
        """Steps of every round when fixed (Lightning then knows the epoch length), else ``None``."""
        return None

    def num_slots(self, stats: ClientStats) -> int:
        """How many client slots (copies of the client half) the method needs: default ``S``."""
        return stats.clients_per_round

    def check(self, stats: ClientStats) -> None:
        """Refuse, with a one-line :class:`~lightning_sfl.errors.ConfigError`, clients this schedule cannot run
        (:meth:`Federation.build` calls it, and the CLI before the trainer exists). Default: the slots it needs
        (:meth:`num_slots`) can be given."""
        self.num_slots(stats)

    def bind_system(self, system: SystemModel, stats: ClientStats) -> None:
        """Take what the schedule needs of the federation's system model before its first round (an asynchronous
        schedule: every client's seconds per event). Default: nothing."""

    def plan_round(self, round_idx: int, stats: ClientStats) -> list[Step]:
        """The steps of round ``round_idx``; moves the schedule's state to the end of that round."""
        raise NotImplementedError

    @override
    def state_dict(self) -> dict:
        """Everything needed to plan the next round as an uninterrupted run would (checkpointed)."""
        return {}

    @override
    def load_state_dict(self, state: dict) -> None:
        pass


class SyncRounds(Schedule):
    """Synchronous rounds (SCALA Algorithm 2; FedAvg): round ``i`` selects ``S`` clients ``C^i`` with the
    selection policy, gives each ``B_k`` rows per iteration (eq. 3) and runs ``T`` local iterations, all clients
    in every step (client ``k`` of ``C^i``, sorted by id, in slot ``k``). The round ends after the ``T``-th step.

    Clients come from a generator seeded by ``(seed, i)`` and minibatches from ``(seed, i, stream 1)``, so the
    rounds are the same in a resumed run. Each client's minibatches are drawn without replacement from a
    permutation of its shard, a fresh permutation when it is used up
    (:func:`~lightning_sfl.loop.sampling.minibatch_indices`).

    Args:
        local_iters: ``T >= 1``.
        selection: the client-selection policy (its state is the schedule's state).
    """

    kinds = ("local",)

    def __init__(self, local_iters: int, selection: ClientSelection) -> None:
        if int(local_iters) != local_iters or local_iters < 1:
            raise ConfigError(f"local_iters={local_iters} must be a whole number >= 1")
        self.local_iters = int(local_iters)
        self.selection = selection

    @property
    @override
    def steps_per_round(self) -> int:
        return self.local_iters

    def local_steps(self, sizes: torch.Tensor, stats: ClientStats) -> torch.Tensor:
        """Local steps ``τ_k`` each client of sizes ``sizes`` ``[S]`` takes in a round: ``T`` for all."""
        return torch.full((len(sizes),), self.local_iters, dtype=torch.long)

    def select_clients(self, round_idx: int, stats: ClientStats) -> torch.Tensor:
        """``C^i``: the sorted ids of the clients of round ``round_idx``, ``[S]``."""
        g = round_generator(stats.seed, round_idx)
        clients = self.selection(stats.label_counts, stats.clients_per_round, g, round_idx)
        return torch.as_tensor(clients, dtype=torch.long).sort().values

    @override
    def plan_round(self, round_idx: int, stats: ClientStats) -> list[Step]:
        clients = self.select_clients(round_idx, stats)
        sizes = client_batch_sizes(stats.sizes[clients], stats.batch_size)
        g = round_generator(stats.seed, round_idx, stream=1)
        draws = [minibatch_indices(stats.shards[k], int(b), self.local_iters, g) for k, b in zip(clients, sizes)]
        last = self.local_iters - 1
        return [
            Step("local", round_idx, t, t == last, clients, sizes, torch.cat([d[t] for d in draws]))
            for t in range(self.local_iters)
        ]

    @override
    def state_dict(self) -> dict:
        return {"selection": self.selection.state_dict()}

    @override
    def load_state_dict(self, state: dict) -> None:
        self.selection.load_state_dict(state.get("selection", {}))
