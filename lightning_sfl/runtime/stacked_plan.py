"""How :class:`~lightning_sfl.runtime.stacked_bank.StackedBank` batches slots of unequal ``B_k``: which slots run
together (:func:`plan_groups`), what one more group costs (:func:`group_cost_rows`), and the gathers that turn the
row-concatenated input into one ``[R, G, ...]`` tensor per group and the outputs back (:func:`build_plan`).

Pure functions of sizes, rows and the template's FLOPs; the bank caches their results per pattern of ``B_k``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["GROUP_OVERHEAD_FLOPS", "Plan", "build_plan", "group_cost_rows", "param_cuts", "plan_groups"]

#: Device type -> fixed cost of running one more group, in FLOPs per layer of the template: what a layer's forward
#: and backward kernels cost to start, against the arithmetic of a row (a CPU core: ~20 µs, i.e. ~2 MFLOP; a GPU:
#: launches of ~10 µs against tens of TFLOP/s, so padding is nearly free there).
GROUP_OVERHEAD_FLOPS: dict[str, float] = {"cpu": 2e6, "cuda": 5e8}


@dataclass
class Plan:
    """A forward plan (:func:`build_plan`): per group its stacked-tensor rows and ``R``; per group the input rows to
    gather (``[R·G]``, ``[R, G]`` order) and which outputs are real (``None``: all); the permutation from the groups'
    order back to row order (``None``: already in order); whether padding is gathered; whether the rows run as
    they are (one group, no padding: then no gathers); and how the stacked parameters split into the groups
    (:func:`param_cuts`)."""

    groups: list[tuple[list[int], int]]
    gathers: list[tuple[torch.Tensor, torch.Tensor | None]]
    inverse: torch.Tensor | None
    padded: bool
    whole: bool
    cuts: tuple[list[int], list[int]] | None = None


def plan_groups(
    sizes: Sequence[int], equal_sizes: bool = False, group_cost: float = 0.0
) -> list[tuple[list[int], int]]:
    """How :class:`StackedBank` batches row blocks of unequal sizes ``B_k``: a list of ``(positions, R)``, each group
    run as one ``[R, G, ...]`` batch whose blocks are zero-padded to ``R`` rows; blocks of 0 rows are left out.

    ``equal_sizes`` (a layer mixes the rows of a batch, e.g. BatchNorm in training): groups of equal ``B_k``, no
    padding. Otherwise the groups minimise ``Σ_groups (group_cost + G·R)``: the rows computed (padding included) plus
    a price per extra batch (``group_cost`` rows; 0: one group per distinct size), by dynamic programming over the
    sorted distinct sizes (a group holds the blocks whose sizes fall in a range).

    >>> plan_groups([2, 1, 1, 2, 1], group_cost=0)  # 10 rows as one group (3 of padding), 7 as two
    [([1, 2, 4], 1), ([0, 3], 2)]
    >>> plan_groups([2, 1, 1, 2, 1], group_cost=4)  # an extra group costs more than the 3 padded rows it saves
    [([0, 1, 2, 3, 4], 2)]
    >>> plan_groups([3, 0, 1, 3], equal_sizes=True)
    [([0, 3], 3), ([2], 1)]
    """
    if equal_sizes:
        by_size: dict[int, list[int]] = defaultdict(list)
        for k, b in enumerate(sizes):
            if b > 0:
                by_size[b].append(k)
        return [(idx, b) for b, idx in by_size.items()]
    distinct = sorted({b for b in sizes if b > 0})
    if not distinct:
        return []
    count = [sum(1 for b in sizes if b == d) for d in distinct]
    best = [0.0] + [float("inf")] * len(distinct)  # best[j]: cheapest plan of the j smallest sizes
    start = [0] * (len(distinct) + 1)
    for j in range(1, len(distinct) + 1):
        members = 0
        for i in range(j, 0, -1):  # the last group holds sizes distinct[i-1 .. j-1], padded to distinct[j-1]
            members += count[i - 1]
            cost = best[i - 1] + group_cost + members * distinct[j - 1]
            if cost < best[j]:
                best[j], start[j] = cost, i - 1
    bounds, j = [], len(distinct)
    while j > 0:
        bounds.append((distinct[start[j]], distinct[j - 1]))
        j = start[j]
    return [([k for k, b in enumerate(sizes) if lo <= b <= hi], hi) for lo, hi in reversed(bounds)]


def build_plan(
    positions: list[tuple[list[int], int]],
    sizes: Sequence[int],
    rows_of: Sequence[int],
    device: torch.device,
    num_slots: int | None = None,
) -> Plan:
    """The :class:`Plan` of the groups ``positions`` (:func:`plan_groups`) for row blocks of ``sizes[k]`` rows of slot
    ``k``, held in rows ``rows_of[k]`` of the stacked tensors: each group's gather of the input in ``[R, G]`` order
    (padding: row ``sum(sizes)``, a zero row appended by the caller), the permutation back to row order, and the
    parameter cuts of a bank of ``num_slots`` rows (default ``max(rows_of) + 1``).

    >>> p = build_plan([([1], 1), ([0], 2)], [2, 1], rows_of=[5, 7], device=torch.device("cpu"))
    >>> p.groups, [pos.tolist() for pos, _ in p.gathers], p.inverse.tolist(), p.padded, p.whole
    ([([7], 1), ([5], 2)], [[2], [0, 1]], [1, 2, 0], False, False)
    """
    n = sum(sizes)
    groups = [([rows_of[k] for k in idx], r) for idx, r in positions]
    whole = len(positions) == 1 and len(positions[0][0]) == len(sizes) and all(b == positions[0][1] for b in sizes)
    if whole:  # the rows run as they are: no gathers, no permutation, one group
        return Plan(groups, [], None, False, True)
    offsets = torch.tensor([0, *sizes]).cumsum(0)
    gathers, order, padded = [], [], False
    for idx, r in positions:
        j = torch.arange(r).unsqueeze(1)
        pos = torch.where(j < torch.tensor([sizes[k] for k in idx]), offsets[idx] + j, n).flatten()
        valid = (pos < n).nonzero().squeeze(1)  # [R * G] in [R, G] order
        padded = padded or len(valid) < len(pos)
        gathers.append((pos.to(device), None if len(valid) == len(pos) else valid.to(device)))
        order.append(pos[valid])
    order_t = torch.cat(order)
    inverse = None if bool((order_t == torch.arange(n)).all()) else torch.argsort(order_t).to(device)
    slots = max(rows_of) + 1 if num_slots is None else num_slots
    return Plan(groups, gathers, inverse, padded, whole, param_cuts([g for g, _ in groups], slots))


def param_cuts(groups: list[list[int]], num_slots: int) -> tuple[list[int], list[int]] | None:
    """``torch.split`` sizes that cut rows ``0..num_slots-1`` of the stacked tensors so that each group (a range of
    rows) is one chunk, and each group's chunk number; ``None`` when there is one group only or the groups are not
    disjoint ranges.

    >>> param_cuts([[3, 4], [0, 1, 2]], 6)
    ([3, 2, 1], [1, 0])
    >>> param_cuts([[0, 2], [1]], 3) is None
    True
    """
    if len(groups) < 2 or any(g != list(range(g[0], g[0] + len(g))) for g in groups):
        return None
    cuts, chunk_of, end = [], [0] * len(groups), 0
    for start, i in sorted((g[0], i) for i, g in enumerate(groups)):
        if start < end:
            return None
        if start > end:
            cuts.append(start - end)  # rows no group runs
        chunk_of[i], end = len(cuts), start + len(groups[i])
        cuts.append(len(groups[i]))
    if end < num_slots:
        cuts.append(num_slots - end)
    return cuts, chunk_of


def group_cost_rows(template: nn.Module, layers: int, x: torch.Tensor) -> float:
    """The price of one more group in rows for inputs like ``x`` (``[B, ...]``): ``layers`` times
    :data:`GROUP_OVERHEAD_FLOPS` of ``x``'s device over ``template``'s forward FLOPs per row (counted on the meta
    device, in the template's own dtype: FLOPs do not depend on it, and a float32 template may serve float64 slots).
    """
    dtype = next((p.dtype for p in template.parameters()), x.dtype)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        template(torch.empty(2, *x.shape[1:], dtype=dtype, device="meta"))
    per_row = max(counter.get_total_flops() / 2, 1.0)
    return layers * GROUP_OVERHEAD_FLOPS.get(x.device.type, GROUP_OVERHEAD_FLOPS["cuda"]) / per_row
