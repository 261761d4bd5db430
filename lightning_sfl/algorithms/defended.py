"""Activation defences of every split method (NoPeek, noise, a ``tanh`` bound), as a mixin of
:class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm`; the math is :mod:`lightning_sfl.privacy.defences`.

Where they act in a split iteration (:func:`~lightning_sfl.algorithms.iteration.split_iteration`):

* :meth:`ActivationDefences.defend` on what each client uploads, in training (:meth:`send_activations`) and at
  inference (the global model's :meth:`forward`): ``Z = h(w_c; X)``, bounded by ``tanh`` if ``noise_bound="tanh"``,
  plus noise if ``activation_noise > 0``. The server, and the ``attack`` command, see only this. The noise of step
  ``(t, i)`` comes from a generator seeded by ``(seed, t, i)``, and an evaluation's from ``(seed, rounds done)``, so a
  resumed run draws the same noise (under DDP each process draws its own, the rank mixed into the seed; the run then
  differs from a one-process run by its draws). The gradient ``G_k`` passes the noise unchanged (it is added).
* :meth:`ActivationDefences.nopeek_term` beside the method's own client terms: ``α · Σ_k DCOR(X_k, Z̃_k)`` on what
  each client sends; under DDP each process takes its share of a client's rows (the processes' terms are averaged).

Traffic is unchanged (the noisy activations have the activations' size). NoPeek's distance matrices are client
compute the simulated clock does not charge: ``n_k² · (d_x + d_z)`` multiply-adds a minibatch, against the client
half's forward and backward.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from typing_extensions import override

from lightning_sfl.algorithms.iteration import activation_gradients
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.sampling import round_generator
from lightning_sfl.loop.step import PROBE_KIND, Step
from lightning_sfl.privacy.defences import add_noise, check_defences, nopeek_loss

__all__ = ["ActivationDefences"]

_TRAIN_NOISE_STREAM, _EVAL_NOISE_STREAM = 21, 22


class ActivationDefences:
    """Mixin: the defence settings and their two hooks (see the module docstring)."""

    #: False for methods that upload something else than ``h(w_c; X)`` (Semi-SFL's views): defences are refused.
    supports_activation_defences: ClassVar[bool] = True
    #: False where the server sends the clients no gradient of its loss (SFLLocalLoss: the clients train on heads of
    #: their own): SplitGuard (:class:`~lightning_sfl.callbacks.splitguard.SplitGuard`) has nothing to probe.
    server_sends_gradients: ClassVar[bool] = True

    def init_defences(
        self, nopeek_weight: float, activation_noise: float, noise_distribution: str, noise_bound: str
    ) -> None:
        check_defences(nopeek_weight, activation_noise, noise_distribution, noise_bound)
        self.nopeek_weight, self.activation_noise = float(nopeek_weight), float(activation_noise)
        self.noise_distribution, self.noise_bound = noise_distribution, noise_bound
        if self.defended and not (self.has_server_half and self.supports_activation_defences):
            kind = "a plain FL method (no activations)" if not self.has_server_half else "not a plain split upload"
            raise ConfigError(
                f"nopeek_weight, activation_noise and noise_bound need a split method; {type(self).__name__} is {kind}"
            )
        if self.nopeek_weight > 0:  # NoPeek's term goes back through the activations after G_k did
            self.extra_loss_uses_activations = True
        self._eval_noise: torch.Generator | None = None

    @property
    def defended(self) -> bool:
        """Any defence of this mixin is on."""
        return self.nopeek_weight > 0 or self.activation_noise > 0 or self.noise_bound != "none"

    def _defence_seed(self) -> int:
        federation = getattr(self, "federation", None)
        return int(federation.stats.seed) if federation is not None else 0

    def defend(self, z: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """What leaves the client: ``z`` ``[B, *act]`` bounded (``tanh``) and noised as configured. ``generator``:
        the noise's; ``None``: the evaluation's (seeded by the rounds done, reset at every evaluation)."""
        if self.noise_bound == "tanh":
            z = torch.tanh(z)
        if self.activation_noise > 0:
            if generator is None:
                if self._eval_noise is None:
                    done = self.rounds_completed if self._trainer is not None else 0
                    stream = _EVAL_NOISE_STREAM + 100 * self.global_rank
                    self._eval_noise = round_generator(self._defence_seed(), done, stream=stream)
                generator = self._eval_noise
            z = add_noise(z, self.activation_noise, self.noise_distribution, generator)
        return z

    def step_noise(self, step) -> torch.Generator | None:
        """The noise generator of training step ``step`` (seeded by the run's seed, its round and index)."""
        if self.activation_noise == 0:
            return None
        stream = _TRAIN_NOISE_STREAM + 100 * self.global_rank  # each process its own draws for its rows
        return round_generator(self._defence_seed(), step.round * 1_000_003 + step.index, stream=stream)

    def nopeek_term(self, step, sent: torch.Tensor) -> torch.Tensor | None:
        """``α · Σ_k DCOR(X_k, Z̃_k)`` over the step's clients (``sent``: the activations as uploaded); ``None`` when
        NoPeek is off. Logs ``train/nopeek_dcor``, the mean ``DCOR(X_k, Z̃_k)`` over the step's clients (averaged over
        the processes by Lightning under DDP), per round: what the term drives down."""
        if self.nopeek_weight == 0:
            return None
        dcor = nopeek_loss(step.x, sent, step.owner, len(step.clients))
        mean = dcor.detach() / len(step.clients)
        self.log("train/nopeek_dcor", mean, on_step=False, on_epoch=True, batch_size=step.num_rows, sync_dist=True)
        return self.nopeek_weight * dcor

    @property
    def splitguard_applies(self) -> bool:
        """The clients hold labels and the server answers their uploads with gradients: what SplitGuard probes."""
        supported = self.has_server_half and self.supports_activation_defences and self.server_sends_gradients
        return supported and not self.keeps_client_halves  # the probe runs the global half

    def server_gradients(self, sent: torch.Tensor, labels: torch.Tensor, client: int, round_index: int) -> torch.Tensor:
        """The gradient ``G`` ``[n, *act]`` the server answers one client's upload ``sent`` ``[n, *act]`` (labels
        ``[n]``) with, computed as in training (:meth:`answer_loss`) at the global server half, without
        any update: what :class:`~lightning_sfl.callbacks.splitguard.SplitGuard` probes. The caller keeps the
        buffers (BatchNorm) and the random state."""
        n, device = len(labels), labels.device
        step = Step(
            kind=PROBE_KIND,
            round=round_index,
            index=0,
            round_end=False,
            clients=torch.tensor([client], device=device),
            sizes=torch.tensor([n], device=device),
            rows=torch.zeros(n, dtype=torch.long, device=device),
            y=labels,
            owner=torch.zeros(n, dtype=torch.long, device=device),
            local_sizes=torch.tensor([n], device=device),
            label_counts=torch.bincount(labels, minlength=self.num_classes),
        )
        a = sent.detach().requires_grad_(True)
        return activation_gradients(self.answer_loss(a, step), a, keep_graph=False)

    def answer_loss(self, a: torch.Tensor, step: Step) -> torch.Tensor:
        """The loss whose gradient w.r.t. the activations ``a`` the server sends the clients: hook 4 (the clients'
        loss) on hook 2 (the server forward); FSHA answers with its critic instead."""
        client_loss = self.client_loss(self.server_forward(a, step), step)
        if client_loss is None:
            name = type(self).__name__
            raise ConfigError(f"{name}'s server sends the clients no gradients: SplitGuard cannot probe it")
        return client_loss

    @override
    def on_validation_epoch_start(self) -> None:
        """Every evaluation draws its noise afresh from ``(seed, rounds done)``."""
        self._eval_noise = None
        super().on_validation_epoch_start()

    @override
    def on_test_epoch_start(self) -> None:
        self._eval_noise = None
        super().on_test_epoch_start()
