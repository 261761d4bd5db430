"""Semi-SFL (Sun, Xu et al., "Efficient Semi-Supervised Federated Learning for Heterogeneous Participants"; public code
``littlefishe/Capsule``): labelled data only on the server (PS), unlabelled non-IID clients, an EMA teacher, clustering
regularisation and an adaptive number of supervised steps ``K_s``.

Model ``w = (w_c, w_s, w_p)``: the client half, the server half (classifier) and a projection head
``[Linear(d, d) → ReLU → Linear(d, proj_dim)]`` on the flattened activation, L2-normalised. Teacher ``w̃`` = the EMA of
``w`` (:func:`~lightning_sfl.losses.semi.ema_update`, warm-up ``γ_t = min(1 − 1/(t+1), γ)`` with ``t`` the
supervised steps so far). Accuracy is the teacher's.

Semi-SFL is :class:`~lightning_sfl.algorithms.semi_supervised.SemiSupervised` (the rounds, views, teachers and
``K_s`` every semi-supervised method shares) plus the projection head, eq. 3's term in the supervised loss and eq. 5's
clustering regularisation against a queue of teacher projections. Round ``h``
(:class:`~lightning_sfl.loop.phases.Phases`):

A. ``K_s`` supervised steps on the PS: ``ℓ_s = CE + T`` (eq. 4; ``T`` the supervised contrastive loss of eq. 3 over
   the batch, on the weak view) — one SGD step on ``(w_c, w_s, w_p)``, then one teacher update.
B. The round's clients download ``w_c`` and the teacher's client half ``w̃_c``.
C. ``K_u`` cross-entity steps: client ``i`` sends ``e_i = w_c,i(strong(x))`` and ``ẽ_i = w̃_c,i(weak(x))`` (no labels).
   The PS: pseudo-labels ``ŷ`` from ``w̃_s(ẽ)`` with the threshold ``τ``; ``ℓ_u = H + C`` (eq. 6): eq. 1's masked CE
   of ``w_s(e)`` averaged over all rows, plus eq. 5's clustering regularisation of the student projections against
   a queue of teacher projections (positives: confident keys with the anchor's pseudo-label; empty slots masked).
   One step on ``(w_s, w_p)`` with the mean over clients (eq. 7); client ``i`` gets the gradient of its own batch
   mean and steps (eq. 8), then its teacher half follows by EMA (``client_teacher="ema"``, the paper) or stays as
   downloaded (``"frozen"``, the authors' code). The queue takes the step's teacher projections.
D. ``w_c`` ← the unweighted mean of the round's client halves (teacher halves are not uploaded).
E. ``K_s`` for the next round from eq. 9 (:class:`~lightning_sfl.loop.ks_control.SupervisedSteps`).

Augmentations (:mod:`lightning_sfl.data.augment`): on 8×8 and 28×28 digits a translation of 12.5 % of the side with
reflect padding (weak) and that plus brightness/contrast jitter, noise and a Cutout of a quarter of the side
(strong); no flips (they turn digits into other symbols) and no RandAugment (its operations degenerate at 8×8).
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn
from typing_extensions import override

from lightning_sfl.algorithms.registry import register
from lightning_sfl.algorithms.semi_supervised import KS_OPTIONS, SemiSupervised, ViewedStep, cosine_lr
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Step
from lightning_sfl.loop.phases import SupervisedOnlyRounds
from lightning_sfl.losses.semi import contrastive_loss, queue_positives, same_label_positives
from lightning_sfl.runtime import federated

__all__ = ["SemiSFL", "SupervisedOnly", "cosine_lr"]

#: ``κ`` of eqs. 3 and 5 when not given.
DEFAULT_TEMPERATURE = 0.2


@register("semi_sfl", family="semi")
class SemiSFL(SemiSupervised):
    """Semi-SFL (see the module docstring).

    Args:
        temperature: ``κ`` of eqs. 3 and 5 (refused other than its default with ``contrastive=False``).
        proj_dim: output size of the projection head.
        proj_hidden: width of its hidden layer (default ``d``, the flattened activation's size, as in the paper; a
            smaller width keeps the head small where ``d`` is large, e.g. 12,544 for cnn_small at s2 on 28×28).
        queue_size: ``|Q|``, teacher projections kept for eq. 5.
        contrastive: ``True`` adds eq. 3 and eq. 5 (``False``: CE terms only, the paper's ablation).
        **kwargs: see :class:`~lightning_sfl.algorithms.semi_supervised.SemiSupervised` (``supervised_steps``
            ``K_s``, ``threshold`` ``τ``, ``ema`` ``γ``, ``client_teacher``, ...) and the base.
    """

    def __init__(
        self,
        temperature: float = DEFAULT_TEMPERATURE,
        proj_dim: int = 128,
        proj_hidden: int | None = None,
        queue_size: int = 1024,
        contrastive: bool = True,
        **kwargs,
    ) -> None:
        if not temperature > 0:
            raise ConfigError(f"temperature={temperature} (κ) must be > 0")
        for name, value in (("proj_dim", proj_dim), ("queue_size", queue_size)):
            if int(value) != value or value < 1:
                raise ConfigError(f"{name}={value!r} must be a whole number >= 1")
        if not contrastive and temperature != DEFAULT_TEMPERATURE:
            raise ConfigError(f"temperature={temperature} changes nothing with contrastive=False: κ is eqs. 3 and 5's")
        super().__init__(**kwargs)
        self.temperature, self.contrastive = temperature, bool(contrastive)
        act = federated.output_shape(self.example_input_array, self.client)  # (eval mode: statistics stay)
        d = math.prod(act)  # the flattened activation
        hidden = d if proj_hidden is None else int(proj_hidden)
        if hidden < 1:
            raise ConfigError(f"proj_hidden={proj_hidden!r} must be a whole number >= 1 (or None: d = {d})")
        self.projection = nn.Sequential(nn.Flatten(), nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, proj_dim))
        self.teacher_projection = copy.deepcopy(self.projection).requires_grad_(False)
        self.add_state("queue_keys", lambda: torch.zeros(queue_size, proj_dim))
        self.add_state("queue_labels", lambda: torch.full((queue_size,), -1, dtype=torch.long))
        self.add_state("queue_confident", lambda: torch.zeros(queue_size, dtype=torch.bool))
        self.add_state("queue_pointer", lambda: torch.zeros((), dtype=torch.long))

    @override
    def _server_parameters(self) -> list[nn.Parameter]:
        return [*self.server.parameters(), *self.projection.parameters(), *self.client.parameters()]

    @override
    def _teacher_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [*super()._teacher_pairs(), (self.teacher_projection, self.projection)]

    def _project(self, head: nn.Module, a: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(head(a), dim=1)

    @override
    def supervised_loss(self, a: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """A.: ``ℓ_s = CE + T`` (eq. 4; ``T`` the supervised contrastive loss of eq. 3 over the batch)."""
        loss = super().supervised_loss(a, logits, labels)
        if self.contrastive:
            z = self._project(self.projection, a)
            loss = loss + contrastive_loss(z, z, *same_label_positives(labels), self.temperature).mean()
        return loss

    @override
    def teacher_keys(self, teacher_acts: torch.Tensor) -> torch.Tensor | None:
        """The teacher's projections of its upload ``ẽ`` (the queue's keys of eq. 5)."""
        return self._project(self.teacher_projection, teacher_acts) if self.contrastive else None

    @override
    def unlabelled_rows(self, step: ViewedStep, a: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor):
        """Per-row ``ℓ_u = H + C`` (eq. 6) ``[B]``: eq. 1's masked CE plus eq. 5's clustering regularisation of the
        student projections against the queue (positives: confident keys with the anchor's pseudo-label)."""
        rows = super().unlabelled_rows(step, a, labels, mask)
        if self.contrastive:
            z = self._project(self.projection, a)
            filled = self.queue_labels >= 0
            positive, valid = queue_positives(labels, self.queue_labels, self.queue_confident, filled)
            rows = rows + contrastive_loss(z, self.queue_keys.to(z.dtype), positive, valid, self.temperature)
        return rows

    @override
    def on_unlabelled_step_end(self, step: ViewedStep) -> None:
        """The queue takes the step's teacher projections."""
        if step.keys is not None:
            self._enqueue(step.keys, step.pseudo_labels, step.mask)

    @torch.no_grad()
    def _enqueue(self, keys: torch.Tensor, labels: torch.Tensor, confident: torch.Tensor) -> None:
        """The step's teacher projections enter the queue (first in, first out; the newest ``|Q|`` if more)."""
        size = len(self.queue_labels)
        keys, labels, confident = keys[-size:], labels[-size:], confident[-size:]
        at = (int(self.queue_pointer) + torch.arange(len(labels), device=labels.device)) % size
        self.queue_keys[at] = keys.to(self.queue_keys.dtype)
        self.queue_labels[at] = labels
        self.queue_confident[at] = confident
        self.queue_pointer.fill_((int(self.queue_pointer) + len(labels)) % size)


@register("supervised_only", family="semi")
class SupervisedOnly(SemiSupervised):
    """The lower bound of Semi-SFL's Table II: the whole model trained on the server's labelled set only, with plain
    cross-entropy (no clients). A round is ``K_s`` steps (``supervised_steps``, constant); the evaluated model is the
    EMA teacher, as for Semi-SFL, so that the two differ only in the unlabelled data. The options of the clients
    (``local_iters``, ``client_batch_size``, ``threshold``, ``client_teacher``, ``client_selection``, ``defences``) and
    of eq. 9 (``adaptive_steps``, ``ks_*``) are refused other than at their defaults (:meth:`unused_options`)."""

    averages_uploaded_models = False  # no client trains

    step_handlers = {"supervised": "supervised_step"}
    phase_schedule = SupervisedOnlyRounds

    def __init__(self, supervised_steps: int = 50, adaptive_steps: bool = False, **kwargs) -> None:
        super().__init__(supervised_steps=supervised_steps, adaptive_steps=adaptive_steps, **kwargs)

    @classmethod
    @override
    def unused_options(cls) -> dict[str, str]:
        """What the clients and eq. 9 do: no client trains, and ``K_s`` stays ``supervised_steps``."""
        constant = "SupervisedOnly's K_s is constant (supervised_steps: the lower bound of Table II)"
        unused = dict.fromkeys(("adaptive_steps", *(f"ks_{k}" for k in KS_OPTIONS)), constant)
        no_clients = "SupervisedOnly trains no clients (the server's labelled set only)"
        clients = ("local_iters", "client_batch_size", "threshold", "client_teacher", "client_selection", "defences")
        return {**super().unused_options(), **unused, **dict.fromkeys(clients, no_clients)}

    @override
    def aggregate(self, step: Step) -> None:
        """No client half to aggregate."""
