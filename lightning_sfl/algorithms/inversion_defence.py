"""SCALA-PE's simulated-inversion regulariser (SCALA journal §5.7, eq. 17; ResSFL, Li et al., CVPR 2022) as a defence
of every synchronous split method (``--model.inversion_gamma γ > 0``), a mixin of
:class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm`. SCALA-PE (:mod:`~lightning_sfl.algorithms.scala_pe`) is
SCALA with it on by default and a bottleneck at the cut; its docstring gives the sources and the departures.

Each client ``k`` owns a simulated inversion model ``w_v,k`` (:func:`~lightning_sfl.privacy.inversion.
inversion_decoder`, ``inversion_width`` channels) and its objective becomes eq. 17,

    ``f_k(w_c) = l(w_s; h(w_c; D̃_k)) + γ·R(L(w_v,k; h(w_c; D̃_k)), D̃_k)``:

on top of what the method's clients backpropagate, each adds ``γ·R_k`` on its own activations (inside the clients'
extra terms, :func:`~lightning_sfl.algorithms.iteration.client_side_terms`; the server never sees ``R``). ``R_k``
(:func:`~lightning_sfl.privacy.metrics.regulariser`): ``max(mean SSIM(x̂, x) − τ, 0)`` (ResSFL's hinge) or
``−mean MSE(x̂, x)``, ``x`` the input de-normalised to ``[0, 1]``, ``x̂ = L(w_v,k; A_k)`` with the decoder in eval mode
and not updated by this term. Every ``inversion_every`` local iterations (before the client steps) each client's
decoder takes one Adam step on ``−mean SSIM`` (or ``mean MSE``) of ``L(w_v,k; A_k.detach())``; before a client's first
local iteration its decoder is pre-trained ``inversion_warmup_epochs`` passes of MSE over its shard
(:class:`~lightning_sfl.loop.warmup.WarmupRounds`). The decoders never leave their clients: no bytes in the ledger, no
simulated time; they live, with their BatchNorm statistics and Adam moments, in checkpointed ``[K, ·]`` states.

Needs synchronous rounds (the base's schedule) on one process; the asynchronous, local-epoch and semi-supervised
schedules refuse it.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from lightning_sfl.errors import ConfigError, whole_number
from lightning_sfl.loop import Schedule, Step, SyncRounds
from lightning_sfl.loop.warmup import WarmupRounds, WarmupStep
from lightning_sfl.privacy.inversion import FlatModule, adam_update, inversion_decoder
from lightning_sfl.privacy.metrics import REGULARISERS, images_from_inputs, mse_per_image, regulariser, ssim_per_image

__all__ = ["InversionDefence"]

OPTIMIZER_STATES = ("kept", "reset")


class InversionDefence:
    """Mixin: the simulated-inversion regulariser's settings, states and hooks (see the module docstring)."""

    #: ``γ`` when ``inversion_gamma`` is ``None`` (0: off; SCALA-PE 0.3).
    default_inversion_gamma: ClassVar[float] = 0.0
    #: True: the decoders are simulated even at ``γ = 0`` (SCALA-PE: ``γ = 0`` is SCALA with the bottleneck, decoders
    #: and all); False: ``γ = 0`` turns the regulariser off.
    always_simulates_inversion: ClassVar[bool] = False

    def init_inversion(
        self,
        gamma: float | None,
        threshold: float,
        objective: str,
        width: int,
        lr: float,
        every: int,
        optimizer_state: str,
        warmup_epochs: int,
        warmup_batch_size: int,
    ) -> None:
        gamma = self.default_inversion_gamma if gamma is None else gamma
        if isinstance(gamma, bool) or not isinstance(gamma, int | float) or not gamma >= 0:
            raise ConfigError(f"inversion_gamma={gamma!r} (γ of eq. 17) must be a number >= 0")
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
            raise ConfigError(f"inversion_threshold={threshold!r} (τ of the SSIM hinge) must be in [0, 1]")
        if not lr > 0:
            raise ConfigError(f"inversion_lr={lr!r} must be > 0")
        if objective not in REGULARISERS:
            raise ConfigError(f"inversion_regulariser={objective!r} must be one of: {', '.join(REGULARISERS)}")
        if optimizer_state not in OPTIMIZER_STATES:
            raise ConfigError(
                f"inversion_optimizer_state={optimizer_state!r} must be one of: {', '.join(OPTIMIZER_STATES)}"
            )
        self.inversion_every = whole_number("inversion_every", every)
        width = whole_number("inversion_width", width)
        self.inversion_warmup = (  # (epochs, batch size) of the decoders' warm-up
            whole_number("inversion_warmup_epochs", warmup_epochs, low=0),
            whole_number("inversion_warmup_batch_size", warmup_batch_size),
        )
        self.inversion_gamma, self.inversion_threshold = float(gamma), float(threshold)
        self.inversion_objective = objective
        self.inversion_lr, self.inversion_optimizer_state = float(lr), optimizer_state
        self.inversion_on = self.inversion_gamma > 0 or self.always_simulates_inversion
        if not self.inversion_on:
            return
        if not (self.has_server_half and self.supports_activation_defences) or self.keeps_client_halves:
            raise ConfigError(
                f"inversion_gamma={gamma} needs a split method whose clients upload h(w_c; X) of the half they "
                f"download; {type(self).__name__} is not one"
            )
        self.extra_loss_uses_activations = True  # R_k goes back through the activations after G_k did
        shape = tuple(self.hparams.input_shape)
        with torch.no_grad():
            act = self.client.net.eval()(torch.zeros(1, *shape)).shape[1:]
        self.client.net.train()
        # the template of every client's decoder w_v,k (its weights: their common initialisation)
        self.inversion = inversion_decoder(tuple(act), shape, width).requires_grad_(False)
        self._decoder = FlatModule(self.inversion)
        k = lambda: self.client_stats.num_clients  # noqa: E731
        self.add_state("inversion_params", lambda: self._decoder.flat_parameters().repeat(k(), 1))
        self.add_state("inversion_buffers", lambda: self._decoder.flat_buffers().repeat(k(), 1))
        self.add_state("inversion_exp_avg", lambda: torch.zeros_like(self.inversion_params))
        self.add_state("inversion_exp_avg_sq", lambda: torch.zeros_like(self.inversion_params))
        self.add_state("inversion_steps", lambda: torch.zeros(k(), dtype=torch.long))
        self._warmup_adam: dict[int, list] = {}  # client -> [exp_avg, exp_avg_sq, steps] of its warm-up (one round)
        self._iteration = 0
        self._last_step_index: int | None = None

    # ------------------------------------------------------------------ schedule, setup, round start
    def inversion_schedule(self, schedule: Schedule) -> Schedule:
        """``schedule`` with the decoders' warm-up before each client's first local iteration (if any); only plain
        synchronous rounds take the regulariser."""
        if not self.inversion_on:
            return schedule
        if type(schedule) is not SyncRounds:
            raise ConfigError(
                f"inversion_gamma={self.inversion_gamma} needs synchronous rounds; {type(self).__name__} runs "
                f"{type(schedule).__name__}"
            )
        epochs, batch_size = self.inversion_warmup
        return schedule if epochs == 0 else WarmupRounds(self.local_iters, self.selection, epochs, batch_size)

    def one_process_only(self) -> str | None:
        """What of the method runs on one process only (``None``: all of it runs on several); a run of it on more is
        refused before its processes start (the command line) and at ``setup``. Here: the inversion regulariser (its
        decoders' BatchNorm statistics and per-client SSIM means are not synchronised)."""
        return "the inversion regulariser" if self.inversion_on else None

    def setup_inversion(self) -> None:
        """At ``setup("fit")``: the de-normalisation of the inputs (``x = x_norm·std + mean``)."""
        if not self.inversion_on:
            return
        data = self.federation.data
        self.register_buffer("pixel_mean", torch.tensor(data.pixel_mean).view(-1, 1, 1), persistent=False)
        self.register_buffer("pixel_std", torch.tensor(data.pixel_std).view(-1, 1, 1), persistent=False)

    def start_inversion_round(self, step: Step) -> None:
        """At a round's start: a fresh count of local iterations; with ``inversion_optimizer_state="reset"`` the
        round's clients' decoders restart their Adam moments."""
        if not self.inversion_on:
            return
        self._warmup_adam.clear()
        self._iteration = 0  # local iterations of the round so far (the decoders step on every inversion_every-th)
        self._last_step_index = None
        if self.inversion_optimizer_state == "reset":
            for state in (self.inversion_exp_avg, self.inversion_exp_avg_sq, self.inversion_steps):
                state[step.clients] = 0

    def images(self, x: torch.Tensor) -> torch.Tensor:
        """The inputs ``[B, C, H, W]`` de-normalised and clamped to ``[0, 1]`` (what an attacker reconstructs)."""
        return images_from_inputs(x, self.pixel_mean, self.pixel_std)

    # ------------------------------------------------------------------ the clients' term and the decoders' steps
    def inversion_term(self, step: Step, outputs: torch.Tensor) -> torch.Tensor | None:
        """``γ·Σ_k R_k`` (eq. 17) on the activations ``outputs`` ``[B, *act]`` (the decoders first take their step if
        this local iteration of the round is one of every ``inversion_every``, from the first); ``None`` when off."""
        if not self.inversion_on:
            return None
        x = self.images(step.x)
        chunks = list(zip(step.clients.tolist(), outputs.split(step.sizes.tolist()), x.split(step.sizes.tolist())))
        if step.index != self._last_step_index:  # one count per local iteration (SplitFedV2 calls once per client)
            self._iteration += 1
            self._last_step_index = step.index
        if (self._iteration - 1) % self.inversion_every == 0:
            for k, a, xk in chunks:
                if len(a):
                    self.train_decoder(k, a.detach(), xk)
        decoded = torch.cat(
            [self._decoder(self.inversion_params[k], self.inversion_buffers[k], a, train=False) for k, a, _ in chunks]
        )
        r = regulariser(decoded, x, step.owner, len(step.clients), self.inversion_objective, self.inversion_threshold)
        epoch = {"on_step": False, "on_epoch": True, "batch_size": step.num_rows}
        self.log("train/inversion_ssim", ssim_per_image(decoded.detach(), x).mean(), **epoch)
        self.log("train/inversion_reg", r.detach().sum(), **epoch)
        return self.inversion_gamma * r.sum()

    def warm_up_inversion(self, step: WarmupStep) -> None:
        """Handler of ``"warmup"`` steps: one Adam step (moments of the warm-up's own, as ResSFL's separate
        pre-training optimiser) on the mean MSE of each warming client's decoder, on the pairs ``(A, x)`` of its rows
        with ``A`` from the global client half, the one the round's clients received."""
        with torch.no_grad():
            acts = self.client(step.x)
        x = self.images(step.x)
        sizes = step.sizes.tolist()
        for k, a, xk in zip(step.clients.tolist(), acts.split(sizes), x.split(sizes)):
            if not len(a):
                continue
            if k not in self._warmup_adam:
                zeros = torch.zeros_like(self.inversion_params[k])
                self._warmup_adam[k] = [zeros, zeros.clone(), 0]
            adam = self._warmup_adam[k]
            adam[2] += 1
            self.decoder_step(k, a, xk, "mse", adam[0], adam[1], adam[2])

    def train_decoder(self, k: int, a: torch.Tensor, x: torch.Tensor) -> None:
        """One Adam step of client ``k``'s decoder on ``−mean SSIM`` (or ``mean MSE``) of its reconstructions of the
        images ``x`` ``[B_k, C, H, W]`` from the activations ``a`` ``[B_k, *act]``, with the client's stored moments."""
        self.inversion_steps[k] += 1
        moments = (self.inversion_exp_avg[k], self.inversion_exp_avg_sq[k])
        self.decoder_step(k, a, x, self.inversion_objective, *moments, int(self.inversion_steps[k]))

    def decoder_step(
        self, k: int, a: torch.Tensor, x: torch.Tensor, objective: str, exp_avg, exp_avg_sq, t: int
    ) -> None:
        """One Adam step (step number ``t``, moments ``exp_avg``/``exp_avg_sq`` updated in place) of client ``k``'s
        decoder (BatchNorm in train mode) on ``−mean SSIM`` (``objective="ssim"``) or ``mean MSE`` of ``L(w_v,k; a)``
        against ``x``."""
        params = self.inversion_params[k].clone().requires_grad_(True)
        with torch.enable_grad():
            x_hat = self._decoder(params, self.inversion_buffers[k], a, train=True)
            loss = -ssim_per_image(x_hat, x).mean() if objective == "ssim" else mse_per_image(x_hat, x).mean()
            (grad,) = torch.autograd.grad(loss, params)
        adam_update(self.inversion_params[k], grad, exp_avg, exp_avg_sq, t, self.inversion_lr)
