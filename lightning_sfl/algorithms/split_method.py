"""The base of the split methods whose clients upload ``h(w_c; X)`` of the half they download: the base plus the hooks
of the split iteration (hooks 1-4 of SCALA's Algorithm 2, run by
:func:`~lightning_sfl.runtime.iteration.split_iteration`: the upload, the server forward, the server's and the
clients' losses) and the clients' defences
(:mod:`lightning_sfl.defences`), which plain FL methods and the semi-supervised ones do not have.

The documentation's :doc:`/architecture` tabulates the hooks with their paper steps, defaults and who overrides each."""

from __future__ import annotations

from typing import ClassVar

import torch
from typing_extensions import override

from lightning_sfl.algorithms.base import SplitFedAlgorithm
from lightning_sfl.defences import Defence
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Step
from lightning_sfl.losses import sum_of_client_means
from lightning_sfl.runtime.guards import check_finite

__all__ = ["SplitMethod"]


class SplitMethod(SplitFedAlgorithm):
    """A split method (see the module docstring).

    Args:
        defences: the clients' defences, in order (:mod:`lightning_sfl.defences`: ``NoPeek``, ``ActivationNoise``,
            ``Bottleneck``, ``InversionRegulariser``), e.g. ``--model.defences+=NoPeek --model.defences.weight=10``;
            ``None``: the method's own (:meth:`default_defences`: none; SCALA-PE a bottleneck and the regulariser), so
            that a config written for one method and run with another keeps each method's default; ``[]``: none.
        tail_aggregation: U-shaped: who averages the clients' tails after each round. ``server`` (default): the same
            server that holds the body, which therefore knows the tail (the known-tail attack); ``separate``: an
            aggregator of their own, the same average, which the body's server never sees (in the simulation the
            server-side code is never handed a tail); ``none``: each client keeps its own tail across rounds (a
            per-client store; the evaluated tail is their ``|D_k|``-weighted mean, as SplitFedV3's client halves).
        tail_point: U-shaped split learning (:mod:`~lightning_sfl.runtime.u_shape`): a second cut point, deeper
            than ``split_point``; the layers from it on (the tail) stay with the clients, which compute the loss, so
            that the labels never leave them; the server holds the layers between the cuts (the body). ``None``
            (default): the server holds every layer from ``split_point`` on. Methods whose step is not the plain
            split iteration refuse it (:attr:`supports_tail`).
        **kwargs: the options of :class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm`.
    """

    #: True if the clients keep their own client halves across rounds (SplitFedV3): what they upload is not ``h`` of
    #: the global half, so the inversion regulariser and SplitGuard's probe refuse the method.
    keeps_client_halves: ClassVar[bool] = False
    #: False if the server does not answer an upload of ``h(w_c; X)`` with the gradient of its loss, which SplitGuard
    #: probes: SFLLocalLoss (no gradient crosses the cut), the semi-supervised methods (two views uploaded).
    answers_with_gradients: ClassVar[bool] = True
    #: False if the method cannot run U-shaped (``tail_point``): its step is not the split iteration of
    #: :mod:`~lightning_sfl.runtime.u_shape` (the asynchronous methods, FSHA, S²FL's sliding cut, SCALA-PE's
    #: decoders, SFLLocalLoss's local loss) or its clients keep their own halves (SplitFedV3).
    supports_tail: ClassVar[bool] = True

    def __init__(
        self,
        defences: list[Defence] | None = None,
        tail_point: str | None = None,
        tail_aggregation: str = "server",
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.tail_aggregation = tail_aggregation
        split_point = self.hparams.split_point
        self.shape = self.shape.with_tail(self, self.model_source, split_point, tail_point, tail_aggregation)
        self.tail = self.shape.tail
        self.shape.defend(self, defences, self.default_defences())
        self.shape.compress(self, self._compression_given)  # (the shape is final now: U-shaped or not)

    def body_prior(self, step: Step) -> torch.Tensor | None:
        """U-shaped: the label distribution of the body's own objective, which the clients then compute for it from
        their tails (:mod:`~lightning_sfl.runtime.u_shape`); ``None``: the body trains on the clients' losses."""
        return None

    def split_step(self, step: Step, count_step: bool = True) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """One split iteration of ``step``'s clients, the shape's:
        :func:`~lightning_sfl.runtime.iteration.split_iteration`, or U-shaped
        :func:`~lightning_sfl.runtime.u_shape.u_shaped_iteration`."""
        return self.shape.iteration(self, step, count_step)

    @classmethod
    def default_defences(cls) -> list[Defence]:
        """The defences when ``defences`` is not given: none here."""
        return []

    # ------------------------------------------------------------------ one split iteration (hooks 1-4)
    @override
    def give_compression(self, compression: list | None) -> None:
        """Kept until the shape is final (U-shaped runs have crossings of their own): given at the end of the split
        method's constructor."""
        self._compression_given = compression

    def client_forward(self, step: Step) -> torch.Tensor:
        """Hook 1: ``A = concat_k h(w_{c,k}; X_k)``, ``[B, *act]`` (each slot on its own rows)."""
        return self.bank(step.x, step.local_sizes, step.slots)

    def server_forward(self, a: torch.Tensor, step: Step) -> torch.Tensor:
        """Hook 2: logits ``[B, N]`` of the server half (or of each client's server copy) on activations ``a``; a probe
        step gets the global server half (:meth:`~lightning_sfl.runtime.shape.Split.server_forward`)."""
        return self.shape.server_forward(self.server, self.server_bank, a, step)

    def server_prior(self, step: Step) -> torch.Tensor | None:
        """Label distribution added (as ``log``) to the logits of the server loss; ``None``: plain CE."""
        return None

    def client_prior(self, step: Step) -> torch.Tensor | None:
        """Label distribution added (as ``log``) to the logits of the clients' loss; ``None``: plain CE."""
        return None

    def server_loss(self, logits: torch.Tensor, step: Step) -> torch.Tensor:
        """Hook 3, the loss whose gradient updates ``w_s`` (eq. 7): the mean over the concatenated batch (on a DDP
        shard, its sum over the global ``B``), or with server copies the sum over copies of each one's mean
        (:meth:`~lightning_sfl.runtime.shape.Split.server_mean`)."""
        return self.shape.server_mean(self, logits, step, self.server_prior(step))

    def client_loss(self, logits: torch.Tensor, step: Step) -> torch.Tensor | None:
        """Hook 4, the loss whose gradient w.r.t. the activations is sent to the clients (eq. 8): each client's
        mean over its own ``B_k`` rows, summed over clients. ``None``: no gradient is sent."""
        return sum_of_client_means(self.cross_entropy(logits, step.y, self.client_prior(step)), step.owner, step.sizes)

    def send_activations(self, step: Step) -> tuple[torch.Tensor, torch.Tensor]:
        """Hook 1 and the upload: the clients' activations ``[B, *act]`` (through the defences; counted up with the
        labels) and a detached copy that requires a gradient, for the server (``∂/∂`` it gives ``G_k``)."""
        acts = self.defences.upload(self.client_forward(step), self.defences.training_noise(step))
        acts, encoded = self.compression.compress("activations", acts, self.step_seed(step), step.local_sizes)
        self.ledger.add_rows("up", "activations", acts, step.sizes, step.slots, encoded)
        self.shape.upload_labels(self.ledger, step)  # (U-shaped, the labels stay with the clients)
        return acts, acts.detach().requires_grad_(True)

    def split_losses(
        self, acts: torch.Tensor, a: torch.Tensor, step: Step
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Hooks 2-4 on the server's copy ``a`` of the activations ``acts``: the server forward, the NaN/Inf guard of
        activations and logits, then the server loss and the clients' loss, both from this (pre-update) forward."""
        logits = self.server_forward(a, step)
        check_finite(step, ("activations", acts), ("logits", logits))
        return self.server_loss(logits, step), self.client_loss(logits, step)

    def answer_loss(self, a: torch.Tensor, step: Step) -> torch.Tensor:
        """The loss whose gradient w.r.t. the activations ``a`` the server sends the clients (what SplitGuard probes):
        hook 4 on hook 2; FSHA answers with its critic instead."""
        refusal = self.shape.probe_refusal(type(self).__name__)
        if refusal is not None:
            raise ConfigError(refusal)
        client_loss = self.client_loss(self.server_forward(a, step), step)
        if client_loss is None:
            name = type(self).__name__
            raise ConfigError(f"{name}'s server sends the clients no gradients: SplitGuard cannot probe it")
        return client_loss

    def local_iteration(self, step: Step) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Handler of ``"local"`` steps: one split iteration (hooks 1-6,
        :func:`~lightning_sfl.runtime.iteration.split_iteration`, or U-shaped
        :func:`~lightning_sfl.runtime.u_shape.u_shaped_iteration`)."""
        return self.split_step(step)
