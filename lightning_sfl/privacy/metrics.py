"""Reconstruction quality of images recovered from activations, and the regulariser built on it (pure functions).

Images are ``[B, C, H, W]`` in ``[0, 1]`` (data range 1). Every metric is computed **per image** and returned as
``[B]``; averages over images are what the SCALA journal's Table VI and ResSFL report:

* ``MSE_i = mean over pixels of (x̂ − x)²``;
* ``SSIM_i``: Wang et al.'s structural similarity with a Gaussian window of 11 pixels, σ = 1.5,
  ``C1 = (0.01)²``, ``C2 = (0.03)²``, averaged over the image (torchmetrics' ``structural_similarity_index_measure``,
  which reflect-pads the borders, so that 8×8 digits work);
* ``PSNR_i = 10·log10(1 / MSE_i)`` dB (ResSFL averages per-image PSNR; this is not ``10·log10(1 / mean MSE)``).

The regulariser of SCALA-PE (journal eq. 17, ``γ·R``) on one client's batch ``k``:

* ``ssim`` (ResSFL's choice, the default): ``R_k = max(mean_i SSIM_i − τ, 0)`` — zero once the simulated attacker's
  reconstructions are no better than ``τ`` (ResSFL: ``τ = 0.5``);
* ``mse`` (ResSFL's ``gan_loss_type=MSE``): ``R_k = −mean_i MSE_i`` — the client pushes the attacker's error up.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "REGULARISERS",
    "images_from_inputs",
    "mse_per_image",
    "psnr_per_image",
    "reconstruction_scores",
    "regulariser",
    "ssim_per_image",
]

#: Forms of ``R`` (see the module docstring).
REGULARISERS = ("ssim", "mse")


def images_from_inputs(x: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """Normalised model inputs ``[B, C, H, W]`` back to pixels in ``[0, 1]`` (``x·std + mean``, per channel
    ``[C, 1, 1]``, clamped): what an attacker reconstructs.

    >>> images_from_inputs(torch.tensor([[[[-1.0, 3.0]]]]), torch.tensor([[[0.5]]]), torch.tensor([[[0.25]]])).tolist()
    [[[[0.25, 1.0]]]]
    """
    return (x * std.to(x) + mean.to(x)).clamp(0, 1)


def mse_per_image(x_hat: Tensor, x: Tensor) -> Tensor:
    """``[B]``: mean squared error of each image over its ``C·H·W`` pixels."""
    return (x_hat - x).pow(2).flatten(1).mean(dim=1)


def psnr_per_image(x_hat: Tensor, x: Tensor, eps: float = 1e-10) -> Tensor:
    """``[B]``: ``10·log10(1 / max(MSE_i, eps))`` dB for images in ``[0, 1]`` (``eps`` keeps a perfect copy finite:
    100 dB)."""
    return 10 * torch.log10(1.0 / mse_per_image(x_hat, x).clamp_min(eps))


def ssim_per_image(x_hat: Tensor, x: Tensor) -> Tensor:
    """``[B]``: SSIM of each image (Gaussian window 11, σ 1.5, data range 1; see the module docstring).
    Differentiable in ``x_hat``. Needs ``H, W >= 6`` (reflect padding by 5)."""
    from torchmetrics.functional.image import structural_similarity_index_measure

    return structural_similarity_index_measure(
        x_hat, x, gaussian_kernel=True, sigma=1.5, kernel_size=11, data_range=1.0, reduction="none"
    )


def regulariser(x_hat: Tensor, x: Tensor, owner: Tensor, num_clients: int, kind: str, threshold: float) -> Tensor:
    """``R_k`` of every client ``[S]`` from the reconstructions ``x_hat`` ``[B, C, H, W]`` of its rows (``owner``
    ``[B]``: the client, ``0..S−1``, of each row); ``kind`` one of :data:`REGULARISERS`, ``threshold`` ``τ`` of the
    hinge. A client without rows gets 0."""
    counts = torch.bincount(owner, minlength=num_clients).to(x_hat.dtype)
    per_image = ssim_per_image(x_hat, x) if kind == "ssim" else mse_per_image(x_hat, x)
    means = x_hat.new_zeros(num_clients).index_add(0, owner, per_image) / counts.clamp_min(1)
    if kind == "ssim":
        return torch.where(counts > 0, (means - threshold).clamp_min(0), 0.0)
    return -means


def reconstruction_scores(x_hat: Tensor, x: Tensor) -> dict[str, float]:
    """Means over images of MSE, SSIM and PSNR (what the attack reports)."""
    return {
        "mse": float(mse_per_image(x_hat, x).mean()),
        "ssim": float(ssim_per_image(x_hat, x).mean()),
        "psnr": float(psnr_per_image(x_hat, x).mean()),
    }
