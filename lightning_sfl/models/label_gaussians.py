"""Per-label Gaussian statistics of the activations at the cut (GAS, eqs. 11-12), and generation from them.

Each label ``y`` keeps ``N(μ_y, Σ_y)`` over flattened activations ``[D]``, updated with a weight ``s(n)`` per
activation (GAS's progress weight; the experiments use ``s(n) = n``). Eqs. 11-12 in population form (no Bessel
correction), one activation ``A`` of weight ``w`` at a time, with ``S`` the weight seen so far::

    μ_N = (S·μ_{N-1} + w·A) / (S + w)                                                        (11)
    Σ_N = [S·(Σ_{N-1} + (μ_N − μ_{N-1})(μ_N − μ_{N-1})ᵀ) + w·(μ_N − A)(μ_N − A)ᵀ] / (S + w)   (12)

:func:`merge_moments` applies a whole batch at once (weighted batch moments merged with the parallel-axis rule);
that is exactly the one-at-a-time recursion (the tests check it to float64 rounding). Three forms of ``Σ_y``:

* ``full``: ``[M, D, D]`` (a 4096-dim cut with 10 labels is ~670 MB in float32);
* ``diag``: the variances ``[M, D]`` only (the diagonal of ``full``, exactly);
* ``lowrank``: the exact variances plus a rank-``r`` factor ``U`` ``[M, D, r]`` of the covariance; samples are
  ``μ + U·ε_r + sqrt(max(var − rowsum(U²), 0))·ε_D``: the low-rank part's diagonal is topped up to the exact
  variances. With ``r`` at least the number of activations seen, ``U·Uᵀ = Σ`` exactly.

>>> g = LabelGaussians(num_classes=2, dim=3, covariance="diag")
>>> g.update(torch.tensor([[1.0, 2, 3], [3.0, 2, 1]]), torch.tensor([0, 0]), torch.tensor([1.0, 1.0]))
>>> g.mean[0].tolist(), g.second[0].tolist(), g.ready()
([2.0, 2.0, 2.0], [1.0, 0.0, 1.0], False)
"""

from __future__ import annotations

import torch

from lightning_sfl.errors import ConfigError

__all__ = [
    "COVARIANCES",
    "LabelGaussians",
    "batch_moments",
    "generation_counts",
    "label_blocks",
    "merge_moments",
    "merge_variances_by_label",
]

COVARIANCES = ("full", "diag", "lowrank")


def batch_moments(x: torch.Tensor, w: torch.Tensor, form: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch's weight ``W_b = Σw``, weighted mean ``μ_b`` and weighted population covariance ``Σ_b`` (``full``
    ``[D, D]``) or variances (``diag``, ``[D]``) of rows ``x`` ``[n, D]`` with weights ``w`` ``[n]``."""
    wb = w.sum()
    mb = (w[:, None] * x).sum(0) / wb
    xc = x - mb
    cb = (w[:, None] * xc).T @ xc / wb if form == "full" else (w[:, None] * xc * xc).sum(0) / wb
    return wb, mb, cb


def merge_moments(
    weight: torch.Tensor, mean: torch.Tensor, cov: torch.Tensor | None, x: torch.Tensor, w: torch.Tensor, form: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Merge a batch into one label's running moments (eqs. 11-12 applied to every row of ``x`` in order).

    Args:
        weight: ``S``, the weight seen so far (0-dim).
        mean: ``μ`` ``[D]``.
        cov: ``Σ`` ``[D, D]`` (``full``), the variances ``[D]`` (``diag``); ignored when ``S = 0``.
        x: the batch's activations ``[n, D]``.
        w: their weights ``s(n)`` ``[n]``, positive.
        form: ``full`` or ``diag``.

    Returns:
        ``(S + Σw, μ', Σ')`` with ``Σ' = (S·Σ + W_b·Σ_b)/S' + S·W_b/S'²·(μ − μ_b)(μ − μ_b)ᵀ`` (``Σ_b``: the
        batch's weighted population covariance, ``μ_b`` its weighted mean, ``W_b = Σw``).

    >>> s, m, v = merge_moments(torch.tensor(0.0), torch.zeros(1), None, torch.tensor([[0.0], [2.0]]),
    ...     torch.tensor([1.0, 3.0]), "diag")
    >>> s.item(), m.item(), v.item()  # mean 1.5; variance (1·1.5² + 3·0.5²)/4
    (4.0, 1.5, 0.75)
    """
    wb, mb, cb = batch_moments(x, w, form)
    if weight <= 0:
        return wb, mb, cb
    total = weight + wb
    delta = mean - mb
    shift = torch.outer(delta, delta) if form == "full" else delta * delta
    new_cov = (weight * cov + wb * cb) / total + weight * wb / total**2 * shift
    return total, (weight * mean + wb * mb) / total, new_cov


def label_blocks(labels: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, list[int], list[tuple[int, int]]]:
    """The rows of ``labels`` ``[n]`` sorted by label, each label's rows in their order (``order`` ``[n]``), the labels
    present (ascending) and each one's ``(start, stop)`` in that order.

    >>> order, present, blocks = label_blocks(torch.tensor([2, 0, 2, 2]), 3)
    >>> order.tolist(), present, blocks
    ([1, 0, 2, 3], [0, 2], [(0, 1), (1, 4)])
    """
    order = torch.argsort(labels, stable=True)
    counts = torch.bincount(labels, minlength=num_classes).tolist()
    present, blocks, start = [], [], 0
    for y, n in enumerate(counts):
        if n:
            present.append(y)
            blocks.append((start, start + n))
            start += n
    return order, present, blocks


def merge_variances_by_label(
    weight: torch.Tensor,
    mean: torch.Tensor,
    var: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor,
    blocks: list[tuple[int, int]],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`merge_moments` (``diag``) of ``P`` labels at once, element for element the same arithmetic: the labels'
    ``S`` ``[P]``, ``μ`` ``[P, D]`` and variances ``[P, D]``; their rows ``x`` ``[n, D]`` and weights ``w`` ``[n]``
    sorted by label, label ``p``'s at ``blocks[p]`` (:func:`label_blocks`). Each label's batch moments come from its
    own rows (:func:`batch_moments`, small temporaries); the merge is elementwise, for every label at once.

    >>> s, m, v = merge_variances_by_label(torch.zeros(1), torch.zeros(1, 1), torch.zeros(1, 1),
    ...     torch.tensor([[0.0], [2.0]]), torch.tensor([1.0, 3.0]), [(0, 2)])
    >>> s.tolist(), m.tolist(), v.tolist()
    ([4.0], [[1.5]], [[0.75]])
    """
    wb, mb, cb = (torch.stack(t) for t in zip(*(batch_moments(x[a:b], w[a:b], "diag") for a, b in blocks)))
    total = weight + wb
    delta = mean - mb
    shift = delta * delta
    new_var = (weight[:, None] * var + wb[:, None] * cb) / total[:, None] + (weight * wb / total**2)[:, None] * shift
    new_mean = (weight[:, None] * mean + wb[:, None] * mb) / total[:, None]
    first = weight <= 0  # a label's first rows: its batch moments alone
    return (
        torch.where(first, wb, total),
        torch.where(first[:, None], mb, new_mean),
        torch.where(first[:, None], cb, new_var),
    )


def _merge_factor(weight, factor, mean, x, w, rank: int) -> torch.Tensor:
    """Rank-``r`` factor ``U'`` of the merged covariance from the old factor ``U`` (``U·Uᵀ`` = old low-rank part)
    and the batch: the merged covariance is ``F·Fᵀ`` with ``F = [sqrt(S/S')·U, sqrt(w_i/S')·(x_i − μ_b),
    sqrt(S·W_b)/S'·(μ − μ_b)]``; ``U'`` keeps its top ``r`` singular directions."""
    wb = w.sum()
    total = weight + wb
    mb = (w[:, None] * x).sum(0) / wb
    cols = [(w / total).sqrt()[:, None] * (x - mb)]
    if weight > 0:
        cols = [(weight / total).sqrt() * factor.T, *cols, ((weight * wb).sqrt() / total * (mean - mb))[None]]
    f = torch.cat(cols).T  # [D, columns]
    u, s, _ = torch.linalg.svd(f, full_matrices=False)
    out = torch.zeros_like(factor)
    k = min(rank, s.numel())
    out[:, :k] = u[:, :k] * s[:k]
    return out


def generation_counts(labels: torch.Tensor, num_classes: int, batch_size: int) -> torch.Tensor:
    """How many activations to generate per label for one server update (the GAS code's rule; the paper only
    says "according to the skewness"): ``max(B − n_y, 0)`` for ``n_y`` real activations of label ``y`` in the
    buffer, so an absent label gets ``B`` and no label is cut down.

    >>> generation_counts(torch.tensor([0, 0, 0, 2]), num_classes=4, batch_size=2).tolist()
    [0, 2, 1, 2]
    """
    return (batch_size - torch.bincount(labels, minlength=num_classes)).clamp_min(0)


class LabelGaussians:
    """Running ``N(μ_y, Σ_y)`` per label (GAS eqs. 11-12) with generation (Alg. 1, line 9).

    The tensors (``weight`` ``[M]``, ``mean`` ``[M, D]``, ``second``: ``[M, D, D]`` / ``[M, D]`` / ``[M, D]``
    variances, and ``factor`` ``[M, D, r]`` for ``lowrank``) are listed by :meth:`tensors` so that a method
    checkpoints them (``add_state``) and a resumed run samples the same activations.

    Args:
        num_classes: ``M``.
        dim: ``D``, the flattened activation size.
        covariance: ``full``, ``diag`` or ``lowrank`` (see the module docstring).
        rank: ``r`` of ``lowrank``.
        ridge: added to the diagonal when sampling (the GAS code adds ``1e-5·I`` at every merge, so that its
            ridge accumulates; here it is added once, at sampling).
        nonnegative: clamp samples at 0 (real activations at a ReLU cut are; the GAS code does not clamp).
    """

    def __init__(
        self,
        num_classes: int,
        dim: int,
        covariance: str = "full",
        rank: int = 16,
        ridge: float = 0.0,
        nonnegative: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if covariance not in COVARIANCES:
            raise ConfigError(f"covariance={covariance!r} must be one of {', '.join(COVARIANCES)}")
        if int(rank) != rank or rank < 1:
            raise ConfigError(f"rank={rank!r} must be a whole number >= 1")
        if ridge < 0:
            raise ConfigError(f"ridge={ridge!r} must be >= 0")
        self.num_classes, self.dim, self.covariance, self.rank = num_classes, dim, covariance, int(rank)
        self.ridge, self.nonnegative = float(ridge), nonnegative
        self.weight = torch.zeros(num_classes, dtype=dtype)
        self.mean = torch.zeros(num_classes, dim, dtype=dtype)
        full = covariance == "full"
        self.second = torch.zeros((num_classes, dim, dim) if full else (num_classes, dim), dtype=dtype)
        self.factor = torch.zeros(num_classes, dim, self.rank, dtype=dtype) if covariance == "lowrank" else None

    def tensors(self) -> dict[str, torch.Tensor]:
        """The state to checkpoint, by name."""
        out = {"weight": self.weight, "mean": self.mean, "second": self.second}
        return out if self.factor is None else {**out, "factor": self.factor}

    def load(self, tensors: dict[str, torch.Tensor]) -> None:
        for name, value in tensors.items():
            getattr(self, name).copy_(value)

    def ready(self) -> bool:
        """Every label has statistics (GAS generates only from then on)."""
        return bool((self.weight > 0).all())

    @torch.no_grad()
    def update(self, activations: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> None:
        """Merge activations ``[n, *shape]`` with labels ``[n]`` and weights ``s(n)`` ``[n]`` (eqs. 11-12): each
        label's rows, in their order, by :func:`merge_moments` (``diag``: every label at once,
        :func:`merge_variances_by_label`, the same arithmetic)."""
        order, present, blocks = label_blocks(labels, self.num_classes)
        if not present:
            return
        xs = activations.reshape(len(activations), -1).index_select(0, order).to(self.mean.dtype)  # by label
        ws = weights.to(self.mean.dtype).expand(len(xs)).index_select(0, order)
        if self.covariance == "diag":
            idx = torch.tensor(present, device=self.mean.device)
            merged = merge_variances_by_label(self.weight[idx], self.mean[idx], self.second[idx], xs, ws, blocks)
            self.weight[idx], self.mean[idx], self.second[idx] = merged
            return
        form = "full" if self.covariance == "full" else "diag"
        for y, (start, stop) in zip(present, blocks):
            xy, wy = xs[start:stop], ws[start:stop]
            if self.factor is not None:
                self.factor[y] = _merge_factor(self.weight[y], self.factor[y], self.mean[y], xy, wy, self.rank)
            s, m, c = merge_moments(self.weight[y], self.mean[y], self.second[y], xy, wy, form)
            self.weight[y], self.mean[y], self.second[y] = s, m, c

    @torch.no_grad()
    def sample(
        self, counts: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``counts[y]`` samples of every label: activations ``[Σ counts, D]`` and their labels ``[Σ counts]``."""
        xs, ys = [], []
        for y, n in enumerate(counts.tolist()):
            if n == 0:
                continue
            eps = self._noise(n, self.dim, generator)
            if self.covariance == "diag":
                x = self.mean[y] + eps * (self.second[y] + self.ridge).sqrt()
            elif self.covariance == "lowrank":
                u = self.factor[y]
                rest = (self.second[y] - (u * u).sum(1)).clamp_min(0) + self.ridge
                z = self._noise(n, self.rank, generator)
                x = self.mean[y] + z @ u.T + eps * rest.sqrt()
            else:
                x = self.mean[y] + eps @ _psd_sqrt(self.second[y], self.ridge).T
            xs.append(x.clamp_min(0) if self.nonnegative else x)
            ys.append(torch.full((n,), y, dtype=torch.long, device=self.mean.device))
        if not xs:
            return self.mean.new_zeros(0, self.dim), torch.zeros(0, dtype=torch.long, device=self.mean.device)
        return torch.cat(xs), torch.cat(ys)

    def _noise(self, n: int, dim: int, generator: torch.Generator | None) -> torch.Tensor:
        """Standard normal ``[n, dim]`` drawn on the CPU (a CPU generator gives the same draws on every device),
        on the statistics' device."""
        return torch.randn(n, dim, generator=generator, dtype=self.mean.dtype).to(self.mean.device)


def _psd_sqrt(cov: torch.Tensor, ridge: float) -> torch.Tensor:
    """``L`` with ``L·Lᵀ = Σ + ridge·I``: Cholesky, or the eigen-decomposition (negative rounding clipped) when the
    covariance is singular (it is until a label has seen more than ``D`` activations)."""
    eye = torch.eye(len(cov), dtype=cov.dtype, device=cov.device)
    chol, info = torch.linalg.cholesky_ex(cov + ridge * eye)
    if info == 0:
        return chol
    vals, vecs = torch.linalg.eigh(cov + ridge * eye)
    return vecs * vals.clamp_min(0).sqrt()
