"""SCALA-PE's simulated-inversion regulariser (SCALA journal §5.7, eq. 17; ResSFL, Li et al., CVPR 2022) as a defence
of every synchronous split method (``--model.defences+=InversionRegulariser``). SCALA-PE
(:mod:`~lightning_sfl.algorithms.scala_pe`) is SCALA with it and a bottleneck by default; its docstring gives the
sources and the departures.

Each client ``k`` owns a simulated inversion model ``w_v,k``
(:func:`~lightning_sfl.privacy.inversion.inversion_decoder`, ``width`` channels) and its objective becomes eq. 17,

    ``f_k(w_c) = l(w_s; h(w_c; D̃_k)) + γ·R(L(w_v,k; h(w_c; D̃_k)), D̃_k)``:

on top of what the method's clients backpropagate, each adds ``γ·R_k`` on its own activations (a term over rows of
the clients' extra terms, :func:`~lightning_sfl.runtime.iteration.client_side_terms`; the server never sees
``R``). ``R_k`` (:func:`~lightning_sfl.privacy.metrics.regulariser`): ``max(mean SSIM(x̂, x) − τ, 0)`` (ResSFL's
hinge) or ``−mean MSE(x̂, x)``, ``x`` the input de-normalised to ``[0, 1]``, ``x̂ = L(w_v,k; A_k)`` with the decoder in
eval mode and not updated by this term. Every ``every`` local iterations (before the client steps) each client's
decoder takes one Adam step on ``−mean SSIM`` (or ``mean MSE``) of ``L(w_v,k; A_k.detach())``; before a client's first
local iteration its decoder is pre-trained ``warmup_epochs`` passes of MSE over its shard
(:class:`~lightning_sfl.loop.warmup.WarmupRounds`). The decoders never leave their clients: no bytes in the ledger, no
simulated time; they live, with their BatchNorm statistics and Adam moments, in per-client stores of this defence
(:mod:`~lightning_sfl.client_store`: rows for the clients that have trained, the template's initial
decoder for the others; checkpointed incrementally under ``defences.inversion.``).

Needs synchronous rounds on one process, and clients that upload ``h`` of the half they download (SplitFedV3's keep
their own halves); the asynchronous and local-epoch schedules refuse it.
"""

from __future__ import annotations

import torch
from typing_extensions import override

from lightning_sfl.client_store import ClientStore, make_store
from lightning_sfl.defences.base import Defence
from lightning_sfl.errors import ConfigError, whole_number
from lightning_sfl.loop import SyncRounds
from lightning_sfl.loop.warmup import WarmupRounds
from lightning_sfl.privacy.inversion import FlatModule, adam_update, inversion_decoder
from lightning_sfl.privacy.metrics import REGULARISERS, images_from_inputs, mse_per_image, regulariser, ssim_per_image

__all__ = ["InversionRegulariser"]

OPTIMIZER_STATES = ("kept", "reset")
#: The per-client stores, ``[K, ·]``: decoder weights ``[K, P]`` and BatchNorm statistics ``[K, Q]``, Adam's moments
#: ``[K, P]`` and step counts ``[K]``.
STATES = ("weights", "statistics", "exp_avg", "exp_avg_sq", "steps")


def _invalid(message: str) -> ConfigError:
    return ConfigError(f"InversionRegulariser: {message}")


class InversionRegulariser(Defence):
    """The simulated-inversion regulariser (see the module docstring).

    Args:
        gamma: ``γ >= 0`` of eq. 17 (ResSFL's ``λ``: 0.3); at 0 the decoders are still simulated.
        threshold: ``τ`` in ``[0, 1]``, the SSIM hinge ``R = max(SSIM − τ, 0)`` (ResSFL: 0.5).
        regulariser: ``ssim`` (the hinge) or ``mse`` (``R = −MSE``); also the decoders' objective.
        width: channels of the simulated inversion models (the paper: 16).
        lr: Adam learning rate of the decoders (ResSFL: ``1e-3``).
        every: local iterations between decoder steps (ResSFL's ``interval``: 1, or 5 with many clients).
        optimizer_state: ``kept`` (each client's Adam moments persist across rounds, as in ResSFL) or ``reset`` (they
            restart whenever the client is selected).
        warmup_epochs: passes of MSE pre-training of a client's decoder over its shard before its first local
            iteration (ResSFL: 30); ``0``: none.
        warmup_batch_size: rows per warm-up step (ResSFL: 32).
    """

    key = "inversion"
    per_client_states = STATES  # stores, not buffers: loaded from a checkpoint's records (or old [K, ·] tensors)
    goes_back_through_activations = True  # R_k goes back through the activations after G_k did

    def __init__(
        self,
        gamma: float = 0.3,
        threshold: float = 0.5,
        regulariser: str = "ssim",
        width: int = 16,
        lr: float = 1e-3,
        every: int = 1,
        optimizer_state: str = "kept",
        warmup_epochs: int = 30,
        warmup_batch_size: int = 32,
    ) -> None:
        super().__init__()
        if isinstance(gamma, bool) or not isinstance(gamma, int | float) or not gamma >= 0:
            raise _invalid(f"gamma={gamma!r} (γ of eq. 17) must be a number >= 0")
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
            raise _invalid(f"threshold={threshold!r} (τ of the SSIM hinge) must be in [0, 1]")
        if isinstance(lr, bool) or not isinstance(lr, int | float) or not lr > 0:
            raise _invalid(f"lr={lr!r} (the decoders') must be > 0")
        if regulariser not in REGULARISERS:
            raise _invalid(f"regulariser={regulariser!r} must be one of: {', '.join(REGULARISERS)}")
        if optimizer_state not in OPTIMIZER_STATES:
            raise _invalid(f"optimizer_state={optimizer_state!r} must be one of: {', '.join(OPTIMIZER_STATES)}")
        self.gamma, self.threshold, self.regulariser, self.lr = float(gamma), float(threshold), regulariser, float(lr)
        self.width = whole_number("InversionRegulariser: width", width)
        self.every = whole_number("InversionRegulariser: every", every)
        self.optimizer_state = optimizer_state
        self.warmup_epochs = whole_number("InversionRegulariser: warmup_epochs", warmup_epochs, low=0)
        self.warmup_batch_size = whole_number("InversionRegulariser: warmup_batch_size", warmup_batch_size)
        self._warmup_adam: dict[int, list] = {}  # client -> [exp_avg, exp_avg_sq, steps] of its warm-up (one round)
        self._iteration = 0
        self._last_step_index: int | None = None

    # ------------------------------------------------------------------ construction, schedule, setup, round start
    @override
    def attach(self, method, client, input_shape, keeps_client_halves):
        if keeps_client_halves:
            raise ConfigError(
                f"InversionRegulariser needs a split method whose clients upload h(w_c; X) of the half they "
                f"download; {method}'s clients keep their own halves"
            )
        with torch.no_grad():
            act = client.eval()(torch.zeros(1, *input_shape)).shape[1:]
        client.train()
        # the template of every client's decoder w_v,k (its weights: their common initialisation)
        self.decoder = inversion_decoder(tuple(act), tuple(input_shape), self.width).requires_grad_(False)
        self._flat = FlatModule(self.decoder)

    @override
    def configure_schedule(self, schedule, method, local_iters, selection):
        """``schedule`` with the decoders' warm-up before each client's first local iteration (if any); only plain
        synchronous rounds take the regulariser."""
        if type(schedule) is not SyncRounds:
            raise ConfigError(f"InversionRegulariser needs synchronous rounds; {method} runs {type(schedule).__name__}")
        if self.warmup_epochs == 0:
            return schedule
        return WarmupRounds(local_iters, selection, self.warmup_epochs, self.warmup_batch_size)

    @override
    def step_handlers(self):
        return {"warmup": self.warm_up}

    @override
    def setup(self, federation, rank):
        """The per-client tensors (``K`` rows: every client's decoder starts as the template) and the
        de-normalisation of the inputs (``x = x_norm·std + mean``)."""
        k = federation.stats.num_clients
        weights = self._flat.flat_parameters()
        device = weights.device
        initial = {
            "weights": weights,
            "statistics": self._flat.flat_buffers(),
            "exp_avg": torch.zeros_like(weights),
            "exp_avg_sq": torch.zeros_like(weights),
            "steps": torch.zeros((), dtype=torch.long, device=device),
        }
        for name, value in initial.items():  # a second fit, or a restored run, keeps what it holds
            make_store(self, name, k, value)
        data = federation.data
        self.register_buffer("pixel_mean", torch.tensor(data.pixel_mean).view(-1, 1, 1).to(device), persistent=False)
        self.register_buffer("pixel_std", torch.tensor(data.pixel_std).view(-1, 1, 1).to(device), persistent=False)

    @override
    def _apply(self, fn, recurse: bool = True):
        super()._apply(fn, recurse)
        for name in STATES:
            if isinstance(getattr(self, name, None), ClientStore):
                getattr(self, name).apply(fn)
        return self

    @override
    def start_round(self, step):
        """A fresh count of local iterations; with ``optimizer_state="reset"`` the round's clients' decoders restart
        their Adam moments."""
        self._warmup_adam.clear()
        self._iteration = 0  # local iterations of the round so far (the decoders step on every `every`-th)
        self._last_step_index = None
        if self.optimizer_state == "reset":
            for state in (self.exp_avg, self.exp_avg_sq, self.steps):
                state[step.clients] = 0  # a store's rows: written, not changed in place

    @override
    def one_process_only(self):
        """Its decoders' BatchNorm statistics and per-client SSIM means are not synchronised."""
        return "the inversion regulariser"

    def images(self, x: torch.Tensor) -> torch.Tensor:
        """The inputs ``[B, C, H, W]`` de-normalised and clamped to ``[0, 1]`` (what an attacker reconstructs)."""
        return images_from_inputs(x, self.pixel_mean, self.pixel_std)

    # ------------------------------------------------------------------ the clients' term and the decoders' steps
    @override
    def client_terms(self, step, sent, log):
        """``(γ·Σ_k R_k, None)`` (eq. 17) on the activations ``sent`` ``[B, *act]`` (the decoders first take their
        step if this local iteration of the round is one of every ``every``, from the first)."""
        x = self.images(step.x)
        chunks = list(zip(step.clients.tolist(), sent.split(step.sizes.tolist()), x.split(step.sizes.tolist())))
        if step.index != self._last_step_index:  # one count per local iteration (SplitFedV2 calls once per client)
            self._iteration += 1
            self._last_step_index = step.index
        if (self._iteration - 1) % self.every == 0:
            for k, a, xk in chunks:
                if len(a):
                    self.train_decoder(k, a.detach(), xk)
        decoded = torch.cat([self._flat(self.weights[k], self.statistics[k], a, train=False) for k, a, _ in chunks])
        r = regulariser(decoded, x, step.owner, len(step.clients), self.regulariser, self.threshold)
        log("train/inversion_ssim", ssim_per_image(decoded.detach(), x).mean())
        log("train/inversion_reg", r.detach().sum())
        return self.gamma * r.sum(), None

    def warm_up(self, step, client) -> None:
        """Handler of ``"warmup"`` steps: one Adam step (moments of the warm-up's own, as ResSFL's separate
        pre-training optimiser) on the mean MSE of each warming client's decoder, on the pairs ``(A, x)`` of its rows
        with ``A`` from the global client half ``client``, the one the round's clients received."""
        with torch.no_grad():
            acts = client(step.x)
        x = self.images(step.x)
        sizes = step.sizes.tolist()
        for k, a, xk in zip(step.clients.tolist(), acts.split(sizes), x.split(sizes)):
            if not len(a):
                continue
            if k not in self._warmup_adam:
                zeros = torch.zeros_like(self.weights[k])
                self._warmup_adam[k] = [zeros, zeros.clone(), 0]
            adam = self._warmup_adam[k]
            adam[2] += 1
            self.decoder_step(k, a, xk, "mse", adam[0], adam[1], adam[2])

    def train_decoder(self, k: int, a: torch.Tensor, x: torch.Tensor) -> None:
        """One Adam step of client ``k``'s decoder on ``−mean SSIM`` (or ``mean MSE``) of its reconstructions of the
        images ``x`` ``[B_k, C, H, W]`` from the activations ``a`` ``[B_k, *act]``, with the client's stored moments."""
        steps, exp_avg, exp_avg_sq = self.steps[k] + 1, self.exp_avg[k], self.exp_avg_sq[k]
        self.decoder_step(k, a, x, self.regulariser, exp_avg, exp_avg_sq, int(steps))
        self.steps[k], self.exp_avg[k], self.exp_avg_sq[k] = steps, exp_avg, exp_avg_sq

    def decoder_step(
        self, k: int, a: torch.Tensor, x: torch.Tensor, objective: str, exp_avg, exp_avg_sq, t: int
    ) -> None:
        """One Adam step (step number ``t``, moments ``exp_avg``/``exp_avg_sq`` updated in place) of client ``k``'s
        decoder (BatchNorm in train mode) on ``−mean SSIM`` (``objective="ssim"``) or ``mean MSE`` of ``L(w_v,k; a)``
        against ``x``."""
        weights, statistics = self.weights[k], self.statistics[k]  # the client's rows (copies: written back below)
        params = weights.clone().requires_grad_(True)
        with torch.enable_grad():
            x_hat = self._flat(params, statistics, a, train=True)  # BatchNorm updates `statistics` in place
            loss = -ssim_per_image(x_hat, x).mean() if objective == "ssim" else mse_per_image(x_hat, x).mean()
            (grad,) = torch.autograd.grad(loss, params)
        adam_update(weights, grad, exp_avg, exp_avg_sq, t, self.lr)
        self.weights[k], self.statistics[k] = weights, statistics
