"""SCALA: split federated learning with concatenated activations and logit adjustments.

Yang and Liu, "SCALA: Split Federated Learning with Concatenated Activations and Logit Adjustments"
(Algorithm 2; equation numbers of the conference version, the journal's differ). Per local iteration the server
concatenates every selected client's activations (eq. 5), updates ``w_s`` once with ``CE(s(x) + log P_s(y))`` where
``P_s`` is the label distribution of the concatenated batch (eq. 14), and sends each client ``k`` the gradient of
``CE(s(x) + log P_k(y))`` w.r.t. its activations, ``P_k`` being client ``k``'s local label distribution (of its whole
shard ``D_k``; eq. 15), computed from the same server forward pass (pre-update ``w_s``, eq. 8).

Switches give the ablations of the journal version (§5.2):

=====================  ==================  =========================  =========================
method                 concat_activations  server_logit_adjustment    client_logit_adjustment
=====================  ==================  =========================  =========================
SCALA                  True                True                       True
CA-SFL, MiniBatch-SFL  True                False                      False
LLA-SFL                False               True (uses ``P_k``)        True
SplitFedV1             False               False                      False
=====================  ==================  =========================  =========================

With ``concat_activations=False`` every selected client gets its own copy of the server half, trained on
that client's activations only and averaged with weights ``|D_k|`` at the end of the round; the
server-side logit adjustment then uses the distribution that copy sees, ``P_k``.
"""

from __future__ import annotations

import torch
from typing_extensions import override

from lightning_sfl.algorithms.losses import distribution_from_counts, row_label_distribution
from lightning_sfl.algorithms.registry import register
from lightning_sfl.algorithms.split_method import SplitMethod
from lightning_sfl.loop import Step


@register("scala", family="split")
class SCALA(SplitMethod):
    """SCALA (Algorithm 2) and its ablations.

    Args:
        concat_activations: one server half trained on the concatenated activations (eq. 5-7); if false,
            one server copy per client (averaged each round).
        server_logit_adjustment: server loss ``CE(s + log P_s)`` (eq. 14) instead of plain cross-entropy.
        client_logit_adjustment: client gradients from ``CE(s + log P_k)`` (eq. 15) instead of plain
            cross-entropy.
        missing_class_floor: ``0`` (default, the equations): a class with ``P = 0`` gets a ``−∞`` logit in both
            adjustments; ``> 0``: ``log(P + floor)`` (finite; the authors' GAS code adds ``1e-12``).
        **kwargs: see :class:`~lightning_sfl.algorithms.split_method.SplitMethod`.
    """

    def __init__(
        self,
        concat_activations: bool = True,
        server_logit_adjustment: bool = True,
        client_logit_adjustment: bool = True,
        missing_class_floor: float = 0.0,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.missing_class_floor = missing_class_floor
        self.server_copies = not concat_activations
        self.concat_activations = concat_activations
        self.server_logit_adjustment = server_logit_adjustment
        self.client_logit_adjustment = client_logit_adjustment

    @override
    def server_prior(self, step: Step) -> torch.Tensor | None:
        if not self.server_logit_adjustment:
            return None
        if not self.concat_activations:  # each copy sees its own client's data: P_k
            return row_label_distribution(self.label_dist, step)
        return distribution_from_counts(step.label_counts)  # P_s of the whole concatenated batch, eq. (14)

    @override
    def client_prior(self, step: Step) -> torch.Tensor | None:
        return row_label_distribution(self.label_dist, step) if self.client_logit_adjustment else None  # P_k, eq. (15)
