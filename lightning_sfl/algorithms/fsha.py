"""FSHA, feature-space hijacking (Pasquini, Ateniese and Bernaschi, "Unleashing the Tiger: Inference Attacks on Split
Learning", CCS 2021): a malicious server that never trains the task. It steers the clients' feature space onto the
latent space of an autoencoder it trains on public data of the same domain, then inverts the clients' activations.
The three losses below are the paper's setup-phase objectives in the form the authors' code (``FSHA.py``) computes
them; the code's WGAN-GP critic is the default (its BCE variant is not built).

The server holds public images ``X_pub`` (``public_size`` test images: the authors' code uses MNIST's test split as
public and its training split as private) and three networks: a pilot encoder ``f̃`` (the client half's architecture,
freshly initialised: the same output shape), a decoder ``f̃⁻¹``
(:func:`~lightning_sfl.privacy.inversion.inversion_decoder`) and a discriminator ``D`` on the feature space. Every split
iteration, with the clients' private rows ``X_p`` (activations ``Z = f(X_p)``) and as many public rows:

1. the gradient sent to the clients is ``∂/∂Z`` of ``Σ_k mean_{rows of k} D(Z)``: the clients step toward where ``D``
   scores public features (the task loss is never used, so the task does not improve: SplitGuard's cue);
2. ``f̃, f̃⁻¹`` take an Adam step on ``MSE(f̃⁻¹(f̃(X_pub)), X_pub)`` (pixels in ``[0, 1]``);
3. ``D`` takes an Adam step on WGAN-GP's ``mean D(f̃(X_pub)) − mean D(Z) + λ·mean (‖∇D(Ẑ)‖ − 1)²`` on random
   interpolations ``Ẑ`` (the code's default; its norm is over the spatial axes only, here over all of a row's).

In SFL every client of a round gets the hijacking gradient, ``D`` sees the round's pooled activations and one pilot
and decoder serve all clients; averaging the client halves keeps the hijack. After every round the attack is scored
on ``scored_images`` fixed private training images: ``X̂ = f̃⁻¹(f(X))`` with the global client half, MSE and SSIM on
``[0, 1]`` (``fsha/mse``, ``fsha/ssim``). The networks and their Adam states are checkpointed (exact resume).

Departures: the code trains the client with Adam (lr ``1e-5``) for 10,000 iterations; here the clients use Adam too
(``client_optimizer``; ``"sgd"``: the method's SGD) at ``--model.lr`` (``configs/digits/fsha.yaml``: ``1e-4``), and the
server's networks default to Adam ``1e-3`` (``attack_lr``, ``1e-4`` for ``D``) so that a few hundred iterations show
the hijack; the code's ``1e-5``/``1e-4`` are an option. The code's pilot and
decoder are strided (transposed) convolutions without activations; the pilot here is the client's architecture, the
decoder the library's inversion decoder.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from typing_extensions import override

from lightning_sfl.algorithms.registry import register
from lightning_sfl.algorithms.split_method import SplitMethod
from lightning_sfl.errors import ConfigError, whole_number
from lightning_sfl.loop import Step
from lightning_sfl.loop.sampling import round_generator
from lightning_sfl.losses import sum_of_client_means
from lightning_sfl.privacy.hijacking import feature_discriminator, gradient_penalty
from lightning_sfl.privacy.metrics import images_from_inputs
from lightning_sfl.runtime.guards import check_finite
from lightning_sfl.runtime.iteration import split_iteration

__all__ = ["FSHA"]

_PUBLIC_STREAM, _SCORED_STREAM = 31, 32


@register("fsha", family="attack")
class FSHA(SplitMethod):
    """Feature-space hijacking by the server (see the module docstring).

    Args:
        public_size: test images the server holds as public data ``X_pub``.
        scored_images: private training images the attack is scored on after every round.
        attack_lr: Adam's learning rate of the pilot and the decoder (the code: ``1e-5``).
        discriminator_lr: Adam's learning rate of ``D`` (the code: ``1e-4``).
        penalty: ``λ`` of the gradient penalty (the code: 500).
        width: channels of the decoder and the discriminator.
        client_optimizer: the clients' optimiser: ``"adam"`` (the authors' code; ``momentum``, ``weight_decay`` and
            ``nesterov``, SGD's, are then refused) or ``"sgd"`` (the base's SGD, with its momentum and weight decay).
        **kwargs: the base's (``lr``: the clients' learning rate, under either optimiser).
    """

    supports_tail = False  # the server answers with its own critic

    step_handlers = {"local": "local_iteration", "aggregate": None}

    def __init__(
        self,
        public_size: int = 1000,
        scored_images: int = 256,
        attack_lr: float = 1e-3,
        discriminator_lr: float = 1e-4,
        penalty: float = 500.0,
        width: int = 64,
        client_optimizer: str = "adam",
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if client_optimizer not in ("adam", "sgd"):
            raise ConfigError(f"client_optimizer={client_optimizer!r} must be one of: adam, sgd")
        if client_optimizer == "adam":  # Adam at lr: SGD's settings would change nothing
            for name in ("momentum", "weight_decay"):
                if self.hparams[name] != 0:
                    raise ConfigError(
                        f"{name}={self.hparams[name]!r} is an SGD setting: FSHA's clients use Adam "
                        "(client_optimizer='sgd' for the base's SGD)"
                    )
        self.client_optimizer = client_optimizer
        self.public_size = whole_number("public_size", public_size)
        self.scored_images = whole_number("scored_images", scored_images)
        for name, value in (("attack_lr", attack_lr), ("discriminator_lr", discriminator_lr), ("penalty", penalty)):
            if not value > 0:
                raise ConfigError(f"{name}={value!r} must be > 0")
        self.attack_lr, self.discriminator_lr, self.penalty = float(attack_lr), float(discriminator_lr), float(penalty)
        input_shape = tuple(self.example_input_array.shape[1:])
        with torch.no_grad():
            act_shape = tuple(self.client.net(torch.zeros(1, *input_shape)).shape[1:])
        if len(act_shape) != 3:
            raise ConfigError(f"FSHA needs a convolutional cut ([C, H, W] activations), got {list(act_shape)}")
        from lightning_sfl.privacy.inversion import inversion_decoder

        self.pilot = copy.deepcopy(self.client.net)
        for layer in self.pilot.modules():  # the client's architecture, not its weights
            if hasattr(layer, "reset_parameters"):
                layer.reset_parameters()
        self.decoder = inversion_decoder(act_shape, input_shape, whole_number("width", width))
        self.discriminator = feature_discriminator(act_shape, width)
        self._attack_optimizers: dict[str, torch.optim.Optimizer] | None = None
        self._restored_optimizers: dict | None = None

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        """The clients' optimiser: Adam (the authors' code) unless ``client_optimizer="sgd"`` (the base's SGD)."""
        if self.client_optimizer == "sgd":
            return super().configure_optimizers()
        return torch.optim.Adam([{"params": self._slot_parameters(), "name": "client_slots"}], lr=self.lr)

    @override
    def one_process_only(self) -> str | None:
        """The server's autoencoder and critic train in one process."""
        return "FSHA"

    # ------------------------------------------------------------------ the server's own networks
    def attack_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Adam for ``f̃`` with ``f̃⁻¹`` and for ``D`` (made on first use; restored from a checkpoint)."""
        if self._attack_optimizers is None:
            autoencoder = [*self.pilot.parameters(), *self.decoder.parameters()]
            self._attack_optimizers = {
                "autoencoder": torch.optim.Adam(autoencoder, lr=self.attack_lr),
                "discriminator": torch.optim.Adam(self.discriminator.parameters(), lr=self.discriminator_lr),
            }
            if self._restored_optimizers is not None:
                for name, opt in self._attack_optimizers.items():
                    opt.load_state_dict(self._restored_optimizers[name])
        return self._attack_optimizers

    def _pixels(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised inputs back to pixels in ``[0, 1]``."""
        data = self._federation().data
        mean, std = (torch.tensor(v).view(-1, 1, 1) for v in (data.pixel_mean, data.pixel_std))
        return images_from_inputs(x, mean, std)

    def public_batch(self, step: Step, rows: int) -> torch.Tensor:
        """``rows`` public images (normalised inputs) for step ``step``, drawn from the first ``public_size`` test
        images by a generator seeded by the run's seed, the round and the step."""
        data = self._federation().data
        pool = min(self.public_size, data.num_test)
        g = round_generator(self.client_stats.seed, step.round * 1_000_003 + step.index, stream=_PUBLIC_STREAM)
        return data.test_inputs(torch.randint(pool, (rows,), generator=g), self.device)

    # ------------------------------------------------------------------ one split iteration
    @override
    def split_losses(self, acts: torch.Tensor, a: torch.Tensor, step: Step) -> tuple[None, torch.Tensor]:
        """No server loss (the task is not trained); the clients' loss is ``Σ_k mean D(Z_k)`` (step 1)."""
        check_finite(step, ("activations", acts))
        return None, self.answer_loss(a, step)

    @override
    def answer_loss(self, a: torch.Tensor, step: Step) -> torch.Tensor:
        """``Σ_k mean_{rows of k} D(Z)``: the critic's score, whatever the labels (what SplitGuard catches)."""
        return sum_of_client_means(self.discriminator(a).squeeze(1), step.owner, step.sizes)

    @override
    def local_iteration(self, step: Step) -> tuple[None, torch.Tensor]:
        """Step 1, the split iteration (the clients step on the critic's gradient), then steps 2 and 3 of the server
        (:meth:`train_attacker`) on the activations that arrived."""
        arrived: list[torch.Tensor] = []
        losses = split_iteration(self, step, on_arrival=arrived.append)
        self.train_attacker(step, arrived[0])
        return losses

    def train_attacker(self, step: Step, a: torch.Tensor) -> None:
        """Steps 2 and 3 on a public batch as large as the step's: the pilot and the decoder (the autoencoder), then the
        critic ``D`` between the pilot's features and the clients' activations ``a`` ``[B, *act]``."""
        opts = self.attack_optimizers()
        x_pub = self.public_batch(step, len(a))
        z_pub = self.pilot(x_pub)
        reconstruction = F.mse_loss(self.decoder(z_pub), self._pixels(x_pub))
        opts["autoencoder"].zero_grad()
        reconstruction.backward()
        opts["autoencoder"].step()
        fake, real = z_pub.detach(), a.detach()
        g = round_generator(self.client_stats.seed, step.round * 1_000_003 + step.index, stream=_PUBLIC_STREAM + 100)
        d_loss = self.discriminator(fake).mean() - self.discriminator(real).mean()
        d_loss = d_loss + self.penalty * gradient_penalty(self.discriminator, fake, real, g)
        opts["discriminator"].zero_grad()
        d_loss.backward()
        opts["discriminator"].step()
        size = len(a)
        self.log("fsha/autoencoder_mse", reconstruction.detach(), on_step=False, on_epoch=True, batch_size=size)
        self.log("fsha/discriminator_loss", d_loss.detach(), on_step=False, on_epoch=True, batch_size=size)

    # ------------------------------------------------------------------ the attack, scored every round
    @override
    def aggregate(self, step: Step) -> None:
        super().aggregate(step)
        from lightning_sfl.privacy.metrics import mse_per_image, ssim_per_image

        stats = self.client_stats
        g = round_generator(stats.seed, 0, stream=_SCORED_STREAM)
        private = torch.cat(list(stats.shards))
        rows = private[torch.randperm(len(private), generator=g)[: self.scored_images]]
        with torch.no_grad():
            x = self._federation().data.train_inputs(rows, self.device)
            z = copy.deepcopy(self.client.net)(x)  # a copy: BatchNorm's running statistics of the global half stay
            # (what the clients would upload for these images, defended as they are)
            z = self.defences.upload(z, round_generator(stats.seed, step.round, stream=_SCORED_STREAM))
            # batch statistics of the scored images (a copy: the decoder's running statistics are the public data's)
            x_hat, truth = copy.deepcopy(self.decoder).train()(z), self._pixels(x)
            mse, ssim = mse_per_image(x_hat, truth).mean(), ssim_per_image(x_hat.float(), truth.float()).mean()
        self.log("fsha/mse", mse, on_step=False, on_epoch=True, batch_size=1)
        self.log("fsha/ssim", ssim, on_step=False, on_epoch=True, batch_size=1)

    # ------------------------------------------------------------------ checkpoints
    @override
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        if self._attack_optimizers is not None:
            checkpoint["fsha_optimizers"] = {n: o.state_dict() for n, o in self._attack_optimizers.items()}
        elif self._restored_optimizers is not None:  # saved again after a resume, before the first step
            checkpoint["fsha_optimizers"] = self._restored_optimizers

    @override
    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        self._restored_optimizers = checkpoint.get("fsha_optimizers")
        self._attack_optimizers = None
