"""The batched weak/strong views against per-image references written in the test."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from lightning_sfl.data.augment import strong_view, translate, weak_view


def test_translate_equals_a_per_image_reflect_pad_and_crop():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 2, 6, 7, generator=g)
    dy, dx = torch.tensor([-2, -1, 0, 1, 2]), torch.tensor([2, 0, -2, 1, -1])
    got = translate(x, dy, dx, pad=2)
    for i in range(5):
        padded = F.pad(x[i : i + 1], (2, 2, 2, 2), mode="reflect")[0]
        top, left = 2 - int(dy[i]), 2 - int(dx[i])
        torch.testing.assert_close(got[i], padded[:, top : top + 6, left : left + 7], rtol=0, atol=0)
    # a pure shift: the interior moves by (dy, dx)
    torch.testing.assert_close(got[3, :, 1:, 1:], x[3, :, :-1, :-1], rtol=0, atol=0)


def test_weak_view_is_reproducible_and_shifts_within_range():
    x = torch.randn(64, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    a = weak_view(x, shift=1, generator=torch.Generator().manual_seed(7))
    b = weak_view(x, shift=1, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b) and a.shape == x.shape
    padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
    moved = 0
    for i in range(64):  # each image is one of the 9 crops of its padded version
        crops = [padded[i, :, t : t + 8, s : s + 8] for t in range(3) for s in range(3)]
        assert any(torch.equal(a[i], c) for c in crops)
        moved += not torch.equal(a[i], x[i])
    assert moved > 40  # 8 of 9 shifts move the image
    flipped = weak_view(x, shift=0, generator=torch.Generator().manual_seed(0), flip=True)
    assert all(torch.equal(flipped[i], x[i]) or torch.equal(flipped[i], x[i].flip(-1)) for i in range(64))
    assert not torch.equal(flipped, x)


def test_strong_view_cuts_one_square_hole_per_image():
    x = torch.ones(16, 1, 8, 8) * 5.0
    out = strong_view(x, shift=0, generator=torch.Generator().manual_seed(3), jitter=0.0, noise=0.0, cutout=3)
    zeros = (out == 0).sum(dim=(1, 2, 3))
    assert zeros.tolist() == [9] * 16  # a constant image: only the 3x3 hole is 0
    noisy = strong_view(x, shift=1, generator=torch.Generator().manual_seed(3))
    assert noisy.shape == x.shape and torch.isfinite(noisy).all() and not torch.equal(noisy, x)
