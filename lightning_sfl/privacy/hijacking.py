"""The server-side networks and losses of feature-space hijacking (FSHA, Pasquini et al., CCS 2021), as pure parts:
the critic ``D`` on the feature space and WGAN-GP's gradient penalty. :class:`~lightning_sfl.algorithms.fsha.FSHA`
runs them in a split federation.

>>> import torch
>>> critic = feature_discriminator((4, 2, 2), width=8)
>>> critic(torch.zeros(3, 4, 2, 2)).shape
torch.Size([3, 1])
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["feature_discriminator", "gradient_penalty"]


def feature_discriminator(activation_shape: tuple[int, ...], width: int) -> nn.Sequential:
    """``D``: activations ``[B, *activation_shape]`` (``(c, h, w)``) to one score each, ``[B, 1]``: two 3×3
    convolutions (the second strided) with LeakyReLU(0.2), then a linear layer."""
    c, h, w = activation_shape
    layers = nn.Sequential(
        nn.Conv2d(c, width, 3, padding=1),
        nn.LeakyReLU(0.2),
        nn.Conv2d(width, width, 3, stride=2, padding=1),
        nn.LeakyReLU(0.2),
        nn.Flatten(),
    )
    with torch.no_grad():
        features = layers(torch.zeros(1, c, h, w)).shape[1]
    return nn.Sequential(*layers, nn.Linear(features, 1))


def gradient_penalty(discriminator: nn.Module, real: torch.Tensor, fake: torch.Tensor, generator) -> torch.Tensor:
    """WGAN-GP's ``mean (‖∇D(Ẑ)‖₂ − 1)²`` at ``Ẑ = ε·real + (1 − ε)·fake``, ``ε ~ U[0, 1]`` per row (``generator``),
    the norm over each row's every element."""
    eps = torch.rand(len(real), *[1] * (real.dim() - 1), generator=generator).to(real)
    mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
    (grad,) = torch.autograd.grad(discriminator(mixed).sum(), mixed, create_graph=True)
    return (grad.flatten(1).norm(dim=1) - 1).square().mean()
