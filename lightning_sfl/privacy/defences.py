"""Client-side defences of the activations at the cut, beside SCALA-PE's and the bottleneck: NoPeek and noise.

* **NoPeek** (Vepakomma et al., 2020, arXiv 2008.09161): each client adds ``α · DCOR(X_k, Z_k)`` to its loss, the
  sample distance correlation between its minibatch's inputs and activations (:func:`distance_correlation`), so that
  the activations carry less of the input's geometry. Not squared, with Euclidean distances, as in both public
  implementations (FSHA's ``defense.py``; TTitcombe/NoPeekNN uses squared distances, a departure).
* **Noise on the activations** (Titcombe et al., 2021, arXiv 2104.05743): the client uploads ``Z̃ = Z + ε``,
  ``ε ~ Laplace(0, b)`` (or ``N(0, b²)``) per element, in training and at inference; the server, and any attacker on
  its side, only ever sees ``Z̃``. Titcombe et al. bound the client's output with ``tanh`` first (``bound="tanh"``),
  since otherwise a client can grow its activations until the noise no longer matters.

Both are pure functions here; the defences :class:`~lightning_sfl.defences.NoPeek` and
:class:`~lightning_sfl.defences.ActivationNoise` give them to a split method's clients (``--model.defences``).

>>> import torch
>>> x = torch.randn(32, 5, generator=torch.Generator().manual_seed(0))
>>> round(float(distance_correlation(x, 3 * x + 1)), 4)  # a similarity of x: correlation 1
1.0
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["NOISE_BOUNDS", "NOISE_DISTRIBUTIONS", "add_noise", "distance_correlation", "nopeek_loss"]

NOISE_DISTRIBUTIONS = ("laplace", "gaussian")
NOISE_BOUNDS = ("none", "tanh")


def _centred_distances(rows: Tensor) -> Tensor:
    """Double-centred Euclidean distance matrix ``A = a − ā_i· − ā_·j + ā`` of ``rows`` ``[n, d]``, ``[n, n]``."""
    diff = rows.unsqueeze(0) - rows.unsqueeze(1)
    # the square root's gradient is infinite at 0 (the diagonal): the distance of a pair is taken from its squared
    # distance plus a tiny floor, as FSHA's defence does (1e-7 there; here relative to the data's scale)
    squared = diff.square().sum(-1)
    floor = torch.finfo(rows.dtype).eps * (1 + squared.detach().max())
    a = (squared + floor).sqrt()
    return a - a.mean(0, keepdim=True) - a.mean(1, keepdim=True) + a.mean()


def distance_correlation(x: Tensor, z: Tensor) -> Tensor:
    """Sample distance correlation (Székely et al., 2007) of ``x`` ``[n, ...]`` and ``z`` ``[n, ...]`` (rows
    flattened): ``dCov_n(x, z) / sqrt(dVar_n(x) · dVar_n(z))`` with ``dCov²_n = (1/n²) Σ A_ij B_ij`` over the
    double-centred distance matrices; in ``[0, 1]``, ``0`` when either side is constant. Differentiable."""
    if len(x) != len(z):
        raise ValueError(f"x and z need the same rows, got {len(x)} and {len(z)}")
    a = _centred_distances(x.reshape(len(x), -1).to(z.dtype))
    b = _centred_distances(z.reshape(len(z), -1))
    tiny = torch.finfo(z.dtype).tiny
    dcov = (a * b).mean().clamp_min(tiny).sqrt()
    dvar = (a.square().mean() * b.square().mean()).sqrt()  # dVar_n(x) · dVar_n(z)
    constant = dvar == 0  # no read of the device: 0 where a side is constant, with finite gradients either way
    return torch.where(
        constant, torch.zeros_like(dcov), dcov / torch.where(constant, torch.ones_like(dvar), dvar).sqrt()
    )


def nopeek_loss(x: Tensor, z: Tensor, owner: Tensor, clients: int) -> Tensor:
    """``Σ_k DCOR(X_k, Z_k)`` over the ``clients`` of a step (``owner`` ``[B]``: each row's client index; a client with
    fewer than two rows adds nothing): NoPeek's term, each client on its own minibatch."""
    total = z.new_zeros(())
    for k in range(clients):
        rows = (owner == k).nonzero().squeeze(1)
        if len(rows) >= 2:
            total = total + distance_correlation(x.index_select(0, rows), z.index_select(0, rows))
    return total


def add_noise(z: Tensor, scale: float, distribution: str, generator: torch.Generator) -> Tensor:
    """``z + ε``, ``ε`` i.i.d. per element: Laplace with scale ``b = scale`` or Gaussian with standard deviation
    ``scale``, drawn on the CPU from ``generator`` (reproducible on any device) and moved to ``z``'s device."""
    shape = tuple(z.shape)
    if distribution == "laplace":  # inverse CDF of a uniform in (-1/2, 1/2): -b·sign(u)·log(1 − 2|u|)
        u = torch.rand(shape, generator=generator, dtype=torch.float64).clamp_min(2**-53) - 0.5  # |u| < 1/2: finite
        noise = -scale * u.sign() * torch.log1p(-2 * u.abs())
    else:
        noise = scale * torch.randn(shape, generator=generator, dtype=torch.float64)
    return z + noise.to(device=z.device, dtype=z.dtype)
