"""Defences of the labels in U-shaped split learning (:mod:`~lightning_sfl.runtime.u_shape`): noise on what the
clients send up, the gradients ``g`` ``[B_k, *h]`` of their losses w.r.t. the body's outputs, each client's batch on
its own (hook ``gradient_upload``). Both are Li et al.'s ("Label Leakage and Protection in Two-party Split Learning",
ICLR 2022): the isotropic Gaussian baseline and the max-norm heuristic, as the authors' code computes them.

:class:`GradientNoise` adds ``N(0, σ²·I)`` to every row with ``σ = t·max_i‖g_i‖ / sqrt(D)`` (``D`` the values of a
row, ``t = scale``): noise of expected norm ``t`` times the batch's largest gradient. :class:`MaxNorm` scales each row
along itself, ``g_i·(1 + σ_i·z_i)`` with one ``z_i ~ N(0, 1)`` a row and ``σ_i² = max_j‖g_j‖² / ‖g_i‖² − 1``: every
row's expected squared norm becomes the batch's largest, so the norms no longer tell the classes apart (the direction
of each row is kept up to its sign). Both draw from the run's seed, the step and the process, as the activation
noise does.
"""

from __future__ import annotations

import torch
from typing_extensions import override

from lightning_sfl.defences.base import Defence
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.sampling import round_generator

__all__ = ["GradientDefence", "GradientNoise", "MaxNorm", "client_blocks"]

_STREAM = 61  # the gradients' noise: a stream of its own, apart from the activation noise's


def client_blocks(step) -> list[int]:
    """Rows of each client of ``step`` on this process, in row order (its batch as the client sends it)."""
    return step.local_sizes.tolist() if step.local_sizes is not None else [len(step.y)]


class GradientDefence(Defence):
    """What both gradient defences share: the generator of a training step's draws."""

    needs_tail = True

    def __init__(self) -> None:
        super().__init__()
        self._seed = self._rank = 0

    @override
    def setup(self, federation, rank):
        self.seed_draws(int(federation.stats.seed), rank)

    def seed_draws(self, seed: int, rank: int = 0) -> None:
        """Draw from ``seed`` on process ``rank`` (a fit's: its data seed, when it starts; an attack's: its own)."""
        self._seed, self._rank = int(seed), int(rank)

    def generator(self, step) -> torch.Generator:
        """The draws of training step ``step`` (seeded by the run's seed, its round and index, this process)."""
        stream = _STREAM + 100 * self._rank
        return round_generator(self._seed, step.round * 1_000_003 + step.index, stream=stream)

    @override
    def gradient_upload(self, g, step):
        """Each client's batch of ``g`` ``[B, *h]`` through :meth:`defend_batch`, in row order."""
        gen, out = self.generator(step), []
        for block in g.split(client_blocks(step)):
            rows = block.reshape(len(block), -1)
            out.append(self.defend_batch(rows, gen).reshape(block.shape) if len(rows) else block)
        return torch.cat(out)

    def defend_batch(self, rows: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """What one client sends for its gradients ``rows`` ``[B_k, D]`` (at least one row)."""
        raise NotImplementedError


class GradientNoise(GradientDefence):
    """Isotropic Gaussian noise on the gradients a U-shaped client sends (Li et al. 2022's baseline): ``N(0, σ²·I)``
    with ``σ = scale·max_i‖g_i‖/sqrt(D)`` over the client's batch (see the module docstring).

    Args:
        scale: ``t``, the noise's expected norm in units of the batch's largest gradient norm, ``>= 0``.
    """

    key = "gradient_noise"

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        if not (isinstance(scale, int | float) and not isinstance(scale, bool) and scale >= 0):
            raise ConfigError(f"GradientNoise: scale={scale!r} must be a number >= 0")
        self.scale = float(scale)

    @override
    def gradient_upload(self, g, step):
        return g if self.scale == 0 else super().gradient_upload(g, step)

    @override
    def defend_batch(self, rows, generator):
        sigma = self.scale * rows.norm(dim=1).max() / rows.shape[1] ** 0.5
        noise = torch.randn(rows.shape, generator=generator, dtype=torch.float64).to(rows.device, rows.dtype)
        return rows + sigma * noise


class MaxNorm(GradientDefence):
    """Li et al. 2022's max-norm heuristic on the gradients a U-shaped client sends: each row ``g_i`` becomes
    ``g_i·(1 + σ_i·z_i)``, ``σ_i² = max_j‖g_j‖²/‖g_i‖² − 1`` over the client's batch (see the module docstring). No
    option: the batch sets the noise."""

    key = "max_norm"

    @override
    def defend_batch(self, rows, generator):
        norms = rows.norm(dim=1)
        ratio = (norms.max() / norms.clamp_min(torch.finfo(norms.dtype).tiny)) ** 2
        sigma = (ratio - 1).clamp_min(0).sqrt()
        z = torch.randn(len(rows), generator=generator, dtype=torch.float64).to(rows.device, rows.dtype)
        return rows * (1 + sigma * z)[:, None]
