"""What a method takes from, and gives to, the fit's :class:`~lightning_sfl.loop.Federation`, as functions
:class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm` calls: the federation checked against the method, its entry
of a checkpoint, and what the system model needs of the method (the costs of its client model)."""

from __future__ import annotations

import functools

import torch
from torch import nn

from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Federation, Schedule
from lightning_sfl.loop.federation import legacy_federation_state
from lightning_sfl.system.timing import ClientCosts

__all__ = [
    "batches_partial_steps",
    "checked_federation",
    "checked_schedule",
    "client_costs",
    "load_federation_entry",
    "output_shape",
    "save_federation_entry",
    "step_handler",
]


def checked_federation(method, federation: Federation) -> Federation:
    """The fit's federation (:meth:`Federation.build <lightning_sfl.loop.Federation.build>`) checked against
    ``method``: its data's classes (the schedule's own checks, e.g. Semi-SFL's labelled set, ran in
    ``Federation.build``)."""
    stats = federation.stats
    if stats.num_classes != method.num_classes:
        raise ConfigError(f"num_classes={method.num_classes} does not match the dataset's {stats.num_classes} classes")
    return federation


def save_federation_entry(federation: Federation | None, checkpoint: dict) -> None:
    """The ``federation``'s part of ``checkpoint`` (the schedule's state, the system model's draws, the simulated
    time), under ``checkpoint["lightning_sfl"]["federation"]``; the other parts' keys stay. Nothing without one."""
    if federation is not None:
        checkpoint.setdefault("lightning_sfl", {})["federation"] = federation.state_dict()


def load_federation_entry(federation: Federation | None, fitting: bool, checkpoint: dict) -> None:
    """A fit (``fitting``) resumed from ``checkpoint`` continues its ``federation``'s state (also from checkpoints
    written before the federation existed, :func:`~lightning_sfl.loop.federation.legacy_federation_state`)."""
    if federation is None or not fitting:
        return
    state = (checkpoint.get("lightning_sfl") or {}).get("federation")
    federation.load_state_dict(state if state is not None else legacy_federation_state(checkpoint))


def client_costs(
    client: nn.Module,
    server: nn.Module,
    example: torch.Tensor,
    crosses_cut: bool,
    tail: nn.Module | None,
    cut_model,
    cut_options: list[str],
    nominal_cut: str,
) -> ClientCosts:
    """What the client-side model costs per sample, for the system model (measured when it asks): the client half (an
    FL method's whole model) on ``example`` ``[1, *input]``, ``crosses_cut`` (a split method), the clients' ``tail``
    (U-shaped; its input is the ``server``'s output), ``cut_model`` (a function giving the unsplit model) and the cuts
    a client may be charged (``cut_options``, from ``nominal_cut``)."""
    return ClientCosts(
        client,
        tuple(example.shape[1:]),
        crosses_cut,
        activation_shape=functools.partial(output_shape, example, client),
        cut_model=cut_model,  # (picklable: ddp_spawn)
        cut_options=cut_options,
        nominal_cut=nominal_cut,
        tail=tail,
        tail_input_shape=functools.partial(output_shape, example, client, server),
    )


@torch.no_grad()
def output_shape(example: torch.Tensor, *modules: nn.Module) -> tuple[int, ...]:
    """Shape of one sample's output of ``modules`` run in order on ``example`` ``[1, *input]`` (the client half: the
    activations' shape; the client and the server half: a U-shaped body's output, the tail's input), in eval mode (no
    statistics move), each module back in its mode after."""
    modes = [m.training for m in modules]
    param = next(modules[0].parameters())
    out = example.to(param.device, param.dtype)
    for module in modules:
        out = module.eval()(out)
    for module, mode in zip(modules, modes):
        module.train(mode)
    return tuple(out.shape[1:])


def checked_schedule(method, schedule: Schedule) -> Schedule:
    """``schedule`` checked against ``method``: a handler for each of its step kinds (:func:`step_handler`). Under
    ``client_bank="auto"``, steps that leave clients out run the sequential bank, one client a step gaining nothing
    from stacking, unless they run several clients at once (:func:`batches_partial_steps`: a split method's
    asynchronous arrivals in waves), where ``auto`` decides as for any step
    (:func:`~lightning_sfl.runtime.stacked_bank.make_bank`): ``benchmarks/async_arrivals.py`` measured the stacked
    bank faster there (it moves only the step's slots:
    :meth:`~lightning_sfl.runtime.stacked_bank.StackedBank.steps_only`)."""
    if schedule.partial_steps and method.client_bank == "auto" and not batches_partial_steps(method, schedule):
        method.client_bank = "sequential"
    missing = [k for k in schedule.kinds if step_handler(method, k) is None]
    if missing:
        raise ConfigError(
            f"{type(method).__name__} has no handler for step kind(s) {missing} of {type(schedule).__name__}; "
            f"it handles: {', '.join(method.step_handlers)}"
        )
    return schedule


def batches_partial_steps(method, schedule: Schedule) -> bool:
    """Whether ``schedule``'s steps that leave clients out still run several clients at once: the activation arrivals of
    a split method (its shape ``crosses_cut``) batched in waves (``batch_arrivals``); a plain FL method's asynchronous
    uploads, or arrivals one at a time, train one client a step."""
    return bool(getattr(schedule, "batch_arrivals", False)) and method.shape.crosses_cut


def step_handler(method, kind: str):
    """What runs ``method``'s steps of ``kind``: the method named in its ``step_handlers`` (``None`` there: nothing
    to run), else a step its defences added (the inversion regulariser's warm-up, handed the global client half);
    ``None`` if none does."""
    if kind in method.step_handlers:
        name = method.step_handlers[kind]
        return (lambda step: None) if name is None else getattr(method, name, None)
    handler = method.defences.step_handler(kind)
    return None if handler is None else (lambda step: handler(step, method.client))
