"""What a method takes from, and gives to, the fit's :class:`~lightning_sfl.loop.Federation`, as a mixin of
:class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm`: the federation itself (its client statistics and byte
ledger), the ``Federate`` callback that builds and connects it, and what the system model needs of the method (its
default system model, the costs of its client model, the cut points a sliding split may use)."""

from __future__ import annotations

import functools

import lightning as L
import torch
from typing_extensions import override

from lightning_sfl import trainer_view
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import ClientStats, Federate, Federation
from lightning_sfl.loop.federation import legacy_federation_state
from lightning_sfl.models import build_model
from lightning_sfl.system.comm import CommLedger
from lightning_sfl.system.timing import ClientCosts, SystemModel
from lightning_sfl.system.wireless import WirelessCell

__all__ = ["FederationMember"]


class FederationMember:
    """The method's side of the federation (see the module docstring). Needs ``self.federation`` (``None`` until a
    fit starts), ``self.num_classes``, ``self.client`` and the hyperparameters ``arch``, ``split_point``,
    ``input_shape``."""

    @override
    def configure_callbacks(self) -> list[L.Callback]:
        """For a fit, :class:`~lightning_sfl.loop.Federate`: builds (unless given) and connects the fit's federation.
        Nothing for ``validate``/``test`` (they evaluate the global model; the federation is not needed)."""
        fitting = self._trainer is None or trainer_view.is_fitting(self._trainer)
        return [Federate()] if fitting else []

    @override
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """The federation's state (the schedule's, the system model's draws, the simulated time) is saved with the
        method's, under ``checkpoint["lightning_sfl"]["federation"]``."""
        super().on_save_checkpoint(checkpoint)
        if self.federation is not None:
            checkpoint.setdefault("lightning_sfl", {})["federation"] = self.federation.state_dict()

    @override
    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """A fit resumed from ``checkpoint`` continues its federation's state (also from checkpoints written before the
        federation existed, :func:`~lightning_sfl.loop.federation.legacy_federation_state`)."""
        super().on_load_checkpoint(checkpoint)
        fitting = trainer_view.is_fitting(self._trainer)
        if self.federation is None or not fitting:
            return
        state = (checkpoint.get("lightning_sfl") or {}).get("federation")
        self.federation.load_state_dict(state if state is not None else legacy_federation_state(checkpoint))

    def federate(self, federation: Federation) -> None:
        """Receive the fit's federation (:meth:`Federation.build <lightning_sfl.loop.Federation.build>`), checked
        against the method: its data's classes (the schedule's own checks, e.g. Semi-SFL's labelled set, ran in
        ``Federation.build``)."""
        stats = federation.stats
        if stats.num_classes != self.num_classes:
            raise ConfigError(
                f"num_classes={self.num_classes} does not match the dataset's {stats.num_classes} classes"
            )
        self.federation = federation

    @property
    def client_stats(self) -> ClientStats:
        """The federation's client statistics (``|D_k|``, ``n_{k,y}``, ``P_k``, shards, ``S``, ``B``, seed)."""
        return self._federation().stats

    @property
    def ledger(self) -> CommLedger:
        """The federation's byte ledger of the current round."""
        return self._federation().ledger

    def _federation(self) -> Federation:
        if self.federation is None:
            raise RuntimeError(f"{type(self).__name__} has no federation yet: it gets one when a fit starts")
        return self.federation

    def default_system(self) -> SystemModel:
        """The system model of a federation built without one (Python API): SCALA's wireless cell (clients at
        1-5 GFLOP/s; :class:`~lightning_sfl.system.wireless.WirelessCell`). The CLI's is ``--clock.*``."""
        return WirelessCell()

    def split_options(self) -> list[str] | None:
        """The cut points the system model may charge a client (a sliding split, S²FL); ``None``: ``split_point``."""
        return None

    def client_costs(self) -> ClientCosts:
        """What the client-side model costs per sample, for the system model (measured when it asks)."""
        hp = self.hparams
        shape = tuple(hp.input_shape)
        return ClientCosts(
            self.client.net,
            shape,
            self.has_server_half,
            activation_shape=self.activation_shape,
            cut_model=functools.partial(build_model, hp.arch, self.num_classes, shape),  # picklable (ddp_spawn)
            cut_options=self.split_options() or [hp.split_point],
            nominal_cut=hp.split_point,
        )

    @torch.no_grad()
    def activation_shape(self) -> tuple[int, ...]:
        """Shape of one sample's output of the client model (the global one in eval mode: no statistics move)."""
        param = next(self.client.parameters())
        was_training = self.client.training
        self.client.eval()
        out = self.client(self.example_input_array.to(param.device, param.dtype))
        self.client.train(was_training)
        return tuple(out.shape[1:])
