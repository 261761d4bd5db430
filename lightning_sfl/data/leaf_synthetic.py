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

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from lightning_sfl.errors import ConfigError, check_memory

__all__ = [
    "FederatedSynthetic",
    "StackedSynthetic",
    "fedprox_synthetic",
    "input_covariance",
    "logistic_labels",
    "stacked_synthetic",
]


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


def _client_draws(
    lam: float,
    mu: float,
    num_clients: int,
    dim: int,
    num_classes: int,
    size_mu: float,
    size_sigma: float,
    size_offset: int,
    iid: bool,
    seed: int,
) -> tuple[np.ndarray, Iterator[tuple]]:
    """The clients' sizes ``n_k`` ``[K]`` and an iterator over each client's ``(u_k, B_k, W_k, b_k, v_k, x, y)``: its
    ``n_k`` rows ``x`` (float64) and labels ``y`` in the shuffled order whose first ``⌊0.9·n_k⌋`` are its train rows.
    The one seeded stream of draws, in FedProx's order, that every form of the data is cut from."""
    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(size_mu, size_sigma, num_clients).astype(np.int64) + size_offset

    def clients() -> Iterator[tuple]:
        scale = np.sqrt(input_covariance(dim))
        shared_w, shared_b = rng.normal(0.0, 1.0, (dim, num_classes)), rng.normal(0.0, 1.0, num_classes)
        for n in sizes.tolist():
            u = b_shift = 0.0
            if iid:
                w, b, v = shared_w, shared_b, np.zeros(dim)
            else:
                u, b_shift = rng.normal(0.0, lam), rng.normal(0.0, mu)
                w = rng.normal(u, 1.0, (dim, num_classes))
                b = rng.normal(u, 1.0, num_classes)
                v = rng.normal(b_shift, 1.0, dim)
            x = rng.standard_normal((n, dim))  # the values rng.normal(0, 1, (n, d)) draws
            x *= scale
            x += v
            y = logistic_labels(x, w, b)
            order = rng.permutation(n)
            yield u, b_shift, w, b, v, x[order], y[order]

    return sizes, clients()


def _check_sizes(num_clients: int, size_sigma: float, size_offset: int, train_fraction: float) -> None:
    if num_clients < 1:
        raise ConfigError(f"num_clients={num_clients} must be >= 1")
    if not size_sigma >= 0:
        raise ConfigError(f"size_sigma={size_sigma} must be >= 0 (a standard deviation)")
    if not 0 < train_fraction < 1 or int(train_fraction * size_offset) < 1:
        raise ConfigError(
            f"train_fraction={train_fraction}, size_offset={size_offset}: every client needs a train row "
            "(0 < train_fraction < 1 and train_fraction·size_offset >= 1)"
        )


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
    the same data. Keeps every client's arrays and its ``W_k``, ``b_k``, ``v_k`` (about 5 KB a client besides its
    rows): :func:`stacked_synthetic` draws the same rows into one array, for many clients."""
    _check_sizes(num_clients, size_sigma, size_offset, train_fraction)
    sizes, clients = _client_draws(lam, mu, num_clients, dim, num_classes, size_mu, size_sigma, size_offset, iid, seed)
    out = FederatedSynthetic([], [], [], [], [], [], [], np.zeros(num_clients), np.zeros(num_clients))
    for k, (n, (u, b_shift, w, b, v, x, y)) in enumerate(zip(sizes.tolist(), clients)):
        cut = int(train_fraction * n)
        out.model_shifts[k], out.input_shifts[k] = u, b_shift
        out.train_x.append(x[:cut].astype(np.float32))
        out.train_y.append(y[:cut])
        out.test_x.append(x[cut:].astype(np.float32))
        out.test_y.append(y[cut:])
        out.weights.append(w)
        out.biases.append(b)
        out.input_means.append(v)
    return out


@dataclass
class StackedSynthetic:
    """What :func:`stacked_synthetic` draws: every client's train rows stacked in client order, ``train_x [Σ n_k, d]``
    float32 and ``train_y`` int64, its test rows likewise, and each client's number of train and of test rows,
    ``[K]`` int64 (client ``k``'s rows follow those of clients ``0..k-1``)."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    train_sizes: np.ndarray
    test_sizes: np.ndarray


def stacked_synthetic(
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
) -> StackedSynthetic:
    """The rows :func:`fedprox_synthetic` draws with the same arguments, bitwise, written client by client into
    arrays allocated once (no per-client arrays kept, no copy to stack them): what the data module holds, for
    tens of thousands of clients.

    >>> a, b = stacked_synthetic(1.0, 1.0, num_clients=3, seed=2), fedprox_synthetic(1.0, 1.0, num_clients=3, seed=2)
    >>> bool((a.train_x == np.concatenate(b.train_x)).all()), a.test_sizes.tolist() == [len(y) for y in b.test_y]
    (True, True)
    """
    _check_sizes(num_clients, size_sigma, size_offset, train_fraction)
    sizes, clients = _client_draws(lam, mu, num_clients, dim, num_classes, size_mu, size_sigma, size_offset, iid, seed)
    train_sizes = (train_fraction * sizes).astype(np.int64)  # ⌊0.9·n_k⌋, as int(0.9 * n) per client
    test_sizes = sizes - train_sizes
    rows = int(sizes.sum())  # (before the arrays: a setting they cannot fit in is refused, not an allocation error)
    check_memory(f"Synthetic({lam:g}, {mu:g})'s data ({rows:,} rows of {dim} features for {num_clients:,} clients)",
                 rows * (dim * 4 + 8), "--data.num_clients or --data.leaf_size_log_mean")  # fmt: skip
    out = StackedSynthetic(
        np.empty((int(train_sizes.sum()), dim), np.float32),
        np.empty(int(train_sizes.sum()), np.int64),
        np.empty((int(test_sizes.sum()), dim), np.float32),
        np.empty(int(test_sizes.sum()), np.int64),
        train_sizes,
        test_sizes,
    )
    train_at = test_at = 0
    for cut, rest, (*_, x, y) in zip(train_sizes.tolist(), test_sizes.tolist(), clients):
        out.train_x[train_at : train_at + cut] = x[:cut]  # float64 -> float32 as astype rounds
        out.train_y[train_at : train_at + cut] = y[:cut]
        out.test_x[test_at : test_at + rest] = x[cut:]
        out.test_y[test_at : test_at + rest] = y[cut:]
        train_at, test_at = train_at + cut, test_at + rest
    return out
