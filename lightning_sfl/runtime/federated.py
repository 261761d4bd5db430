"""What a method takes from, and gives to, the fit's :class:`~lightning_sfl.loop.Federation`, as functions
:class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm` calls: the federation checked against the method, its entry
of a checkpoint, and what the system model needs of the method (the costs of its client model)."""

from __future__ import annotations

import functools

import torch

from lightning_sfl import trainer_view
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Federation, Schedule
from lightning_sfl.loop.federation import legacy_federation_state
from lightning_sfl.system.timing import ClientCosts

__all__ = [
    "activation_shape",
    "batches_partial_steps",
    "body_output_shape",
    "checked_federation",
    "checked_schedule",
    "client_costs",
    "load_federation_entry",
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


def save_federation_entry(method, checkpoint: dict) -> None:
    """The federation's part of ``checkpoint`` (the schedule's state, the system model's draws, the simulated time),
    under ``checkpoint["lightning_sfl"]["federation"]``; the other parts' keys stay."""
    if method.federation is not None:
        checkpoint.setdefault("lightning_sfl", {})["federation"] = method.federation.state_dict()


def load_federation_entry(method, checkpoint: dict) -> None:
    """A fit resumed from ``checkpoint`` continues its federation's state (also from checkpoints written before the
    federation existed, :func:`~lightning_sfl.loop.federation.legacy_federation_state`)."""
    if method.federation is None or not trainer_view.is_fitting(method._trainer):
        return
    state = (checkpoint.get("lightning_sfl") or {}).get("federation")
    method.federation.load_state_dict(state if state is not None else legacy_federation_state(checkpoint))


def client_costs(method) -> ClientCosts:
    """What ``method``'s client-side model costs per sample, for the system model (measured when it asks)."""
    hp = method.hparams
    shape = tuple(hp.input_shape)
    return ClientCosts(
        method.client.net,
        shape,
        method.shape.crosses_cut,
        activation_shape=functools.partial(activation_shape, method),
        cut_model=method.model_source.build,  # (picklable: ddp_spawn)
        cut_options=method.split_options() or [hp.split_point],
        nominal_cut=hp.split_point,
        tail=method.shape.tail_for_costs(),
        tail_input_shape=functools.partial(body_output_shape, method),
    )


@torch.no_grad()
def body_output_shape(method) -> tuple[int, ...]:
    """Shape of one sample's output of ``method``'s global body (U-shaped: the tail's input), in eval mode."""
    was_training = method.training
    method.eval()
    param = next(method.client.parameters())
    out = method.server(method.client(method.example_input_array.to(param.device, param.dtype)))
    method.train(was_training)
    return tuple(out.shape[1:])


@torch.no_grad()
def activation_shape(method) -> tuple[int, ...]:
    """Shape of one sample's output of ``method``'s global client model (on its ``example_input_array``, in eval mode:
    no statistics move)."""
    client, example = method.client, method.example_input_array
    param = next(client.parameters())
    was_training = client.training
    client.eval()
    out = client(example.to(param.device, param.dtype))
    client.train(was_training)
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
