"""Several processes (DDP): each holds a share of every client's rows; the gradients are summed over processes before
every step, by the method, not by DDP's reducer (a step makes several backward passes over disjoint parameter sets,
which DDP's reducer does not support). How each loss term is normalised so that the sum is the one-process gradient is
:func:`lightning_sfl.runtime.iteration.process_share`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn.parallel import DistributedDataParallel

__all__ = ["disable_ddp_reducer", "sum_gradients_over_processes", "sum_over_processes", "world_size"]


def world_size() -> int:
    """Processes of the run: the process group's size under DDP (the trainer's ``world_size``), else 1."""
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def disable_ddp_reducer(wrapped: torch.nn.Module) -> None:
    """Turn DDP's gradient all-reduce off on the strategy's wrapped model (Lightning turns it back on after every
    manual-optimisation forward, so this runs in every step). Anything but a ``DistributedDataParallel``: nothing."""
    if isinstance(wrapped, DistributedDataParallel):
        wrapped.require_backward_grad_sync = False


def sum_over_processes(values: torch.Tensor) -> torch.Tensor:
    """``values`` summed over every process (a copy; the input is left as it is)."""
    total = values.clone()
    torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.SUM)
    return total


def sum_gradients_over_processes(params: Sequence[torch.nn.Parameter], device: torch.device) -> None:
    """Replace each parameter's gradient by its sum over processes; a parameter without a gradient here (a client with
    no rows on this process) takes part with zeros if any process has one, and stays without one otherwise."""
    has_grad = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=device)
    torch.distributed.all_reduce(has_grad, op=torch.distributed.ReduceOp.MAX)
    for p, used in zip(params, has_grad.tolist()):
        if used:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.SUM)
