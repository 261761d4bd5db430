"""Synthetic(λ, µ): FedProx's federated logistic data (Li et al., MLSys 2020; LEAF's "synthetic" in its FedProx
form), which FedLC's Table 4 reports on as Synthetic(0,0), (0.5,0.5) and (1,1) with 100 clients.

For each client ``k`` (one seeded NumPy generator, clients in order):

- ``u_k ~ N(0, λ)`` and ``B_k ~ N(0, µ)`` (``λ``, ``µ`` are standard deviations);
- the client's model ``W_k ∈ R^{d×C}`` and ``b_k ∈ R^C``, every entry ``~ N(u_k, 1)``;
- its input mean ``v_k ∈ R^d``, entries ``~ N(B_k, 1)``; inputs ``x ~ N(v_k, Σ)``, ``Σ = diag(j^−1.2)``, ``j = 1..d``;
- labels ``y = argmax(x·W_k + b_k)`` (no label noise: the softmax is monotone);
- its size ``n_k = ⌊LogNormal(4, 2)⌋ + 50`` (the "power law"), split ``⌊0.9·n_k⌋`` train, the rest test.

``iid=True`` is FedProx's IID variant: one ``W``, ``b`` for every client and ``x ~ N(0, Σ)``. The defaults are
FedProx's code (``d = 60``, ``C = 10``); FedLC states none of them but the 100 clients. ``u_k`` shifts every class's
logit by the same ``u_k·(Σ_j x_j + 1)``, so ``λ`` moves no label: clients differ through their own ``W_k, b_k`` and,
with ``µ``, their inputs (:func:`logistic_labels`). See ``shared/specs/leaf-synthetic.md`` for what the papers leave
unsaid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["FederatedSynthetic", "fedprox_synthetic", "input_covariance", "logistic_labels"]


@dataclass
class FederatedSynthetic:
    """What :func:`fedprox_synthetic` draws: per client ``k``, its train and test inputs ``[n, d]`` and labels
    ``[n]``, and (for checks) its ``W_k [d, C]``, ``b_k [C]``, ``v_k [d]``, ``u_k`` and ``B_k``."""

    train_x: list[np.ndarray]
    train_y: list[np.ndarray]
    test_x: list[np.ndarray]
    test_y: list[np.ndarray]
    weights: list[np.ndarray]
    biases: list[np.ndarray]
    input_means: list[np.ndarray]
    model_shifts: np.ndarray
    input_shifts: np.ndarray


def input_covariance(dim: int) -> np.ndarray:
    """The diagonal of ``Σ``: ``j^−1.2`` for ``j = 1..d``.

    >>> input_covariance(3).round(4).tolist()
    [1.0, 0.4353, 0.2676]
    """
    return np.arange(1, dim + 1, dtype=np.float64) ** -1.2


def logistic_labels(x: np.ndarray, weights: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``argmax(x·W + b)`` over classes, ``[n]`` int64.

    >>> logistic_labels(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[2.0, 0.0], [0.0, 3.0]]), np.zeros(2)).tolist()
    [0, 1]
    """
    return np.argmax(x @ weights + bias, axis=1).astype(np.int64)


def fedprox_synthetic(
    lam: float,
    mu: float,
    num_clients: int = 100,
    dim: int = 60,
    num_classes: int = 10,
    size_mu: float = 4.0,
    size_sigma: float = 2.0,
    size_offset: int = 50,
    train_fraction: float = 0.9,
    iid: bool = False,
    seed: int = 0,
) -> FederatedSynthetic:
    """Draw Synthetic(``lam``, ``mu``) for ``num_clients`` clients (see the module docstring); the same ``seed`` gives
    the same data."""
    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(size_mu, size_sigma, num_clients).astype(np.int64) + size_offset
    scale = np.sqrt(input_covariance(dim))
    shared_w, shared_b = rng.normal(0.0, 1.0, (dim, num_classes)), rng.normal(0.0, 1.0, num_classes)
    out = FederatedSynthetic([], [], [], [], [], [], [], np.zeros(num_clients), np.zeros(num_clients))
    for k, n in enumerate(sizes):
        if iid:
            w, b, v = shared_w, shared_b, np.zeros(dim)
        else:
            out.model_shifts[k], out.input_shifts[k] = rng.normal(0.0, lam), rng.normal(0.0, mu)
            w = rng.normal(out.model_shifts[k], 1.0, (dim, num_classes))
            b = rng.normal(out.model_shifts[k], 1.0, num_classes)
            v = rng.normal(out.input_shifts[k], 1.0, dim)
        x = v + rng.normal(0.0, 1.0, (int(n), dim)) * scale
        y = logistic_labels(x, w, b)
        order = rng.permutation(int(n))
        cut = int(train_fraction * n)
        out.train_x.append(x[order[:cut]].astype(np.float32))
        out.train_y.append(y[order[:cut]])
        out.test_x.append(x[order[cut:]].astype(np.float32))
        out.test_y.append(y[order[cut:]])
        out.weights.append(w)
        out.biases.append(b)
        out.input_means.append(v)
    return out
