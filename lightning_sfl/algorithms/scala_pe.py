"""SCALA-PE: privacy-enhanced SCALA (SCALA journal §5.7, Table VI), with ResSFL's two mechanisms (Li et al., CVPR 2022,
public code ``zlijingtao/ResSFL``).

1. **Bottleneck at the cut** (base option ``bottleneck_channels``; 8 here: ``default_bottleneck_channels``): the
   client half ends with ``Conv2d(C → 8, 3, stride 1)`` and the server half starts with ``Conv2d(8 → C, 3, stride 1)``
   (:func:`~lightning_sfl.models.add_bottleneck`); activations ``[B, C, H, W]`` become ``[B, 8, H, W]``.
2. **Simulated inversion model** ``w_v,k`` per client (:func:`~lightning_sfl.privacy.inversion.inversion_decoder`,
   16 channels): the client's objective is eq. 17,

   ``f_k(w_c) = l(w_s; h(w_c; D̃_k)) + γ·R(L(w_v,k; h(w_c; D̃_k)), D̃_k)``,

   i.e. on top of the returned ``G_k`` (SCALA, eq. 15) the client backpropagates ``γ·∂R_k/∂w_c`` through its own
   activations (hook 5, :meth:`client_extra_loss`; the server never sees ``R``). ``R_k`` on the client's batch
   (:func:`~lightning_sfl.privacy.metrics.regulariser`): ``max(mean SSIM(x̂, x) − τ, 0)`` (ResSFL's hinge,
   ``τ = 0.5``, ``γ = 0.3``; the default) or ``−mean MSE(x̂, x)`` (``regulariser="mse"``). ``x`` is the input
   de-normalised to ``[0, 1]``, ``x̂ = L(w_v,k; A_k)`` with the decoder in eval mode and not updated by this term.
   Alternately (every ``inversion_every`` local iterations, before the client steps) each client's decoder takes one
   Adam step (lr ``1e-3``) on ``−mean SSIM`` (or ``mean MSE``) of ``L(w_v,k; A_k.detach())``.

The decoders never leave their clients: not uploaded, not averaged, no bytes in the ledger, no simulated compute time
(the clock charges the client halves' work only). They live, with their BatchNorm statistics and Adam moments, in
checkpointed ``[K, ·]`` states (:meth:`add_state`), so resume is exact; the warm-up's own Adam moments live only within
the round of the warm-up (checkpoints are written at round ends).

Where the paper is silent and ResSFL's code decides (followed here, documented):

* ``γ`` and ``R``: the paper gives neither; ResSFL uses ``λ = 0.3`` and the SSIM hinge at 0.5 (``threshold=0``
  gives the plain ``γ·max(SSIM, 0)``).
* The decoder: ResSFL's ``conv_normN0C16`` (Conv+BN+ReLU, two up/conv blocks, Conv+BN+Sigmoid).
* ResSFL keeps its decoders per *slot* of the round (slot ``i`` serves a different sampled client each epoch); here
  each client ``k`` owns one, as eq. 17's ``f_k`` reads. ResSFL's multi-client runs step the decoder every 5 batches
  (``--optimize_computation 5``); the default here steps it at every local iteration (``inversion_every=1``, ResSFL's
  single-client cadence; with ``T = 5`` a step every 5 iterations trains a decoder once per round), and
  ``inversion_every=5`` gives the multi-client one. Its Adam state is never reset (``"kept"``, the default).
* Where this differs from ResSFL's code: the decoders start from PyTorch's default initialisation, one draw shared by
  every client (ResSFL draws Xavier-uniform weights per decoder); their learning rate stays at ``1e-3`` (ResSFL decays
  it ×0.2 at epochs 60/120/160 of its 200); SSIM pads image borders by reflection (torchmetrics) where ResSFL's
  ``pytorch_ssim`` pads with zeros, so SSIM values on small images are not directly comparable with Table VI's.
* ResSFL pre-trains each decoder before the alternation: 30 epochs of MSE (a fresh Adam, lr ``1e-3``, batch 32) on
  (activation, image) pairs of the current client model. Here (``inversion_warmup_epochs=30``,
  ``inversion_warmup_batch_size=32``) each client does the same on its own shard at the start of the first round it
  takes part in, against the client half it receives (:class:`~lightning_sfl.loop.warmup.WarmupRounds`; ResSFL's
  clients all take part in the first epoch, where the two coincide; ResSFL uses the *test set* for it, a leak not
  copied). Without it (``0``) the online steps alone leave the decoders weak for long: on digits
  (``configs/digits/scala_pe.yaml``, seed 0) the round's mean SSIM of the simulated reconstructions was 0.01 in round
  1 and first above τ = 0.5 in round 25 (above it in 63 of 100 rounds); with it, 0.38 in round 1 and above 0.5 from
  round 3 (in 94 of 100 rounds).
* τ = 0.5 suits images whose undefended reconstructions score a high SSIM (CIFAR-10: 0.93 in Table VI). On MNIST-5k
  even the 64-channel attacker's SSIM is about 0.5 at an MSE of 0.003 (SSIM's luminance term collapses on near-black
  backgrounds that come back faintly grey), the simulated decoders stay near 0.2-0.3, and the hinge never engages: set
  a lower ``threshold`` there (``docs/results/privacy``: 0.1).
* ResSFL computes ``A_k`` for the decoder step with the client half in eval mode; here the step's own activations
  are reused (the same values for halves without BatchNorm or dropout: every model of the zoo but ``resnet18``).

Runs on one process (two would need the decoders' BatchNorm statistics and the per-client SSIM means synchronised).
"""

from __future__ import annotations

import torch

from lightning_sfl.algorithms.async_base import choice
from lightning_sfl.algorithms.registry import register
from lightning_sfl.algorithms.scala import SCALA
from lightning_sfl.errors import ConfigError, whole_number
from lightning_sfl.loop import Step, SyncRounds
from lightning_sfl.loop.warmup import WarmupRounds, WarmupStep
from lightning_sfl.privacy.inversion import FlatModule, adam_update, inversion_decoder
from lightning_sfl.privacy.metrics import REGULARISERS, images_from_inputs, mse_per_image, regulariser, ssim_per_image

__all__ = ["SCALAPE"]

OPTIMIZER_STATES = ("kept", "reset")


@register("scala_pe", family="split", study="privacy")
class SCALAPE(SCALA):
    """SCALA-PE (see the module docstring): SCALA with a bottleneck at the cut and a per-client simulated inversion
    model whose reconstruction quality the clients penalise.

    Args:
        gamma: ``γ >= 0`` of eq. 17 (ResSFL's ``λ``: 0.3).
        threshold: ``τ`` in ``[0, 1]``, the SSIM hinge (ResSFL: 0.5); unused with ``regulariser="mse"``.
        regulariser: ``ssim`` (``R = max(SSIM − τ, 0)``) or ``mse`` (``R = −MSE``); also the decoders' objective.
        inversion_width: channels of the simulated inversion model (the paper: 16).
        inversion_lr: Adam learning rate of the decoders (ResSFL: ``1e-3``).
        inversion_every: local iterations between decoder steps (ResSFL's ``interval``: 1, or 5 with many clients).
        inversion_optimizer_state: ``kept`` (each client's Adam moments persist across rounds, as in ResSFL) or
            ``reset`` (they restart whenever the client is selected, like the client halves' optimiser state).
        inversion_warmup_epochs: passes of MSE pre-training of a client's decoder over its shard before its first
            local iteration (ResSFL: 30); ``0``: none.
        inversion_warmup_batch_size: rows per warm-up step (ResSFL: 32).
        bottleneck_channels: channels at the cut; ``None`` (the default): 8, the paper's; ``0``: no bottleneck.
        **kwargs: see :class:`~lightning_sfl.algorithms.scala.SCALA`.
    """

    extra_loss_uses_activations = True
    default_bottleneck_channels = 8
    step_handlers = {**SCALA.step_handlers, "warmup": "warm_up_inversion"}

    def __init__(
        self,
        gamma: float = 0.3,
        threshold: float = 0.5,
        regulariser: str = "ssim",
        inversion_width: int = 16,
        inversion_lr: float = 1e-3,
        inversion_every: int = 1,
        inversion_optimizer_state: str = "kept",
        inversion_warmup_epochs: int = 30,
        inversion_warmup_batch_size: int = 32,
        **kwargs,
    ) -> None:
        if isinstance(gamma, bool) or not isinstance(gamma, int | float) or not gamma >= 0:
            raise ConfigError(f"gamma={gamma!r} (γ of eq. 17) must be a number >= 0")
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
            raise ConfigError(f"threshold={threshold!r} (τ of the SSIM hinge) must be in [0, 1]")
        if not inversion_lr > 0:
            raise ConfigError(f"inversion_lr={inversion_lr!r} must be > 0")
        inversion_every = whole_number("inversion_every", inversion_every)
        inversion_width = whole_number("inversion_width", inversion_width)
        warmup = (
            whole_number("inversion_warmup_epochs", inversion_warmup_epochs, low=0),
            whole_number("inversion_warmup_batch_size", inversion_warmup_batch_size),
        )
        self.regulariser = choice("regulariser", regulariser, REGULARISERS)
        self.inversion_optimizer_state = choice(
            "inversion_optimizer_state", inversion_optimizer_state, OPTIMIZER_STATES
        )
        super().__init__(**kwargs)
        self.warmup = warmup  # (epochs, batch size) of the decoders' warm-up: configure_schedule
        self.checked_schedule(SCALAPE.configure_schedule(self))  # the settings are checked now (one-line errors)
        self.gamma, self.threshold = float(gamma), float(threshold)
        self.inversion_lr, self.inversion_every = float(inversion_lr), inversion_every
        shape = tuple(self.hparams.input_shape)
        with torch.no_grad():
            act = self.client.net.eval()(torch.zeros(1, *shape)).shape[1:]
        self.client.net.train()
        # the template of every client's decoder w_v,k (its weights: their common initialisation)
        self.inversion = inversion_decoder(tuple(act), shape, inversion_width).requires_grad_(False)
        self._decoder = FlatModule(self.inversion)
        k = lambda: self.client_stats.num_clients  # noqa: E731
        self.add_state("inversion_params", lambda: self._decoder.flat_parameters().repeat(k(), 1))
        self.add_state("inversion_buffers", lambda: self._decoder.flat_buffers().repeat(k(), 1))
        self.add_state("inversion_exp_avg", lambda: torch.zeros_like(self.inversion_params))
        self.add_state("inversion_exp_avg_sq", lambda: torch.zeros_like(self.inversion_params))
        self.add_state("inversion_steps", lambda: torch.zeros(k(), dtype=torch.long))
        self._warmup_adam: dict[int, list] = {}  # client -> [exp_avg, exp_avg_sq, steps] of its warm-up (one round)
        self._iteration = 0

    def configure_schedule(self) -> SyncRounds:
        """SCALA's rounds, with the decoders' warm-up before each client's first local iteration (if any)."""
        epochs, batch_size = self.warmup
        if epochs == 0:
            return super().configure_schedule()
        return WarmupRounds(self.local_iters, self.selection, epochs, batch_size)

    def setup(self, stage: str) -> None:
        if stage == "fit":
            if self.world_size > 1:
                raise ConfigError(f"{type(self).__name__} runs on one process (got {self.world_size})")
            data = self.federation.data  # de-normalisation of the inputs: x = x_norm·std + mean
            self.register_buffer("pixel_mean", torch.tensor(data.pixel_mean).view(-1, 1, 1), persistent=False)
            self.register_buffer("pixel_std", torch.tensor(data.pixel_std).view(-1, 1, 1), persistent=False)
        super().setup(stage)

    def start_round(self, step: Step) -> None:
        """Hook 0 as in SCALA; with ``inversion_optimizer_state="reset"`` the round's clients' decoders restart
        their Adam moments."""
        super().start_round(step)
        self._warmup_adam.clear()
        self._iteration = 0  # local iterations of the round so far (the decoders step on every inversion_every-th)
        if self.inversion_optimizer_state == "reset":
            for state in (self.inversion_exp_avg, self.inversion_exp_avg_sq, self.inversion_steps):
                state[step.clients] = 0

    def images(self, x: torch.Tensor) -> torch.Tensor:
        """The inputs ``[B, C, H, W]`` de-normalised and clamped to ``[0, 1]`` (what an attacker reconstructs)."""
        return images_from_inputs(x, self.pixel_mean, self.pixel_std)

    def client_extra_loss(self, step: Step, outputs: torch.Tensor, features=None) -> torch.Tensor:
        """Hook 5: ``γ·Σ_k R_k`` (eq. 17) on the activations ``outputs`` ``[B, *act]`` (the decoders first take
        their step if this local iteration of the round is one of every ``inversion_every``, from the first)."""
        x = self.images(step.x)
        chunks = list(zip(step.clients.tolist(), outputs.split(step.sizes.tolist()), x.split(step.sizes.tolist())))
        self._iteration += 1
        if (self._iteration - 1) % self.inversion_every == 0:
            for k, a, xk in chunks:
                if len(a):
                    self.train_decoder(k, a.detach(), xk)
        decoded = torch.cat(
            [self._decoder(self.inversion_params[k], self.inversion_buffers[k], a, train=False) for k, a, _ in chunks]
        )
        r = regulariser(decoded, x, step.owner, len(step.clients), self.regulariser, self.threshold)
        self.log("train/inversion_ssim", ssim_per_image(decoded.detach(), x).mean(), **self._epoch(step))
        self.log("train/inversion_reg", r.detach().sum(), **self._epoch(step))
        return self.gamma * r.sum()

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
        self.decoder_step(k, a, x, self.regulariser, *moments, int(self.inversion_steps[k]))

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

    @staticmethod
    def _epoch(step: Step) -> dict:
        return {"on_step": False, "on_epoch": True, "batch_size": step.num_rows}
