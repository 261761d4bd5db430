"""What flows through the loop: client statistics (data module → federation, once), typed steps (schedule → data module
→ ``training_step``) and the round-end event (method → federation → callbacks, method, schedule).

Shapes: ``K`` clients in the federation, ``N`` classes, ``S`` clients in a step, ``B`` rows in a step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from typing_extensions import override

if TYPE_CHECKING:
    from lightning_sfl.system.comm import CommLedger

__all__ = ["PROBE_KIND", "ClientStats", "RoundEnd", "Step"]

#: ``Step.kind`` of a probe outside training (SplitGuard's): no handler runs it; the server answers with its global
#: half (not a client's copy) and nothing is updated.
PROBE_KIND = "probe"


@dataclass(frozen=True)
class ClientStats:
    """What the data module knows about its clients, handed once to the federation (``Federation.build``) and to the
    schedule (every ``plan_round``). Nothing flows back.

    Attributes:
        sizes: ``|D_k|``, ``[K]`` int64.
        label_counts: ``n_{k,y}``, samples of each class held by each client, ``[K, N]`` int64.
        label_distribution: ``P_k(y)``, ``[K, N]`` float64, rows sum to one.
        shards: each client's rows of the training split, ``K × [|D_k|]`` int64 index tensors.
        clients_per_round: ``S = max(1, round(ρK))``.
        batch_size: ``B``, rows per local iteration summed over a round's clients.
        seed: seeds the partition and every per-round draw (``--data.seed``).
        labelled: rows of the training split held by the server with their labels (``--data.labelled_per_class``;
            semi-supervised methods), ``None`` when the clients hold all the data.
    """

    sizes: torch.Tensor
    label_counts: torch.Tensor
    label_distribution: torch.Tensor
    shards: list[torch.Tensor]
    clients_per_round: int
    batch_size: int
    seed: int
    labelled: torch.Tensor | None = None

    @property
    def num_clients(self) -> int:
        """``K``."""
        return len(self.sizes)

    @property
    def num_classes(self) -> int:
        """``N``."""
        return self.label_counts.shape[1]


@dataclass
class Step:
    """One training step (one ``training_step`` call): what happens, to which clients, on which rows, when.

    A schedule creates steps without data (``rows`` are indices into the training split); the data module fills
    in the data fields before the step reaches the method. Schedules may subclass ``Step`` to carry what their
    kinds need (typed fields, not a dict).

    Attributes:
        kind: which handler of the method runs the step (``"local"``: a synchronous local iteration; a schedule
            names its own kinds, e.g. ``"arrival"``, ``"upload"``, ``"server"``).
        round: global round ``i`` (0-based; one Lightning epoch).
        index: position of the step within its round (0-based).
        round_end: the round ends after this step: the method aggregates, callbacks receive ``on_round_end``.
        clients: ``[S]`` global ids of the clients taking part, in the order of their row blocks.
        sizes: ``[S]`` ``B_k``, rows of each client in the whole step (on all processes together).
        rows: ``[B]`` training-split indices, client block after client block (``B = Σ_k B_k``); a step whose rows
            belong to no client (``clients`` empty, e.g. data held by the server) has its ``B`` rows here alone.
        slots: ``[S]`` bank slot of each client; ``None``: client ``k`` of the step is in slot ``k``.
        time: simulated time (s) at which the step happens, for schedules that keep a clock.
        x: ``[B_local, C, H, W]`` inputs of this process's rows (data module).
        y: ``[B_local]`` labels (data module).
        owner: ``[B_local]`` position in ``clients`` of each row's client, ``0..S-1`` (``None`` without clients).
        local_sizes: ``[S]`` rows of each client on this process (``= sizes`` with one process).
        label_counts: ``[N]`` labels of the whole step, all processes (for ``P_s``, eq. 14).
    """

    #: False for steps whose rows train something other than the client halves (SCALA-PE's warm-up of the simulated
    #: inversion models, :class:`~lightning_sfl.loop.warmup.WarmupStep`): the method does not count them in the
    #: round's samples and iterations (:class:`RoundEnd`).
    trains_client_halves: ClassVar[bool] = True

    kind: str
    round: int
    index: int
    round_end: bool
    clients: torch.Tensor
    sizes: torch.Tensor
    rows: torch.Tensor
    slots: torch.Tensor | None = None
    time: float | None = None
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    owner: torch.Tensor | None = None
    local_sizes: torch.Tensor | None = None
    label_counts: torch.Tensor | None = None
    #: ``[B_local]`` training-split indices of this process's rows (``None``: all of ``rows``, one process).
    local_rows: torch.Tensor | None = None

    @property
    def round_start(self) -> bool:
        """The first step of its round (the method broadcasts, callbacks receive ``on_round_start``)."""
        return self.index == 0

    @property
    def slots_tensor(self) -> torch.Tensor:
        """``[S]`` the bank slot of each client of the step."""
        return self.slots if self.slots is not None else torch.arange(len(self.clients), device=self.clients.device)

    def slots_list(self) -> list[int]:
        """:attr:`slots_tensor` as a Python list (no device sync when the slots are implicit, ``slots is None``)."""
        return list(range(len(self.clients))) if self.slots is None else self.slots.tolist()

    @property
    def num_rows(self) -> int:
        """Rows of this step on this process."""
        data = self.y if self.y is not None else self.x
        return 0 if data is None else len(data)

    def replace(self, **changes) -> Step:
        """A copy with ``changes`` (``dataclasses.replace``; keeps the subclass and its extra fields)."""
        return dataclasses.replace(self, **changes)

    def minibatch(self, start: int, rows: int) -> Step:
        """Rows ``start`` to ``start + rows`` of a one-client step as a step of their own (one of the ``E``
        minibatches an asynchronous FL client's upload carries), for one local iteration.

        >>> step = Step("upload", 0, 3, False, torch.tensor([4]), torch.tensor([6]), torch.arange(6),
        ...             x=torch.arange(6.0), y=torch.arange(6), owner=torch.zeros(6, dtype=torch.long))
        >>> part = step.minibatch(2, 2)
        >>> part.y.tolist(), part.sizes.tolist(), part.local_sizes.tolist(), part.owner.tolist()
        ([2, 3], [2], [2], [0, 0])
        """
        if len(self.clients) != 1:
            raise ValueError(f"minibatch: the step holds {len(self.clients)} clients, not one")
        part = slice(start, start + rows)
        size = self.sizes.new_tensor([rows])
        return self.replace(
            sizes=size,
            rows=self.rows[part],
            x=None if self.x is None else self.x[part],
            y=None if self.y is None else self.y[part],
            owner=None if self.owner is None else self.owner[part],
            local_sizes=size,
            label_counts=None,
        )

    @override
    def to(self, device: torch.device | str) -> Step:
        """The step with every tensor field on ``device`` (what the data module's batch transfer does)."""
        moved = {
            f.name: v.to(device)
            for f in dataclasses.fields(self)
            if isinstance(v := getattr(self, f.name), torch.Tensor)
        }
        return self.replace(**moved)


@dataclass(frozen=True)
class RoundEnd:
    """The event a method sends its callbacks (``on_round_end``) after the FL phase of a round.

    Attributes:
        round: the round that ended (0-based; ``round + 1`` rounds are complete).
        clients: ``[S]`` the client in each bank slot at the round's end (the columns of ``ledger``).
        samples: ``[S]`` training rows each slot processed in the round (``T·B_k`` under ``SyncRounds``).
        ledger: the round's traffic by direction, kind and slot (exact bytes).
        time: simulated time (s) at the end of the round: the schedule's own clock where it keeps one (asynchronous
            events), else stamped by the federation from its system model (``None`` until then).
        iterations: ``[S]`` local iterations each slot took part in (steps with rows for it); ``None``: not counted.
        seconds: the round's simulated duration (s), stamped by the federation with ``time``.
        metrics: what the method measured in the round that its schedule adapts to (Semi-SFL: the mean supervised
            loss, ``supervised_loss``).
        server_rows: rows the server trained on its own data in the round (Semi-SFL's supervised phase), for the
            system model.
    """

    round: int
    clients: torch.Tensor
    samples: torch.Tensor
    ledger: CommLedger
    time: float | None = None
    iterations: torch.Tensor | None = None
    seconds: float | None = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    server_rows: int = 0
