"""Layer-wise gradient dissimilarity across clients (pure functions).

SCALA (journal version, Assumption 3) bounds, for every layer ``n``, the dissimilarity between the gradient of
the global objective ``F = Σ_k p_k F_k`` (eq. 1: ``p_k = |D_k| / Σ_{j∈C} |D_j|``) and each client's local
gradient::

    E_k ‖∇_{w_n} F(w) − ∇_{w_n} F_k(w)‖² ≤ κ_n²,   with ∇F = Σ_k p_k ∇F_k,

the expectation over clients being the ``p_k``-weighted mean. For gradients ``g_k`` of the clients ``k ∈ C``
(``C``: the clients of one round) this module computes the left-hand side exactly,

    ``D_n = Σ_k p_k ‖g_{k,n} − ḡ_n‖²``,  ``ḡ_n = Σ_k p_k g_{k,n}``,

per parameter tensor ("layer") and its sums over a partition of the layers (client half / server half). All
arithmetic is in float64: ``D_n`` is a variance and float32 loses it when the gradients nearly agree.

Two clients holding 1 and 3 samples, one layer of two entries:

>>> grads = [{"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([0.0, 1.0])}]
>>> per_layer = layer_dissimilarity(grads, torch.tensor([1, 3]))  # p = (1/4, 3/4), ḡ = (1/4, 3/4)
>>> float(per_layer["w"])  # 1/4·(9/16 + 9/16) + 3/4·(1/16 + 1/16)
0.375
>>> {k: float(v) for k, v in partition_totals(per_layer, {"client_half": ["w"], "server_half": []}).items()}
{'client_half': 0.375, 'server_half': 0.0, 'total': 0.375}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import torch

__all__ = ["client_weights", "dissimilarity", "layer_dissimilarity", "partition_totals"]


def client_weights(sizes: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """``p_k = |D_k| / Σ_j |D_j|`` as float64 ``[S]`` (``sizes`` ``[S]``: non-negative, positive sum).

    >>> client_weights(torch.tensor([1, 3])).tolist()
    [0.25, 0.75]
    """
    w = torch.as_tensor(sizes).detach().to(torch.float64).reshape(-1)
    if w.numel() == 0:
        raise ValueError("no clients: sizes is empty")
    if not torch.isfinite(w).all() or (w < 0).any():
        raise ValueError(f"sizes must be finite and >= 0, got {w.tolist()}")
    total = w.sum()
    if not total > 0:
        raise ValueError(f"sizes must have a positive sum, got {w.tolist()}")
    return w / total


def dissimilarity(grads: torch.Tensor, sizes: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """``Σ_k p_k ‖g_k − ḡ‖²`` (float64 scalar) of the stacked gradients ``grads`` ``[S, ...]`` of one layer.

    Args:
        grads: row ``k`` is client ``k``'s gradient of the layer (any shape after the first dimension).
        sizes: ``[S]`` weights ``|D_k|`` (normalised here to ``p_k``; already-normalised ``p_k`` work too).

    >>> float(dissimilarity(torch.tensor([[2.0], [-2.0]]), [1, 3]))  # ḡ = -1: 1/4·9 + 3/4·1
    3.0
    """
    p = client_weights(sizes).to(grads.device)
    if grads.dim() == 0 or grads.shape[0] != p.numel():
        raise ValueError(f"grads {tuple(grads.shape)} must be [S, ...] with S = {p.numel()} clients")
    g = grads.detach().to(torch.float64).reshape(p.numel(), -1)  # [S, P]
    mean = p @ g  # ḡ, [P]
    return p @ (g - mean).pow(2).sum(dim=1)


def layer_dissimilarity(
    grads: Sequence[Mapping[str, torch.Tensor]] | Mapping[str, torch.Tensor],
    sizes: torch.Tensor | Sequence[float],
) -> dict[str, torch.Tensor]:
    """``{layer: Σ_k p_k ‖g_{k,layer} − ḡ_layer‖²}`` (float64 scalars) for the clients' gradients.

    Args:
        grads: either one dict ``layer -> tensor`` per client (``S`` dicts with the same keys and shapes), or
            one dict ``layer -> [S, ...]`` of gradients stacked over the clients.
        sizes: ``[S]`` client weights ``|D_k|`` (normalised to ``p_k``).

    Returns:
        One entry per layer, in the order of the (first) dict's keys.
    """
    if isinstance(grads, Mapping):
        stacked = dict(grads)
    else:
        grads = list(grads)
        if not grads:
            raise ValueError("no clients: grads is empty")
        names = list(grads[0])
        for k, g in enumerate(grads):
            if list(g) != names:
                raise ValueError(f"client {k} has layers {list(g)}, client 0 has {names}")
        stacked = {n: torch.stack([g[n] for g in grads]) for n in names}
    return {n: dissimilarity(g, sizes) for n, g in stacked.items()}


def partition_totals(
    per_layer: Mapping[str, torch.Tensor], partition: Mapping[str, Iterable[str]]
) -> dict[str, torch.Tensor]:
    """Sums of ``per_layer`` over the groups of ``partition`` (e.g. ``client_half`` / ``server_half``) and
    over all layers (``total``). An empty group sums to 0 (e.g. the server half of plain FL).

    ``partition`` must be a partition of ``per_layer``'s keys: every layer in exactly one group; no group may be
    called ``total``.
    """
    if "total" in partition:
        raise ValueError("'total' is reserved for the sum over all layers; rename that group")
    seen: dict[str, str] = {}
    totals: dict[str, torch.Tensor] = {}
    for group, names in partition.items():
        acc = torch.zeros((), dtype=torch.float64)
        for n in names:
            if n not in per_layer:
                raise ValueError(f"group {group!r} names layer {n!r}, which has no dissimilarity")
            if n in seen:
                raise ValueError(f"layer {n!r} is in groups {seen[n]!r} and {group!r}")
            seen[n] = group
            acc = acc + per_layer[n].detach().to("cpu", torch.float64)
        totals[group] = acc
    missing = [n for n in per_layer if n not in seen]
    if missing:
        raise ValueError(f"layers {missing} are in no group of the partition")
    totals["total"] = sum(totals.values(), torch.zeros((), dtype=torch.float64))
    return totals
