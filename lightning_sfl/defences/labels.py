"""Label differential privacy by randomised response (Ghazi et al., "Deep Learning with Label Differential Privacy",
NeurIPS 2021, RR_ε): every training row's label is randomised once, before training: kept with probability
``e^ε / (e^ε + N − 1)``, else replaced by one of the other ``N − 1`` classes uniformly. Each row's label is drawn
once from the run's seed and used in every round (drawing again every pass would compose ε); the labels are then
``ε``-label-DP, whatever the training does with them. The clients train on them in every split method: a plain split
sends them to the server, a U-shaped one (:mod:`~lightning_sfl.runtime.u_shape`) computes its losses with them.
"""

from __future__ import annotations

import math

import torch
from typing_extensions import override

from lightning_sfl.defences.base import Defence
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop.sampling import round_generator

__all__ = ["RandomisedLabels", "keep_probability", "randomised_response"]

_STREAM = 71  # the labels' one draw


def keep_probability(epsilon: float, num_classes: int) -> float:
    """``e^ε / (e^ε + N − 1)``: the probability that RR_ε keeps a label of ``N`` classes.

    >>> round(keep_probability(math.log(9), 10), 3)
    0.5
    """
    if math.isinf(epsilon):
        return 1.0
    return math.exp(epsilon) / (math.exp(epsilon) + num_classes - 1)


def randomised_response(labels: torch.Tensor, epsilon: float, num_classes: int, generator: torch.Generator):
    """RR_ε of ``labels`` ``[n]``: each kept with :func:`keep_probability`, else one of the other classes uniformly.

    >>> g = torch.Generator().manual_seed(0)
    >>> randomised_response(torch.zeros(5, dtype=torch.long), float("inf"), 10, g).tolist()
    [0, 0, 0, 0, 0]
    """
    keep = torch.rand(len(labels), generator=generator, dtype=torch.float64) < keep_probability(epsilon, num_classes)
    shift = 1 + torch.randint(num_classes - 1, (len(labels),), generator=generator) if num_classes > 1 else 0
    return torch.where(keep, labels, (labels + shift) % num_classes)


class RandomisedLabels(Defence):
    """The clients train on their labels randomised once by RR_ε (see the module docstring).

    Args:
        epsilon: ``ε > 0`` of the label-DP guarantee (smaller: more labels changed; ``inf``: none).
    """

    key = "randomised_labels"
    needs_client_labels = True

    def __init__(self, epsilon: float = 1.0) -> None:
        super().__init__()
        if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not epsilon > 0:
            raise ConfigError(f"RandomisedLabels: epsilon={epsilon!r} must be a number > 0 (inf: no change)")
        self.epsilon = float(epsilon)
        self.noisy: torch.Tensor | None = None  # [n] each training row's label as the clients train on it

    @override
    def setup(self, federation, rank):
        stats = federation.stats
        rows = torch.cat([*stats.shards, *([stats.labelled] if stats.labelled is not None else [])])
        self.randomise(federation.data.train_labels(rows), rows, stats.num_classes, int(stats.seed))

    def randomise(self, labels: torch.Tensor, rows: torch.Tensor, num_classes: int, seed: int) -> None:
        """Draw the labels the clients train on: RR_ε of ``labels`` ``[n]`` of training rows ``rows`` ``[n]``, from
        ``seed`` (a fit's: its data seed; an attack's: the run's)."""
        g = round_generator(seed, 0, stream=_STREAM)
        order = torch.argsort(rows)  # the draws follow the rows' order, whatever order they come in
        noisy = torch.full((int(rows.max()) + 1 if len(rows) else 0,), -1, dtype=torch.long)
        noisy[rows[order]] = randomised_response(labels[order].long(), self.epsilon, num_classes, g)
        self.noisy = noisy

    @override
    def training_labels(self, step):
        if step.y is None or self.noisy is None:  # unlabelled steps; or not set up (a model summary)
            return None
        rows = step.local_rows if step.local_rows is not None else step.rows
        return self.noisy.to(step.y.device)[rows.to(step.y.device)]

    @override
    def label_distribution(self, stats) -> torch.Tensor:
        """``P_k(y)`` ``[K, N]`` float64 of the randomised labels each client holds (the clients' priors)."""
        counts = torch.stack([torch.bincount(self.noisy[s], minlength=stats.num_classes) for s in stats.shards])
        return counts.double() / counts.sum(dim=1, keepdim=True).clamp_min(1)

    @override
    def label_counts(self, step) -> torch.Tensor | None:
        """The counts of the randomised labels of all of ``step``'s rows (every process's): ``P_s`` of eq. 14."""
        if step.label_counts is None:
            return None
        return torch.bincount(self.noisy[step.rows.cpu()], minlength=len(step.label_counts)).to(step.label_counts)
