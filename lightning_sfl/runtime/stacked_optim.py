"""Optimiser steps and state of some rows of a :class:`~lightning_sfl.runtime.stacked_bank.StackedBank`'s stacked
parameters: what a step that leaves slots out (asynchronous arrivals, local epochs) needs, and what a client taking a
slot resets.

A step over the whole stacked tensors would move the slots it leaves out (SGD's momentum and weight decay move a
parameter whose gradient is zero), where the sequential bank's optimiser skips their modules. :func:`sgd_rows_` takes
:class:`torch.optim.SGD`'s step on the chosen rows only (its single-tensor form's operations on those rows, so every
element is what SGD computes for it: bitwise the step of the whole tensor there); :func:`keep_rows` is the fallback for
other optimisers: the rows left out are copied before the step and written back after.

>>> p = torch.nn.Parameter(torch.ones(3, 2))
>>> p.grad = torch.ones(3, 2)
>>> opt = torch.optim.SGD([p], lr=0.5, momentum=0.9)
>>> settings = sgd_settings(opt, [p])
>>> sgd_rows_(p, p.grad, opt.state[p], torch.tensor([0, 2]), **settings)
>>> p.detach()[:, 0].tolist(), opt.state[p]["momentum_buffer"][:, 0].tolist()
([0.5, 1.0, 0.5], [1.0, 0.0, 1.0])
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch

from lightning_sfl.errors import ConfigError

__all__ = ["keep_rows", "reset_rows_", "row_index", "sgd_rows_", "sgd_settings"]

#: ``torch.optim.SGD`` options a row step reproduces; any other set (``maximize``, ``foreach``, ``fused``,
#: ``differentiable``, a tensor learning rate) falls back to :func:`keep_rows`.
_SGD_SETTINGS = ("lr", "momentum", "dampening", "weight_decay", "nesterov")


def row_index(rows: Sequence[int], device: torch.device) -> slice | torch.Tensor:
    """``rows`` (ascending) as a slice when they are consecutive (views, no copies), else an index tensor.

    >>> row_index([2, 3, 4], torch.device("cpu")), row_index([0, 2], torch.device("cpu")).tolist()
    (slice(2, 5, None), [0, 2])
    """
    if rows and list(rows) == list(range(rows[0], rows[0] + len(rows))):
        return slice(rows[0], rows[0] + len(rows))
    return torch.tensor(list(rows), dtype=torch.long, device=device)


def sgd_settings(optimizer: torch.optim.Optimizer, params: Sequence[torch.Tensor]) -> dict | None:
    """The hyperparameters of the one group of a plain :class:`torch.optim.SGD` holding every tensor of ``params``, as
    keyword arguments of :func:`sgd_rows_`; ``None`` for any other optimiser or option (see ``_SGD_SETTINGS``)."""
    if type(optimizer) is not torch.optim.SGD:
        return None
    ids = {id(p) for p in params}
    groups = [g for g in optimizer.param_groups if any(id(q) in ids for q in g["params"])]
    if len(groups) != 1 or len({id(q) for q in groups[0]["params"]} & ids) != len(ids):
        return None
    group = groups[0]
    if any(group.get(flag) for flag in ("maximize", "foreach", "fused", "differentiable")):
        return None
    if any(isinstance(group[key], torch.Tensor) for key in _SGD_SETTINGS):
        return None
    return {key: group[key] for key in _SGD_SETTINGS}


@torch.no_grad()
def sgd_rows_(
    param: torch.Tensor,
    grad: torch.Tensor,
    state: dict,
    rows: slice | torch.Tensor,
    lr: float,
    momentum: float,
    dampening: float,
    weight_decay: float,
    nesterov: bool,
) -> None:
    """SGD's step (``torch.optim.SGD``, its single-tensor form's operations) on rows ``rows`` of ``param`` only, with
    gradient ``grad`` and the parameter's optimiser ``state`` (its ``momentum_buffer``, the size of ``param``: made
    here at the first step, zero in the other rows, as a step that left them out would leave it). In place."""
    gathered = not isinstance(rows, slice)
    g = grad.index_select(0, rows) if gathered else grad[rows]
    if weight_decay != 0:
        g = g.add(param.index_select(0, rows) if gathered else param[rows], alpha=weight_decay)
    if momentum != 0:
        buf = state.get("momentum_buffer")
        if buf is None:
            buf = state["momentum_buffer"] = torch.zeros_like(param)
            b = g if gathered else buf[rows].copy_(g)  # SGD's first step: buf = grad
        else:
            b = buf.index_select(0, rows) if gathered else buf[rows]
            b.mul_(momentum).add_(g, alpha=1 - dampening)
        if gathered:
            buf.index_copy_(0, rows, b)
        g = g.add(b, alpha=momentum) if nesterov else b
    if gathered:
        param.index_add_(0, rows, g, alpha=-lr)  # row by row what ``param.add_(g, alpha=-lr)`` computes
    else:
        param[rows].add_(g, alpha=-lr)


@contextlib.contextmanager
def keep_rows(params: Sequence[torch.Tensor], optimizer: torch.optim.Optimizer, absent: torch.Tensor) -> Iterator[None]:
    """A context in which an optimiser step leaves rows ``absent`` of ``params`` and of their SGD momentum buffers as
    they were: copied before, written back after (a buffer the step creates is zero there). Any other per-parameter
    state (Adam's shared step count) cannot be kept per row: ``ConfigError``."""
    kept = []
    with torch.no_grad():
        for p in params:
            state = optimizer.state.get(p) or {}
            if any(key != "momentum_buffer" for key in state):
                raise ConfigError(
                    f"optimizer state {sorted(state)} of a stacked bank cannot be kept for the slots a step "
                    "leaves out; use --model.client_bank sequential"
                )
            index = absent.to(p.device)
            buffer = state.get("momentum_buffer")
            kept.append((p, index, p[index].clone(), None if buffer is None else buffer[index].clone()))
    yield
    with torch.no_grad():
        for p, index, values, buffer in kept:
            p[index] = values
            state = optimizer.state.get(p) or {}
            if state.get("momentum_buffer") is not None:
                state["momentum_buffer"][index] = 0 if buffer is None else buffer


@torch.no_grad()
def reset_rows_(params: Sequence[torch.Tensor], optimizer: torch.optim.Optimizer, rows: list[int]) -> None:
    """Zero rows ``rows`` of every per-element state tensor of ``params``: a fresh state for SGD without dampening (a
    zero momentum buffer gives ``buf = grad`` at the next step, as a missing one does). Any other state (Adam's shared
    step count, SGD's dampening) cannot be reset per row: ``ConfigError``."""
    index = None
    for p in params:
        state = optimizer.state.get(p)
        if not state:
            continue
        group = next(g for g in optimizer.param_groups if any(q is p for q in g["params"]))
        for key, value in state.items():
            if key != "momentum_buffer" or group.get("dampening", 0) != 0 or value.shape != p.shape:
                raise ConfigError(
                    f"optimizer state {key!r} of a stacked bank cannot be reset for single slots; "
                    "use --model.client_bank sequential"
                )
            if index is None:
                index = row_index(sorted(rows), value.device)
            value[index] = 0
