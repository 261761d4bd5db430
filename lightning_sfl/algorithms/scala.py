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

from lightning_sfl.algorithms.registry import register
from lightning_sfl.algorithms.split_method import SplitMethod
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Step
from lightning_sfl.losses import distribution_from_counts, row_label_distribution


@register("scala", family="split")
class SCALA(SplitMethod):
    """SCALA (Algorithm 2) and its ablations.

    Args:
        concat_activations: one server half trained on the concatenated activations (eq. 5-7); if false,
            one server copy per client (averaged each round).
        server_logit_adjustment: server loss ``CE(s + log P_s)`` (eq. 14) instead of plain cross-entropy. U-shaped,
            the server has a loss only with ``pooled_label_counts``: ``False`` without it is refused (it would change
            nothing, the body training on the clients' losses).
        client_logit_adjustment: client gradients from ``CE(s + log P_k)`` (eq. 15) instead of plain
            cross-entropy.
        missing_class_floor: ``0`` (default, the equations): a class with ``P = 0`` gets a ``−∞`` logit in both
            adjustments; ``> 0``: ``log(P + floor)`` (finite; the authors' GAS code adds ``1e-12``), refused where no
            adjustment is made.
        pooled_label_counts: U-shaped only (``tail_point``), with one server half and ``server_logit_adjustment``:
            eq. 14 for the body, the clients sending their label counts every iteration so that the server can
            return ``P_s`` (which reveals the batch's label counts to it) and a second gradient of their tails under
            ``log P_s``; ``False`` (default): no ``P_s``, the body trains on the clients' eq.-15 losses
            (:mod:`~lightning_sfl.runtime.u_shape`). Refused without ``server_logit_adjustment`` or with
            ``concat_activations=False``: the body would use no ``P_s``, and the counts would be sent for nothing
            (while the label attack credits the server with them).
        **kwargs: see :class:`~lightning_sfl.algorithms.split_method.SplitMethod`.
    """

    def __init__(
        self,
        concat_activations: bool = True,
        server_logit_adjustment: bool = True,
        client_logit_adjustment: bool = True,
        missing_class_floor: float = 0.0,
        pooled_label_counts: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if pooled_label_counts and not self.u_shaped:
            raise ConfigError("pooled_label_counts=true is an option of U-shaped SCALA: give tail_point too")
        if self.u_shaped:
            check_u_shaped(concat_activations, server_logit_adjustment, pooled_label_counts)
        server_prior = server_logit_adjustment and (pooled_label_counts or not self.u_shaped)
        if missing_class_floor != 0 and not (server_prior or client_logit_adjustment):
            raise ConfigError(
                f"missing_class_floor={missing_class_floor} changes nothing: with these switches no loss adds a log P"
            )
        self.missing_class_floor = missing_class_floor
        self.pooled_label_counts = bool(pooled_label_counts)
        self.shape.server_copies = not concat_activations  # (one server half, or a copy per client)
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
    def body_prior(self, step: Step) -> torch.Tensor | None:
        """U-shaped with ``pooled_label_counts``: ``P_s`` (eq. 14) for the body; else none."""
        if self.pooled_label_counts and self.concat_activations and self.server_logit_adjustment:
            return self.server_prior(step)
        return None

    @override
    def client_prior(self, step: Step) -> torch.Tensor | None:
        return row_label_distribution(self.label_dist, step) if self.client_logit_adjustment else None  # P_k, eq. (15)


def check_u_shaped(concat_activations: bool, server_logit_adjustment: bool, pooled_label_counts: bool) -> None:
    """U-shaped SCALA's switches, checked (one-line errors): the server has a loss of its own, eq. 14 with ``P_s``, only
    with the clients' pooled label counts, one body and the server-side adjustment; a switch that would change nothing
    is refused."""
    if pooled_label_counts and not server_logit_adjustment:
        raise ConfigError(
            "pooled_label_counts=True needs server_logit_adjustment=True: without it the server uses no P_s"
        )
    if pooled_label_counts and not concat_activations:
        raise ConfigError(
            "pooled_label_counts=True needs concat_activations=True: a body copy per client has no pooled batch, no P_s"
        )
    if not server_logit_adjustment and not pooled_label_counts:
        raise ConfigError(
            "server_logit_adjustment=False changes nothing in U-shaped SCALA without pooled_label_counts=True: the "
            "body trains on the clients' losses, the server has none to adjust"
        )
