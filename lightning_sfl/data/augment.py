"""Batched weak and strong augmentations on the device, for semi-supervised methods (Semi-SFL, FixMatch-style).

Semi-SFL (after FixMatch) uses a *weak* view (flip and random crop with reflect padding of 12.5 %) for the teacher's
pseudo-labels and a *strong* view (weak + RandAugment, n = 2, m = 10, with Cutout) for the student. On 8×8 digits
and 28×28 MNIST RandAugment's photometric operations degenerate and a horizontal flip turns digits into other
symbols, so the defaults here are lighter (our choice, documented in the method):

* weak: a random translation by up to ``shift`` pixels in each direction (reflect padding, then a random crop of the
  original size; 12.5 % of the side: 1 pixel at 8×8, 3 at 28×28), optional horizontal flip (off);
* strong: the weak view, then a random brightness/contrast scale in ``[1 − jitter, 1 + jitter]``, Gaussian noise of
  standard deviation ``noise`` and Cutout of a square of side ``cutout`` (a quarter of the side) filled with 0.

Everything runs on ``[B, C, H, W]`` batches with a ``torch.Generator`` (reproducible, no per-image Python loop).

>>> x = torch.arange(16.0).reshape(1, 1, 4, 4)
>>> torch.equal(weak_view(x, shift=0, generator=torch.Generator().manual_seed(0)), x)
True
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

__all__ = ["strong_view", "translate", "weak_view"]


def _uniform_ints(n: int, low: int, high: int, generator: torch.Generator, device) -> torch.Tensor:
    """``n`` integers uniform in ``[low, high]`` (drawn on the CPU generator, moved to ``device``)."""
    return torch.randint(low, high + 1, (n,), generator=generator).to(device)


def translate(x: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, pad: int) -> torch.Tensor:
    """Image ``i`` of ``x`` ``[B, C, H, W]`` moved by ``(dy[i], dx[i])`` pixels (``|d| <= pad``), the border filled by
    reflection: the crop of the reflect-padded image starting at ``(pad − dy, pad − dx)``."""
    if pad == 0:
        return x
    b, _, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    rows = (pad - dy)[:, None] + torch.arange(h, device=x.device)[None, :]  # [B, H]
    cols = (pad - dx)[:, None] + torch.arange(w, device=x.device)[None, :]  # [B, W]
    out = padded[torch.arange(b, device=x.device)[:, None, None], :, rows[:, :, None], cols[:, None, :]]  # [B,H,W,C]
    return out.permute(0, 3, 1, 2).contiguous()


def weak_view(x: torch.Tensor, shift: int, generator: torch.Generator, flip: bool = False) -> torch.Tensor:
    """A random translation by up to ``shift`` pixels (and a horizontal flip with probability 1/2 if ``flip``)."""
    b = len(x)
    dy = _uniform_ints(b, -shift, shift, generator, x.device)
    dx = _uniform_ints(b, -shift, shift, generator, x.device)
    out = translate(x, dy, dx, shift)
    if flip:
        mirrored = torch.rand(b, generator=generator).to(x.device) < 0.5
        out = torch.where(mirrored[:, None, None, None], out.flip(-1), out)
    return out


def strong_view(
    x: torch.Tensor,
    shift: int,
    generator: torch.Generator,
    jitter: float = 0.2,
    noise: float = 0.1,
    cutout: int = 2,
    flip: bool = False,
) -> torch.Tensor:
    """The weak view, then brightness/contrast jitter, Gaussian noise and Cutout (see the module docstring)."""
    out = weak_view(x, shift, generator, flip)
    b, _, h, w = out.shape
    scale = 1.0 + jitter * (2 * torch.rand(b, 1, 1, 1, generator=generator) - 1)
    mean = out.mean(dim=(1, 2, 3), keepdim=True)
    out = (out - mean) * scale.to(out) + mean
    if noise > 0:
        out = out + noise * torch.randn(out.shape, generator=generator).to(out)
    if cutout > 0:
        top = _uniform_ints(b, 0, h - cutout, generator, x.device)
        left = _uniform_ints(b, 0, w - cutout, generator, x.device)
        r = torch.arange(h, device=x.device)[None, :]
        c = torch.arange(w, device=x.device)[None, :]
        inside_r = (r >= top[:, None]) & (r < top[:, None] + cutout)  # [B, H]
        inside_c = (c >= left[:, None]) & (c < left[:, None] + cutout)  # [B, W]
        hole = inside_r[:, :, None] & inside_c[:, None, :]  # [B, H, W]
        out = out.masked_fill(hole[:, None], 0.0)
    return out
