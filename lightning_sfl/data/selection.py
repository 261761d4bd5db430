"""Client-selection policies: which ``S`` of the ``K`` clients take part in a round.

A policy is called once per round with the clients' label counts ``[K, N]``, the number ``S`` to select,
a generator seeded by ``(seed, round)`` and the round index; it returns ``S`` distinct client ids.
Policies that keep state across rounds expose ``state_dict``/``load_state_dict`` (saved in checkpoints
through the data module).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class UniformSelection:
    """Uniformly random clients without replacement (FedAvg's and the SCALA paper's choice)."""

    def __call__(self, label_counts: torch.Tensor, num_select: int, generator: torch.Generator, round_idx: int):
        return torch.randperm(len(label_counts), generator=generator)[:num_select].sort().values

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


SELECTIONS: dict[str, Callable[[], object]] = {"uniform": UniformSelection}


def build_selection(name: str):
    if name not in SELECTIONS:
        raise ValueError(f"client_selection={name!r} is not one of: {', '.join(SELECTIONS)}")
    return SELECTIONS[name]()
