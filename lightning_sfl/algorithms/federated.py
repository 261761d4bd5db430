"""What a method takes from, and gives to, the fit's :class:`~lightning_sfl.loop.Federation`, as functions
:class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm` calls: the federation checked against the method, its entry
of a checkpoint, and what the system model needs of the method (the costs of its client model)."""

from __future__ import annotations

import functools

import torch

from lightning_sfl import trainer_view
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Federation
from lightning_sfl.loop.federation import legacy_federation_state
from lightning_sfl.models import build_model
from lightning_sfl.system.timing import ClientCosts

__all__ = ["activation_shape", "checked_federation", "client_costs", "load_federation_entry", "save_federation_entry"]


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
        method.has_server_half,
        activation_shape=functools.partial(activation_shape, method),
        cut_model=functools.partial(build_model, hp.arch, method.num_classes, shape),  # picklable (ddp_spawn)
        cut_options=method.split_options() or [hp.split_point],
        nominal_cut=hp.split_point,
    )


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
