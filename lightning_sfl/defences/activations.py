"""Defences on the activations a client uploads: NoPeek's term and noise (with a ``tanh`` bound); the math is
:mod:`lightning_sfl.privacy.defences`.

* :class:`ActivationNoise` acts on what each client uploads, in training and at inference (the global model's
  forward): ``Z = h(w_c; X)``, bounded by ``tanh`` if ``bound="tanh"``, plus noise if ``scale > 0``. The server, and
  the ``attack`` command, see only this. The noise of step ``(t, i)`` comes from a generator seeded by ``(seed, t,
  i)``, and an evaluation's from ``(seed, rounds done)``, so a resumed run draws the same noise (under DDP each process
  draws its own, the rank mixed into the seed; the run then differs from a one-process run by its draws). The
  gradient ``G_k`` passes the noise unchanged (it is added).
* :class:`NoPeek` adds ``α · Σ_k DCOR(X_k, Z̃_k)`` on what each client sends, beside the method's own client terms;
  under DDP each process takes its share of a client's rows (the processes' terms are averaged).

Traffic is unchanged (the noisy activations have the activations' size). NoPeek's distance matrices are client
compute the simulated clock does not charge: ``n_k² · (d_x + d_z)`` multiply-adds a minibatch, against the client
half's forward and backward.
"""

from __future__ import annotations

import torch
from typing_extensions import override

from lightning_sfl.defences.base import Defence
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.sampling import round_generator
from lightning_sfl.privacy.defences import NOISE_BOUNDS, NOISE_DISTRIBUTIONS, add_noise, nopeek_loss

__all__ = ["ActivationNoise", "NoPeek"]

_TRAIN_NOISE_STREAM, _EVAL_NOISE_STREAM = 21, 22


def _non_negative(owner: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(f"{owner}: {name}={value!r} must be a number >= 0")
    return float(value)


class NoPeek(Defence):
    """NoPeek (Vepakomma et al., 2020): every client adds ``α · DCOR(X_k, Z̃_k)`` to its loss, the distance
    correlation of its minibatch's inputs and what it uploads (:func:`~lightning_sfl.privacy.defences.nopeek_loss`).

    Args:
        weight: ``α >= 0`` (``0``: the term is 0).

    >>> NoPeek(weight=10).config()
    {'class_path': 'lightning_sfl.defences.NoPeek', 'init_args': {'weight': 10.0}}
    """

    key = "nopeek"
    goes_back_through_activations = True  # NoPeek's term goes back through the activations after G_k did

    def __init__(self, weight: float = 1.0) -> None:
        super().__init__()
        self.weight = _non_negative("NoPeek", "weight", weight)

    @override
    def client_terms(self, step, sent, log):
        """``(None, α · Σ_k DCOR(X_k, Z̃_k))`` over the step's clients (a whole term: each process its rows). Logs
        ``train/nopeek_dcor``, the mean ``DCOR(X_k, Z̃_k)`` over the step's clients, per round: what the term drives
        down."""
        if self.weight == 0:
            return None, None
        dcor = nopeek_loss(step.x, sent, step.owner, len(step.clients))
        log("train/nopeek_dcor", dcor.detach() / len(step.clients), sync_dist=True)
        return None, self.weight * dcor


class ActivationNoise(Defence):
    """Noise on every uploaded activation (Titcombe et al., 2021), in training and at inference, after an optional
    ``tanh`` bound of the client's output.

    Args:
        scale: Laplace's ``b`` or the Gaussian's standard deviation, ``>= 0`` (``0``: the bound alone).
        distribution: ``laplace`` (Titcombe et al.) or ``gaussian``.
        bound: ``tanh`` bounds the client's output before the noise (Titcombe et al.); ``none``: the cut's own
            activations.
    """

    key = "noise"

    def __init__(self, scale: float = 0.1, distribution: str = "laplace", bound: str = "none") -> None:
        super().__init__()
        self.scale = _non_negative("ActivationNoise", "scale", scale)
        if distribution not in NOISE_DISTRIBUTIONS:
            allowed = ", ".join(NOISE_DISTRIBUTIONS)
            raise ConfigError(f"ActivationNoise: distribution={distribution!r} must be one of: {allowed}")
        if bound not in NOISE_BOUNDS:
            raise ConfigError(f"ActivationNoise: bound={bound!r} must be one of: {', '.join(NOISE_BOUNDS)}")
        self.distribution, self.bound = distribution, bound
        self._seed = self._rank = 0
        self._evaluation: torch.Generator | None = None

    @override
    def setup(self, federation, rank):
        self._seed, self._rank = int(federation.stats.seed), rank

    @override
    def start_evaluation(self, seed, rank, rounds_done):
        """Every evaluation draws its noise afresh from ``(seed, rounds done)``."""
        self._evaluation = None
        if self.scale > 0:
            self._evaluation = round_generator(seed, rounds_done, stream=_EVAL_NOISE_STREAM + 100 * rank)

    @override
    def training_noise(self, step):
        """The noise generator of training step ``step`` (seeded by the run's seed, its round and index; each process
        its own draws for its rows)."""
        if self.scale == 0:
            return None
        stream = _TRAIN_NOISE_STREAM + 100 * self._rank
        return round_generator(self._seed, step.round * 1_000_003 + step.index, stream=stream)

    @override
    def upload(self, z, generator):
        if self.bound == "tanh":
            z = torch.tanh(z)
        if self.scale > 0:
            if generator is None:  # outside a training step or an evaluation (a model summary's forward)
                if self._evaluation is None:
                    self._evaluation = round_generator(self._seed, 0, stream=_EVAL_NOISE_STREAM + 100 * self._rank)
                generator = self._evaluation
            z = add_noise(z, self.scale, self.distribution, generator)
        return z
