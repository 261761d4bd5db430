"""``Phases``: Semi-SFL's round (Alg. 1) — ``K_s`` supervised steps on the server's labelled set, then ``K_u``
cross-entity steps on the unlabelled data of the round's clients.

Round ``h``:

1. ``K_s^h`` steps of kind ``"supervised"``: ``labelled_batch_size`` rows of the server's labelled set
   (``ClientStats.labelled``, from ``--data.labelled_per_class``), no clients. ``K_s`` comes from
   :class:`~lightning_sfl.loop.ks_control.SupervisedSteps` (eq. 9): the method reports each round's mean supervised
   loss in its round-end event (``metrics["supervised_loss"]``), the federation delivers the event to the schedule
   (:meth:`Phases.on_round_end`) and the next round plans with the new ``K_s``.
2. ``K_u`` steps of kind ``"unlabelled"``: the round's ``S`` clients (the selection policy, as in
   :class:`~lightning_sfl.loop.SyncRounds`), ``client_batch_size`` rows each (capped at ``|D_k|``). These steps are
   :class:`UnlabelledStep`: the data module leaves their labels out (``y is None``), so a method cannot read them;
   metrics that need the true labels (pseudo-label accuracy) look them up by ``rows``. The last one ends the round.

Minibatches come from generators seeded by ``(seed, h, stream)``: labelled rows from stream 2, client rows from
stream 1, clients from stream 0; the state (selection history, ``K_s`` and its loss history) is checkpointed with
the federation, so a run resumed at a round's end plans the same rounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from typing_extensions import override

from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.ks_control import SupervisedSteps
from lightning_sfl.loop.sampling import minibatch_indices, round_generator
from lightning_sfl.loop.schedule import SyncRounds
from lightning_sfl.loop.selection import ClientSelection
from lightning_sfl.loop.step import ClientStats, RoundEnd, Step

__all__ = ["Phases", "SupervisedOnlyRounds", "UnlabelledStep"]


@dataclass
class UnlabelledStep(Step):
    """A step on clients' unlabelled data: the data module fills ``x`` but never ``y``."""

    carries_labels: ClassVar[bool] = False


class Phases(SyncRounds):
    """Supervised server steps, then cross-entity steps on unlabelled clients (see the module docstring).

    Args:
        supervised: the ``K_s`` controller (eq. 9).
        unlabelled_steps: ``K_u >= 1``, cross-entity steps per round.
        labelled_batch_size: rows of the labelled set per supervised step.
        client_batch_size: rows per client per cross-entity step.
        selection: the client-selection policy.
    """

    kinds = ("supervised", "unlabelled")

    def __init__(
        self,
        supervised: SupervisedSteps,
        unlabelled_steps: int,
        labelled_batch_size: int,
        client_batch_size: int,
        selection: ClientSelection,
    ) -> None:
        if int(unlabelled_steps) != unlabelled_steps or unlabelled_steps < 1:
            raise ConfigError(f"unlabelled_steps={unlabelled_steps!r} (K_u) must be a whole number >= 1")
        for name, value in (("labelled_batch_size", labelled_batch_size), ("client_batch_size", client_batch_size)):
            if int(value) != value or value < 1:
                raise ConfigError(f"{name}={value!r} must be a whole number >= 1")
        super().__init__(unlabelled_steps, selection)
        self.supervised = supervised
        self.labelled_batch_size, self.client_batch_size = int(labelled_batch_size), int(client_batch_size)

    @property
    @override
    def steps_per_round(self) -> None:
        return None  # K_s changes during training

    @override
    def check(self, stats: ClientStats) -> None:
        """The server's labelled set must hold a sample (the supervised phase of every semi-supervised method)."""
        super().check(stats)
        if stats.labelled is None or len(stats.labelled) == 0:
            raise ConfigError(
                "a semi-supervised method needs a labelled server set: set --data.labelled_per_class to a number >= 1"
            )

    @override
    def plan_round(self, round_idx: int, stats: ClientStats) -> list[Step]:
        self.check(stats)
        k_s, k_u = self.supervised.steps, self.local_iters
        g = round_generator(stats.seed, round_idx, stream=2)
        batch = min(self.labelled_batch_size, len(stats.labelled))
        labelled = minibatch_indices(stats.labelled, batch, k_s, g)
        none = torch.zeros(0, dtype=torch.long)
        steps: list[Step] = [Step("supervised", round_idx, t, False, none, none, labelled[t]) for t in range(k_s)]
        clients = self.select_clients(round_idx, stats)
        sizes = stats.sizes[clients].clamp(max=self.client_batch_size)
        g = round_generator(stats.seed, round_idx, stream=1)
        draws = [minibatch_indices(stats.shards[k], int(b), k_u, g) for k, b in zip(clients, sizes)]
        for t in range(k_u):
            rows = torch.cat([d[t] for d in draws])
            steps.append(UnlabelledStep("unlabelled", round_idx, k_s + t, t == k_u - 1, clients, sizes, rows))
        return steps

    def observe_supervised_loss(self, loss: float) -> int:
        """The round's mean supervised loss ``ℓ_s^h``; returns ``K_s`` of the next round (eq. 9)."""
        return self.supervised.observe(loss)

    def on_round_end(self, event: RoundEnd) -> None:
        """The round's end, after the method's: its mean supervised loss (``event.metrics["supervised_loss"]``, when
        the round had supervised steps) sets the next round's ``K_s``."""
        loss = event.metrics.get("supervised_loss")
        if loss is not None:
            self.observe_supervised_loss(loss)

    @override
    def state_dict(self) -> dict:
        return {**super().state_dict(), "supervised": self.supervised.state_dict()}

    @override
    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if "supervised" in state:
            self.supervised.load_state_dict(state["supervised"])


class SupervisedOnlyRounds(Phases):
    """Rounds of ``K_s`` supervised steps and nothing else (the supervised-only lower bound): the last supervised step
    ends the round; no client takes part."""

    kinds = ("supervised",)

    @override
    def plan_round(self, round_idx: int, stats: ClientStats) -> list[Step]:
        steps = [s for s in super().plan_round(round_idx, stats) if s.kind == "supervised"]
        steps[-1] = steps[-1].replace(round_end=True)
        return steps
