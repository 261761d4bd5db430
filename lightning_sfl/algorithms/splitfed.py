"""Split-FL baselines of the SCALA papers, each a small variation of the coordinating loop.

=================  =========================================  ==========================================
method             client half                                server half
=================  =========================================  ==========================================
MiniBatchSFL       slot per client, averaged (eq. 10)          one, trained on the concatenation (eq. 5-7)
SplitFedV1         slot per client, averaged                   copy per client, averaged
SplitFedV2         slot per client, averaged                   one, updated client after client
SplitFedV3         kept per client (never averaged)            copy per client, averaged
SFLLocalLoss       slot + auxiliary head, local loss only      one, trained on the concatenation
=================  =========================================  ==========================================

References: Thapa et al., "SplitFed: When federated learning meets split learning" (AAAI 2022; V1, V2);
Gawali et al. 2021 (V3); Han et al., "Accelerating federated learning with split learning on locally
generated losses" (ICML-FL workshop 2021; SFLLocalLoss); Huang, Tian and Tang, "When minibatch SGD meets
SplitFed learning" (2023; MiniBatch-SFL).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from typing_extensions import override

from lightning_sfl.algorithms.base import ClientModule
from lightning_sfl.algorithms.registry import register
from lightning_sfl.algorithms.split_method import SplitMethod
from lightning_sfl.loop import Step
from lightning_sfl.loop.selection import ClassBalancedSelection
from lightning_sfl.losses import row_label_distribution, sum_of_client_means
from lightning_sfl.runtime.aggregate import flat_parameters
from lightning_sfl.runtime.client_bank import SequentialBank


@register("minibatch_sfl", family="split")
class MiniBatchSFL(SplitMethod):
    """MiniBatch-SFL: the server half is trained on the concatenated activations with plain cross-entropy;
    clients get plain cross-entropy gradients. Equals SCALA with both logit adjustments off."""


@register("ca_sfl", family="split")
class CASFL(MiniBatchSFL):
    """CA-SFL (SCALA journal §5.2): SFL with concatenated activations only — the same algorithm as
    MiniBatch-SFL, registered under the name of the ablation."""


@register("splitfedv1", family="split")
class SplitFedV1(SplitMethod):
    """SplitFedV1: every selected client has its own copy of the server half, trained on that client's
    activations only; both halves are averaged with weights ``|D_k|`` after each round. With plain SGD this
    computes exactly FedAvg on the unsplit model."""

    server_copies = True


@register("splitfedv2", family="split")
class SplitFedV2(SplitMethod):
    """SplitFedV2: one server half, updated client after client within every local iteration (clients in
    slot order, i.e. by id); each client gets its gradient from the server weights it met (pre-update).

    Its client copies always run sequentially: stepping after each client gives the other (stacked) slots
    zero gradients, which momentum and weight decay would still move."""

    @override
    def make_bank(self, template: nn.Module, num_slots: int) -> SequentialBank:
        return SequentialBank(template, num_slots)

    @override
    def local_iteration(self, step: Step) -> tuple[torch.Tensor, torch.Tensor]:
        """One split iteration per client, in slot order, each stepping the server (the last one counted as the
        local iteration's ``global_step``); the losses are the mean over clients of each client's mean CE."""
        sizes, slots = step.local_sizes.tolist(), step.slots_tensor
        xs, ys = step.x.split(sizes), step.y.split(sizes)
        losses = []
        for k in range(len(sizes)):
            one = step.replace(
                clients=step.clients[k : k + 1],
                sizes=step.sizes[k : k + 1],
                local_sizes=step.local_sizes[k : k + 1],
                slots=slots[k : k + 1],
                x=xs[k],
                y=ys[k],
                owner=step.owner.new_zeros(len(ys[k])),
            )
            server_loss, _ = self.split_step(one, count_step=k == len(sizes) - 1)
            losses.append(server_loss.detach())
        mean = torch.stack(losses).mean()
        return mean, mean


@register("splitfedv3", family="split")
class SplitFedV3(SplitMethod):
    """SplitFedV3: client halves stay with their clients (never averaged), the server copies are averaged.

    All ``K`` client halves live in ``client_states`` (``[K, P]``, a per-client store: a row for each client that has
    trained, the initial half for the others; :mod:`~lightning_sfl.client_store`). The model evaluated after
    each round uses the ``|D_k|``-weighted average of all ``K`` client halves — SplitFedV3 itself defines no
    global client half, so this is our choice for a single test number. Only parameters are kept per client;
    BatchNorm statistics, if any, are averaged like the server copies."""

    averages_uploaded_models = False  # the clients keep their own halves

    server_copies = True
    keeps_client_halves = True
    supports_tail = False  # the clients keep their halves across rounds

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_client_state("client_states", lambda: flat_parameters(self.client.net).detach())  # [K, P]

    @override
    def start_round(self, step: Step) -> None:
        super().start_round(step)
        for slot, k in zip(self.bank.slots, step.clients.tolist()):
            torch.nn.utils.vector_to_parameters(self.client_states[k].clone(), slot.parameters())

    @override
    def aggregate(self, step: Step) -> None:
        super().aggregate(step)  # server copies averaged; bytes recorded
        with torch.no_grad():
            for slot, k in zip(self.bank.slots, step.clients.tolist()):
                self.client_states[k] = torch.nn.utils.parameters_to_vector(slot.parameters())
            w = self.client_sizes.to(self.client_states.dtype)
            torch.nn.utils.vector_to_parameters(
                self.client_states.weighted_sum(w) / w.sum(), self.client.net.parameters()
            )


@register("sfl_local_loss", family="split")
class SFLLocalLoss(SplitMethod):
    """SFLLocalLoss: each client trains its half with an auxiliary head on a local loss and receives no
    gradient; the server half is trained on the concatenated activations with cross-entropy.

    The auxiliary head is ``Flatten → Linear(activation size, N)`` (Han et al. use a small local classifier);
    it belongs to the client model and is averaged with it each round."""

    answers_with_gradients = False  # no gradient crosses the cut: SplitGuard has nothing to probe
    supports_tail = False  # the clients train on a local loss of their own

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        with torch.no_grad():
            act = self.client.net(torch.zeros(1, *self.hparams.input_shape))
        self.aux = ClientModule(nn.Sequential(nn.Flatten(), nn.Linear(math.prod(act.shape[1:]), self.num_classes)))

    @override
    def client_models(self) -> dict[str, nn.Module]:
        return {**super().client_models(), "aux": self.aux.net}

    @override
    def client_loss(self, logits: torch.Tensor, step: Step) -> None:
        return None  # no gradient crosses the cut

    @override
    def client_extra_loss(self, step: Step, outputs: torch.Tensor, features=None) -> torch.Tensor:
        """Each client's mean cross-entropy of its auxiliary head on its own activations, summed over clients."""
        local = self.client_banks["aux"](outputs, step.local_sizes, step.slots)
        return sum_of_client_means(self.cross_entropy(local, step.y), step.owner, step.sizes)


@register("lla_sfl", family="split")
class LLASFL(SplitMethod):
    """LLA-SFL (SCALA journal §5.2): SplitFedV1 with local logit adjustment: every server copy and every
    client gradient use ``CE(s + log P_k)`` (eq. 15), ``P_k`` the client's local label distribution. (Our reading:
    the journal adjusts "the local loss functions" and does not say whether the server copies' loss is adjusted too.)

    Args:
        missing_class_floor: ``0`` (default): missing classes get ``−∞`` logits; ``> 0``: ``log(P_k + floor)``.
        **kwargs: see :class:`~lightning_sfl.algorithms.split_method.SplitMethod`.
    """

    server_copies = True

    def __init__(self, missing_class_floor: float = 0.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.missing_class_floor = missing_class_floor

    @override
    def server_prior(self, step: Step) -> torch.Tensor:
        return row_label_distribution(self.label_dist, step)  # P_k of each row's client: the copy's own data

    @override
    def client_prior(self, step: Step) -> torch.Tensor:
        return row_label_distribution(self.label_dist, step)  # P_k, eq. (15)


@register("cs_sfl", family="split")
class CSSFL(SplitFedV1):
    """CS-SFL (Xie et al., IEEE TWC 2025): SplitFedV1 with class-balanced client selection — each round's
    clients are chosen so that their pooled label distribution is close to uniform (``class_balanced``
    policy, see ``lightning_sfl.loop.selection``; the paper's wireless resource allocation is left out)."""

    default_selection = ClassBalancedSelection
