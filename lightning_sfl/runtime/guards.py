"""NaN/Inf guards: a run stops at the first non-finite activation, logit, loss or global weight, in one line that names
the round, the local iteration and the clients whose rows are affected; nothing of that round is checkpointed. The
message ends at what the method knows: which checkpoint the run kept, if any, is the command line's to say.

>>> import torch
>>> from lightning_sfl.loop import Step
>>> step = Step("local", 2, 0, False, torch.tensor([7, 9]), torch.tensor([1, 1]), torch.tensor([0, 1]),
...     owner=torch.tensor([0, 1]))
>>> try:
...     check_all_finite(step, [("logits", torch.tensor([[0.0], [float("nan")]]))])
... except NonFiniteError as err:
...     print(err)
non-finite logits in round 3, local iteration 1, client(s) [9]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import torch

from lightning_sfl.errors import NonFiniteError
from lightning_sfl.loop import Step
from lightning_sfl.runtime import processes

__all__ = ["check_all_finite", "check_finite", "check_global_weights"]


def check_finite(step: Step, *named: tuple[str, torch.Tensor]) -> None:
    """:func:`check_all_finite` of per-row values ``(what, [B, ...])`` of ``step``, checked together; under DDP every
    process stops together (the flags are summed over processes)."""
    several = processes.world_size() > 1
    check_all_finite(step, named, processes.sum_over_processes if several else None)


def check_all_finite(
    step: Step,
    named: Sequence[tuple[str, torch.Tensor]],
    sum_over_processes: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> None:
    """Stop if any of ``named`` (``(what, values [B, ...])``, rows in the step's order) is not finite, blaming the
    first such one. In the common case one sum per tensor and one read of the device (a local iteration checks its
    activations and its logits together); an overflowing sum of finite values is no error.
    ``sum_over_processes``: under DDP, sums the per-tensor flags over processes so that every process stops in the same
    step (none is left waiting in a collective)."""
    total = named[0][1].detach().sum()
    for _, values in named[1:]:
        total = total + values.detach().sum()
    bad = [False] * len(named)
    if not math.isfinite(float(total)):  # a NaN or an infinity, or finite values whose sum overflows
        bad = [not bool(torch.isfinite(v.detach()).all()) for _, v in named]  # look at every value
    if sum_over_processes is not None:
        flags = torch.tensor(bad, dtype=torch.int32, device=named[0][1].device)
        bad = [bool(f) for f in sum_over_processes(flags).tolist()]
    if not any(bad):
        return
    what, values = named[bad.index(True)]
    rows = ~torch.isfinite(values.detach().reshape(len(values), -1)).all(dim=1)
    if step.owner is None:
        who = "none (rows held by the server)"
    else:
        who = step.clients[torch.unique(step.owner[rows])].tolist() or "on another process"
    raise NonFiniteError(
        f"non-finite {what} in round {step.round + 1}, local iteration {step.index + 1}, client(s) {who}"
    )


def check_global_weights(named_parameters: Iterable[tuple[str, torch.Tensor]], step: Step) -> None:
    """Stop if a weight of the global model (``named_parameters``) is not finite after the round's aggregation: a
    broken global model never reaches evaluation or a checkpoint."""
    bad = [n for n, p in named_parameters if not p.isfinite().all()]
    if bad:
        raise NonFiniteError(f"non-finite global weights ({bad[0]}) after aggregating round {step.round + 1}")
