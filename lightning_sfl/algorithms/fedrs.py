"""FedRS (Li & Zhan, KDD 2021): FedAvg with a restricted softmax for the classes a client lacks.

Client ``k`` trains on ``p_c ∝ exp(α_c · w_cᵀh)`` (eq. 5 of the paper), ``h`` the features (input of the classifier),
``w_c`` the classifier's row of class ``c``: the scores of classes the client does not hold are scaled down, so its
update pushes their classifier rows less. Two scalings of ``α_c`` are in use:

* ``binary`` (the paper): ``α_c = 1`` if the client holds class ``c``, else ``α``;
* ``graded`` (the authors' public code, and most re-implementations): ``α_c = α + (1 − α)·n_c / max_j n_j``, so
  rarer present classes are scaled too.

The classifier's bias ``b_c`` (the paper's classifier has none; the authors' code leaves it out of the training
logits) is added unscaled: the restricted logit is ``α_c·w_cᵀh + b_c``. Evaluation uses the plain model.

>>> counts = torch.tensor([[4.0, 0.0, 2.0]])
>>> fedrs_scale(counts, 0.5, "binary").tolist(), fedrs_scale(counts, 0.5, "graded").tolist()
([[1.0, 0.5, 1.0]], [[1.0, 0.5, 0.75]])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from typing_extensions import override

from lightning_sfl.algorithms.fedavg import FedAvg
from lightning_sfl.algorithms.registry import register
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Step

__all__ = ["SCALINGS", "FedRS", "fedrs_scale"]

#: The rules for ``α_c`` (see the module docstring).
SCALINGS = ("binary", "graded")


def fedrs_scale(counts: torch.Tensor, alpha: float, scaling: str = "binary") -> torch.Tensor:
    """``α_c`` for local class counts ``counts`` ``[..., N]``: ``binary`` (paper) or ``graded`` (authors' code)."""
    if scaling == "binary":
        return torch.where(counts > 0, torch.ones_like(counts), torch.full_like(counts, alpha))
    if scaling == "graded":
        return alpha + (1 - alpha) * counts / counts.amax(dim=-1, keepdim=True).clamp_min(1)
    raise ConfigError(f"scaling={scaling!r} is not one of: {', '.join(SCALINGS)}")


@register("fedrs", family="fl")
class FedRS(FedAvg):
    """FedRS (Li & Zhan, KDD 2021, eq. 5): the client loss is the cross-entropy of ``α_c·w_cᵀh + b_c``.

    Args:
        rs_alpha: ``α ∈ [0, 1]``, the scale of the classes a client lacks (named in words: ``--data.alpha`` is the
            skew). Default 0.5, the value of the paper's experiments. ``α = 1`` is FedAvg.
        scaling: ``binary`` (the paper's ``α_c``, default) or ``graded`` (the authors' code).
        **kwargs: see :class:`~lightning_sfl.algorithms.fedavg.FedAvg`.
    """

    def __init__(self, rs_alpha: float = 0.5, scaling: str = "binary", **kwargs) -> None:
        if not 0 <= rs_alpha <= 1:
            raise ConfigError(f"rs_alpha={rs_alpha} must be in [0, 1]")
        if scaling not in SCALINGS:
            raise ConfigError(f"scaling={scaling!r} is not one of: {', '.join(SCALINGS)}")
        super().__init__(**kwargs)
        self.rs_alpha, self.scaling = rs_alpha, scaling

    def classifier_bias(self, step: Step) -> torch.Tensor | None:
        """``b`` of every slot's classifier (the last layer), ``[S, N]``; ``None`` without a bias."""
        if getattr(self.client.net[-1], "bias", None) is None:
            return None
        name = f"{len(self.client.net) - 1}.bias"
        return torch.stack([dict(self.bank.slots[k].named_parameters())[name] for k in step.slots_list()])

    @override
    def row_loss(self, logits: torch.Tensor, step: Step) -> torch.Tensor:
        scale = fedrs_scale(self.client_counts(step), self.rs_alpha, self.scaling).to(logits.dtype)[step.owner]
        bias = self.classifier_bias(step)
        if bias is None:
            return F.cross_entropy(scale * logits, step.y, reduction="none")
        bias = bias[step.owner]
        return F.cross_entropy(scale * (logits - bias) + bias, step.y, reduction="none")
