"""S²FL (Yan et al., "Have your cake and eat it too: toward efficient and accurate split federated learning", 2023):
MiniBatch-SFL with label-balanced groups of clients and an adaptive split point.

(a) **Grouping.** At the start of each round the round's ``S`` clients are split into ``G`` groups (``num_groups``,
2 by default) so that every group's pooled label histogram is close to uniform: a swap search
(:func:`balanced_groups`) minimising the mean over groups of ``‖h_g / |h_g| − 1/M‖₂``, ``h_g = Σ_{k∈g} b_k·P_k``
(the rows client ``k`` contributes to each minibatch, by label). The groups are kept for the round's ``T`` iterations.

(b) **Per-group server steps.** In every local iteration each group's activations train a copy of the server half
from the same ``w_s``; the copies are averaged (uniformly over groups). With one optimiser this is one step on the
mean over groups of each group's mean cross-entropy (:func:`group_mean_loss`), the only hook S²FL overrides; with
plain SGD it is exactly the average of ``G`` steps taken from ``w_s``. Clients get plain cross-entropy gradients
from the pre-update forward, as in MiniBatch-SFL. With ``num_groups = 1`` S²FL *is* MiniBatch-SFL.

(c) **Adaptive split.** S²FL slides the cut per client so that slow clients train fewer layers. As in the GAS
authors' comparison it changes only the simulated time, not the training: with
``--clock.barrier iteration`` the system model (:class:`~lightning_sfl.system.wireless.WirelessCell`) may charge each
client any of the model's cut points (:meth:`S2FL.split_options`) and moves clients off ``split_point`` where that
shortens the round; ``adaptive_split=False`` keeps everyone at ``split_point``.
"""

from __future__ import annotations

import torch
from typing_extensions import override

from lightning_sfl.algorithms.registry import register
from lightning_sfl.algorithms.splitfed import MiniBatchSFL
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Step
from lightning_sfl.system.timing import SystemModel

__all__ = ["S2FL", "balanced_groups", "group_imbalance", "group_mean_loss"]


def group_imbalance(hist: torch.Tensor, group: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Mean over the non-empty groups of ``‖h_g / |h_g| − 1/M‖₂`` (``hist``: ``[S, M]`` label counts of each client;
    ``group``: ``[S]`` group ids in ``[0, num_groups)``).

    >>> hist = torch.tensor([[2.0, 0.0], [0.0, 2.0]])
    >>> float(group_imbalance(hist, torch.tensor([0, 0]), 1))
    0.0
    >>> round(float(group_imbalance(hist, torch.tensor([0, 1]), 2)), 4)
    0.7071
    """
    pooled = torch.zeros(num_groups, hist.shape[1], dtype=torch.float64).index_add_(0, group, hist.double())
    total = pooled.sum(dim=1)
    used = total > 0
    dist = pooled[used] / total[used, None]
    return (dist - 1.0 / hist.shape[1]).norm(dim=1).mean()


def balanced_groups(hist: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Group ids ``[S]`` of ``S`` clients with label histograms ``hist`` ``[S, M]``: start from slot order dealt
    round-robin (client ``i`` in group ``i mod G``), then repeatedly apply the swap of two clients of different
    groups that lowers :func:`group_imbalance` most, until no swap lowers it (group sizes stay as dealt).
    Deterministic; ``G`` is capped at ``S``.

    >>> balanced_groups(torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]), 2).tolist()
    [0, 1, 0, 1]
    """
    if int(num_groups) != num_groups or num_groups < 1:
        raise ConfigError(f"num_groups={num_groups!r} must be a whole number >= 1")
    s = len(hist)
    g = max(1, min(int(num_groups), s))
    group = torch.arange(s) % g
    best = group_imbalance(hist, group, g)
    pairs = [(i, j) for i in range(s) for j in range(i + 1, s)]
    while True:
        choice = None
        for i, j in pairs:
            if group[i] == group[j]:
                continue
            trial = group.clone()
            trial[i], trial[j] = group[j], group[i]
            cost = group_imbalance(hist, trial, g)
            if cost < best - 1e-12:
                best, choice = cost, trial
        if choice is None:
            return group
        group = choice


def group_mean_loss(row_losses: torch.Tensor, group_of_row: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """``(1/G') Σ_g mean_{i ∈ g} ℓ_i`` over the ``G'`` groups with rows: ``row_losses``, ``group_of_row``: ``[B]``;
    ``group_sizes``: ``[G]`` rows of each group (global counts under DDP, where a shard holds part of the rows).

    >>> float(group_mean_loss(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([0, 0, 1]), torch.tensor([2, 1])))
    3.5
    """
    sizes = group_sizes.to(row_losses.dtype)
    groups = (sizes > 0).sum()
    return (row_losses / sizes[group_of_row]).sum() / groups


@register("s2fl", family="split")
class S2FL(MiniBatchSFL):
    """S²FL (see the module docstring): MiniBatch-SFL whose server half takes the mean of per-group steps over
    label-balanced groups of clients; the adaptive split point acts on the simulated clock only.

    Args:
        num_groups: ``G``, groups of clients per round (S²FL uses 2).
        adaptive_split: with ``--clock.barrier iteration``, let the clock move clients to the cut points that shorten
            the round (S²FL's sliding split); ``False``: every client at ``split_point`` (refused on a clock that
            never slides the cut, where it would change nothing).
        **kwargs: see :class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm`.
    """

    supports_tail = False  # the cut slides per group

    def __init__(self, num_groups: int = 2, adaptive_split: bool = True, **kwargs) -> None:
        if int(num_groups) != num_groups or num_groups < 1:
            raise ConfigError(f"num_groups={num_groups!r} must be a whole number >= 1")
        super().__init__(**kwargs)
        self.num_groups, self.adaptive_split = int(num_groups), bool(adaptive_split)
        self._slot_group: torch.Tensor | None = None  # [S] group of each slot in this round (recomputed each round)

    @override
    def start_round(self, step: Step) -> None:
        """(a): the round's groups, from each client's rows per minibatch by label, ``b_k·P_k``."""
        super().start_round(step)
        hist = step.sizes.double()[:, None].cpu() * self.label_dist[step.clients].double().cpu()
        self._slot_group = balanced_groups(hist, self.num_groups).to(self.device)

    @override
    def server_loss(self, logits: torch.Tensor, step: Step) -> torch.Tensor:
        """(b): the mean over groups of each group's mean cross-entropy (its gradient: the averaged copies)."""
        rows = torch.nn.functional.cross_entropy(logits, step.y, reduction="none")
        group = self._slot_group[step.slots_tensor]  # [S] of this step's clients
        sizes = torch.zeros(self.num_groups, dtype=step.sizes.dtype, device=step.sizes.device)
        sizes.index_add_(0, group, step.sizes)
        return group_mean_loss(rows, group[step.owner], sizes)

    @override
    def check_system(self, system: SystemModel) -> None:
        """``adaptive_split=False`` is refused where the clock never slides the cut: it would change nothing, every
        client being charged ``split_point`` anyway."""
        if not self.adaptive_split and not system.slides_cut():
            raise ConfigError(
                "adaptive_split=False changes nothing on this clock: it charges every client split_point anyway (the "
                "sliding split needs --clock.barrier iteration)"
            )

    @override
    def split_options(self) -> list[str] | None:
        """(c): the cut points the clock may charge a client (``None``: only ``split_point``)."""
        if not self.adaptive_split:
            return None
        return list(self.model_source.cut_points)
