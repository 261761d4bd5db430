"""UnSplit (Erdogan, Küpçü and Çiçek, "UnSplit: Data-Oblivious Model Inversion, Model Stealing, and Label Inference
Attacks Against Split Learning", WPES 2022): an honest-but-curious server inverts the activations it receives
without any data, knowing the client half's *architecture* but not its weights.

Given observed activations ``Z`` ``[n, *act]`` of ``n`` images, it looks for images ``X̃`` and a clone ``W̃`` of the
client half that explain them:

    min over X̃, W̃ of  MSE(f_W̃(X̃), Z) + λ_TV · TV(X̃)  [+ λ_2 · mean(X̃²): the authors' code]

by alternation: ``outer`` times, ``inner`` Adam steps on ``X̃`` with the whole loss, then ``inner`` Adam steps on
``W̃`` with the MSE only (Adam, lr ``1e-3``, amsgrad, for both). ``TV`` is the mean over pixels of the squared
differences of horizontal and vertical neighbours (the code's). ``X̃`` starts at ``0.5`` in pixel space ``[0, 1]``
and is never clamped while optimised (the code's); the clone starts from a fresh initialisation of the architecture
and is shared by every target image (the code keeps one clone across images: stealing accumulates).

Departures, for a CPU budget (each an argument): the authors invert one image at a time with ``outer = 1000`` and
``inner = 100`` (2·10⁵ steps an image); here all target images are optimised together as one batch (each image's
pixels get the gradient of its own loss: the sum over images of the per-image losses), with ``outer = 20`` and
``inner = 50`` by default. ``λ_2 = 0`` by default (the paper's objective; the code uses 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from lightning_sfl.privacy.progress import Progress

__all__ = ["UnSplitSettings", "total_variation", "unsplit"]


@dataclass
class UnSplitSettings:
    """UnSplit's optimisation (see the module docstring)."""

    outer: int = 20
    """Alternations of the two phases (the authors: 1000)."""
    inner: int = 50
    """Adam steps per phase (the authors: 100)."""
    lr: float = 1e-3
    """Adam's learning rate, images and clone."""
    tv_weight: float = 0.1
    """``λ_TV`` (the authors' code: 0.1)."""
    l2_weight: float = 0.0
    """``λ_2`` of the code's extra ``mean(X̃²)`` term (the paper has none; the code: 1)."""


def total_variation(x: Tensor) -> Tensor:
    """Per image ``[n]``: the mean over pixels of squared horizontal plus vertical neighbour differences of ``x``
    ``[n, C, H, W]``.

    >>> total_variation(torch.tensor([[[[0.0, 1.0], [0.0, 1.0]]]])).tolist()  # two horizontal steps of 1
    [0.5]
    """
    dh = (x[..., 1:, :] - x[..., :-1, :]).square().flatten(1).sum(1)
    dw = (x[..., :, 1:] - x[..., :, :-1]).square().flatten(1).sum(1)
    return (dh + dw) / x[0].numel()


def unsplit(
    observed: Tensor,
    clone: nn.Module,
    image_shape: tuple[int, ...],
    to_input: Callable[[Tensor], Tensor],
    settings: UnSplitSettings,
    history: list[dict] | None = None,
) -> Tensor:
    """Images ``[n, *image_shape]`` in ``[0, 1]`` reconstructed from ``observed`` activations ``[n, *act]`` (see the
    module docstring). ``clone``: a freshly initialised client half (trained in place: the stolen model);
    ``to_input``: pixels ``[0, 1]`` to the client half's input (the data's normalisation). ``history`` receives one
    ``{"attack/outer", "attack/activation_mse"}`` per alternation. On a terminal, stderr shows a bar of the steps
    with the current phase's loss (:class:`~lightning_sfl.privacy.progress.Progress`)."""
    observed = observed.detach()
    x = torch.full((len(observed), *image_shape), 0.5, device=observed.device, requires_grad=True)
    image_opt = torch.optim.Adam([x], lr=settings.lr, amsgrad=True)
    clone_opt = torch.optim.Adam(clone.parameters(), lr=settings.lr, amsgrad=True)
    clone.train()

    def activation_mse(images: Tensor) -> Tensor:  # per image [n]
        return (clone(to_input(images)) - observed).square().flatten(1).mean(1)

    with Progress(2 * settings.outer * settings.inner, "UnSplit") as progress:
        for outer in range(1, settings.outer + 1):
            progress.describe(f"UnSplit {outer}/{settings.outer} images")
            clone.requires_grad_(False)
            for _ in range(settings.inner):
                image_opt.zero_grad()
                loss = activation_mse(x) + settings.tv_weight * total_variation(x)
                if settings.l2_weight:
                    loss = loss + settings.l2_weight * x.square().flatten(1).mean(1)
                loss.sum().backward()
                image_opt.step()
                progress.advance(loss=loss.detach().mean())
            progress.describe(f"UnSplit {outer}/{settings.outer} clone")
            clone.requires_grad_(True)
            for _ in range(settings.inner):
                clone_opt.zero_grad()
                fit = activation_mse(x.detach()).mean()
                fit.backward()
                clone_opt.step()
                progress.advance(activation_mse=fit.detach())
            if history is not None:
                history.append({"attack/outer": outer, "attack/activation_mse": float(fit.detach())})
    clone.eval()
    return x.detach().clamp(0, 1)
