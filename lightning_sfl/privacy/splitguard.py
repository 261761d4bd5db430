"""SplitGuard's detection score (Erdogan, Küpçü and Çiçek, "SplitGuard: Detecting and Mitigating Training-Hijacking
Attacks in Split Learning", WPES 2022): the pure part; the probe that feeds it is
:class:`~lightning_sfl.callbacks.splitguard.SplitGuard`.

A client that holds labels sends, now and then, a *fake* batch: its labels shifted by a random ``s ∈ 1..N−1``
(mod ``N``), so that an honest server's gradients on it point elsewhere and are larger (the wrong labels cost more)
than on regular batches, while a server that ignores the labels (FSHA: its gradients come from a critic on the feature
space) answers fake and regular batches alike. With the client's first-layer gradients of the fake batches ``F`` and
of regular batches split at random into ``R1`` and ``R2``; mean vectors ``F̄, R̄1, R̄2``, ``R̄ = (R̄1 + R̄2)/2``; mean
norms ``m_F, m_1, m_2``, ``m_R = (m_1 + m_2)/2``; ``d = |m_F − m_R| + |m_1 − m_2|`` and ``θ`` the angle in radians::

    x  = θ(F̄, R̄) · |m_F − m_R| / d  −  θ(R̄1, R̄2) · |m_1 − m_2| / d
    SG = sigmoid(a · x) ** b          (a = 5, b = 2: the authors' notebook)

An honest server gives ``SG`` near 1 (fake gradients differ from regular ones far more than two regular sets differ);
a hijacking one near ``sigmoid(0)² = 0.25`` or below. The authors' notebook (``label-changing/splitguard.ipynb``)
shifts labels by ``1..8`` mod 10 (never by 9) and uses the whole batch's 64 rows; the paper's decision threshold was
not retrieved, so the score is reported, not thresholded.
"""

from __future__ import annotations

import torch

__all__ = ["shifted_labels", "splitguard_score", "vector_angle"]


def vector_angle(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The angle between two vectors ``[P]`` in radians, in ``[0, π]`` (``π/2`` if either is zero).

    >>> round(float(vector_angle(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0]))), 4)
    1.5708
    """
    cosine = torch.nn.functional.cosine_similarity(u.double(), v.double(), dim=0, eps=1e-30)
    return torch.arccos(cosine.clamp(-1.0, 1.0))


def splitguard_score(
    fake: torch.Tensor, regular_1: torch.Tensor, regular_2: torch.Tensor, slope: float = 5.0, power: float = 2.0
) -> torch.Tensor:
    """SplitGuard's score ``SG`` (see the module docstring) of the client's first-layer gradients.

    Args:
        fake: ``[F, P]`` gradients of the fake batches (flattened).
        regular_1: ``[R1, P]``, regular_2: ``[R2, P]``: gradients of regular batches, split at random.
        slope: ``a`` of the squashing ``sigmoid(a·x)^b``; power: ``b``.

    Returns:
        A float64 scalar in ``[0, 1]``.

    >>> g = torch.Generator().manual_seed(0)
    >>> regular = torch.randn(8, 20, generator=g) * 0.1 + 1.0
    >>> honest_fake = -3.0 * regular[:2]         # larger and pointing elsewhere
    >>> float(splitguard_score(honest_fake, regular[2:5], regular[5:])) > 0.95
    True
    >>> float(splitguard_score(regular[:2], regular[2:5], regular[5:])) < 0.5    # fakes answered like regulars
    True
    """
    for name, value in (("fake", fake), ("regular_1", regular_1), ("regular_2", regular_2)):
        if value.dim() != 2 or len(value) == 0:
            raise ValueError(f"{name} must be a non-empty [n, P] matrix of gradients, got shape {list(value.shape)}")
    fake, regular_1, regular_2 = fake.double(), regular_1.double(), regular_2.double()
    mean_f, mean_1, mean_2 = fake.mean(0), regular_1.mean(0), regular_2.mean(0)
    norm_f, norm_1, norm_2 = (m.norm(dim=1).mean() for m in (fake, regular_1, regular_2))
    norm_r = (norm_1 + norm_2) / 2
    fake_gap, regular_gap = (norm_f - norm_r).abs(), (norm_1 - norm_2).abs()
    divisor = fake_gap + regular_gap
    if divisor == 0:  # identical norms everywhere: nothing tells the fakes apart
        x = torch.zeros((), dtype=torch.float64)
    else:
        fake_angle = vector_angle(mean_f, (mean_1 + mean_2) / 2)
        x = (fake_angle * fake_gap - vector_angle(mean_1, mean_2) * regular_gap) / divisor
    return torch.sigmoid(slope * x) ** power


def shifted_labels(labels: torch.Tensor, shift: int, num_classes: int) -> torch.Tensor:
    """A fake batch's labels: ``(y + shift) mod N``, every row's label wrong for ``shift ∈ 1..N−1``.

    >>> shifted_labels(torch.tensor([0, 4, 9]), 3, 10).tolist()
    [3, 7, 2]
    """
    if not 1 <= shift < num_classes:
        raise ValueError(f"shift={shift} must be in 1..{num_classes - 1}")
    return (labels + shift) % num_classes
