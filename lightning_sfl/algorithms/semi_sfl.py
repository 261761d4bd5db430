"""Semi-SFL (Sun, Xu et al., "Efficient Semi-Supervised Federated Learning for Heterogeneous Participants"; public code
``littlefishe/Capsule``): labelled data only on the server (PS), unlabelled non-IID clients, an EMA teacher, clustering
regularisation and an adaptive number of supervised steps ``K_s``.

Model ``w = (w_c, w_s, w_p)``: the client half, the server half (classifier) and a projection head
``[Linear(d, d) → ReLU → Linear(d, proj_dim)]`` on the flattened activation, L2-normalised. Teacher ``w̃`` = the EMA of
``w`` (:func:`~lightning_sfl.algorithms.semi_losses.ema_update`, warm-up ``γ_t = min(1 − 1/(t+1), γ)`` with ``t`` the
supervised steps so far). Accuracy is the teacher's.

Round ``h`` (:class:`~lightning_sfl.loop.phases.Phases`):

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
from typing import ClassVar

import torch
from torch import nn
from typing_extensions import override

from lightning_sfl import trainer_view
from lightning_sfl.algorithms import federated
from lightning_sfl.algorithms.async_base import choice
from lightning_sfl.algorithms.base import SplitFedAlgorithm
from lightning_sfl.algorithms.client_bank import clip_gradients_
from lightning_sfl.algorithms.guards import check_finite
from lightning_sfl.algorithms.iteration import split_iteration
from lightning_sfl.algorithms.registry import register
from lightning_sfl.algorithms.semi_losses import (
    contrastive_loss,
    ema_decay,
    ema_update,
    pseudo_labels,
    queue_positives,
    same_label_positives,
)
from lightning_sfl.data.augment import strong_view, weak_view
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Step
from lightning_sfl.loop.ks_control import SupervisedSteps
from lightning_sfl.loop.phases import Phases, SupervisedOnlyRounds

__all__ = ["SemiSFL", "SupervisedOnly"]

CLIENT_TEACHERS = ("ema", "frozen")
LR_SCHEDULES = ("constant", "cosine")


def cosine_lr(round_idx: int, rounds: int, lr: float, lr_min: float) -> float:
    """The learning rate of round ``h`` of ``H`` under cosine decay: ``lr_min + (lr − lr_min)·(1 + cos(π·h/H))/2``.

    >>> [round(cosine_lr(h, 4, 0.02, 0.005), 6) for h in range(5)]
    [0.02, 0.017803, 0.0125, 0.007197, 0.005]
    """
    return lr_min + (lr - lr_min) * (1 + math.cos(math.pi * round_idx / rounds)) / 2


@register("semi_sfl", family="semi", study="semi_sfl")
class SemiSFL(SplitFedAlgorithm):
    """Semi-SFL (see the module docstring). ``local_iters`` is ``K_u``; the data module needs
    ``--data.labelled_per_class``.

    Args:
        supervised_steps: ``K_s`` of the first round.
        adaptive_steps: adapt ``K_s`` by eq. 9 (``False``: the paper's constant-``K_s`` ablation).
        ks_window: rounds per loss average of eq. 9.
        ks_low: ``ϱ1``.
        ks_high: ``ϱ2``.
        ks_milestone_every: rounds between the milestones of eq. 9.
        ks_min: lower bound of ``K_s``.
        ks_max: upper bound (default ``4·supervised_steps``).
        labelled_batch_size: rows of the labelled set per supervised step.
        client_batch_size: rows per client per cross-entity step.
        threshold: ``τ`` in ``(0, 1]``, pseudo-label confidence.
        temperature: ``κ`` of eqs. 3 and 5.
        ema: ``γ``, the teacher's decay.
        proj_dim: output size of the projection head.
        proj_hidden: width of its hidden layer (default ``d``, the flattened activation's size, as in the paper; a
            smaller width keeps the head small where ``d`` is large, e.g. 12,544 for cnn_small at s2 on 28×28).
        queue_size: ``|Q|``, teacher projections kept for eq. 5.
        contrastive: ``True`` adds eq. 3 and eq. 5 (``False``: CE terms only, the FedSwitch-SL ablation).
        client_teacher: ``ema`` (paper, eq. 8) or ``frozen`` (the authors' code).
        shift: pixels of the random translation (default: 12.5 % of the image side, at least 1).
        lr_schedule: ``constant`` or ``cosine`` (the paper's: round ``h`` of ``H`` = ``max_epochs`` uses
            ``lr_min + (lr − lr_min)·(1 + cos(π·h/H))/2``; :func:`cosine_lr`).
        lr_min: the floor of the cosine schedule (the authors' code: 0.005).
        grad_clip: clip the gradient norm of each model at every step to this value (each client's own, and the
            server's parameters together; ``None``: no clipping; SemiFL's authors clip at 1).
        **kwargs: see :class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm`.
    """

    step_handlers = {"supervised": "supervised_step", "unlabelled": "unlabelled_step"}
    answers_with_gradients = False  # the clients upload two views' activations (send_activations)
    #: The schedule of the rounds (:meth:`configure_schedule`).
    phase_schedule: ClassVar[type[Phases]] = Phases

    def __init__(
        self,
        supervised_steps: int = 50,
        adaptive_steps: bool = True,
        ks_window: int = 10,
        ks_low: float = 0.01,
        ks_high: float = 0.05,
        ks_milestone_every: int = 20,
        ks_min: int = 1,
        ks_max: int | None = None,
        labelled_batch_size: int = 64,
        client_batch_size: int = 64,
        threshold: float = 0.95,
        temperature: float = 0.2,
        ema: float = 0.99,
        proj_dim: int = 128,
        proj_hidden: int | None = None,
        queue_size: int = 1024,
        contrastive: bool = True,
        client_teacher: str = "ema",
        shift: int | None = None,
        lr_schedule: str = "constant",
        lr_min: float = 0.0,
        grad_clip: float | None = None,
        **kwargs,
    ) -> None:
        if grad_clip is not None and not grad_clip > 0:
            raise ConfigError(f"grad_clip={grad_clip} must be > 0 (or null: no clipping)")
        if not 0 < threshold <= 1:
            raise ConfigError(f"threshold={threshold} (τ) must be in (0, 1]")
        if not temperature > 0 or not 0 <= ema < 1:
            raise ConfigError(f"need temperature > 0 and 0 <= ema < 1, got {temperature}, {ema}")
        for name, value in (("proj_dim", proj_dim), ("queue_size", queue_size)):
            if int(value) != value or value < 1:
                raise ConfigError(f"{name}={value!r} must be a whole number >= 1")
        supervised = SupervisedSteps(
            supervised_steps, adaptive_steps, ks_window, ks_low, ks_high, ks_milestone_every, ks_min, ks_max
        )
        client_teacher = choice("client_teacher", client_teacher, CLIENT_TEACHERS)
        lr_schedule = choice("lr_schedule", lr_schedule, LR_SCHEDULES)
        if not 0 <= lr_min:
            raise ConfigError(f"lr_min={lr_min} must be >= 0")
        super().__init__(**kwargs)
        self.supervised = supervised  # the K_s controller (eq. 9): its state is the schedule's
        self.labelled_batch_size, self.client_batch_size = labelled_batch_size, client_batch_size
        self.client_teacher, self.lr_schedule, self.lr_min = client_teacher, lr_schedule, float(lr_min)
        self.grad_clip = None if grad_clip is None else float(grad_clip)
        self._checked_schedule(SemiSFL.configure_schedule(self))  # the settings are checked now (one-line errors)
        self.threshold, self.temperature, self.ema, self.contrastive = threshold, temperature, ema, bool(contrastive)
        side = self.hparams.input_shape[-1]
        self.shift = max(1, round(side / 8)) if shift is None else int(shift)
        d = math.prod(federated.activation_shape(self))  # the flattened activation (eval mode: statistics stay)
        hidden = d if proj_hidden is None else int(proj_hidden)
        if hidden < 1:
            raise ConfigError(f"proj_hidden={proj_hidden!r} must be a whole number >= 1 (or None: d = {d})")
        self.projection = nn.Sequential(nn.Flatten(), nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, proj_dim))
        self.teacher_client = copy.deepcopy(self.client.net).requires_grad_(False)
        self.teacher_server = copy.deepcopy(self.server.net).requires_grad_(False)
        self.teacher_projection = copy.deepcopy(self.projection).requires_grad_(False)
        self.add_state("teacher_updates", lambda: torch.zeros((), dtype=torch.long))
        self.add_state("queue_keys", lambda: torch.zeros(queue_size, proj_dim))
        self.add_state("queue_labels", lambda: torch.full((queue_size,), -1, dtype=torch.long))
        self.add_state("queue_confident", lambda: torch.zeros(queue_size, dtype=torch.bool))
        self.add_state("queue_pointer", lambda: torch.zeros((), dtype=torch.long))
        self._round_sup_losses: list[torch.Tensor] = []
        self._slots_ready = False  # the round's clients downloaded the halves (set at its first unlabelled step)
        self._view: dict = {}  # the unlabelled step's views and pseudo-labels, from its upload to its end

    @override
    def one_process_only(self) -> str | None:
        """The phases' views, queue and pseudo-labels live in one process."""
        return type(self).__name__

    @override
    def configure_schedule(self) -> Phases:
        """Semi-SFL's rounds (:attr:`phase_schedule`): ``K_s`` supervised steps, then ``K_u`` cross-entity steps."""
        return self.phase_schedule(
            self.supervised, self.local_iters, self.labelled_batch_size, self.client_batch_size, self.selection
        )

    @override
    def client_models(self) -> dict[str, nn.Module]:
        """Clients download the student's and the teacher's client halves (only the student's is trained and sent)."""
        return {"client": self.client.net, "teacher": self.teacher_client}

    @override
    def _slot_parameters(self) -> list[nn.Parameter]:
        return list(self.client_banks["client"].parameters())

    @override
    def _server_parameters(self) -> list[nn.Parameter]:
        return [*self.server.parameters(), *self.projection.parameters(), *self.client.parameters()]

    @torch.no_grad()
    @override
    def adjust_gradients(self) -> None:
        """``grad_clip``: each client slot's gradient norm, and the server's (all its trained parameters together),
        clipped on its own."""
        if self.grad_clip is None:
            return
        self.bank.clip_grad_norms_(self.grad_clip)
        grads = [p.grad for p in self._server_parameters() if p.grad is not None]
        if grads:
            clip_gradients_(grads, self.grad_clip)

    @override
    def start_round(self, step: Step) -> None:
        """The broadcast (B.) happens after the supervised phase, at the round's first unlabelled step; the round's
        learning rate is set (a function of the round: a resumed run continues the schedule)."""
        self._round_sup_losses = []
        self._slots_ready = False
        if self.lr_schedule == "cosine":
            lr = cosine_lr(step.round, max(1, int(trainer_view.run_length(self.trainer) or 1)), self.lr, self.lr_min)
            opt = self.optimizers()
            for group in getattr(opt, "optimizer", opt).param_groups:
                group["lr"] = lr
            self.log("train/lr", lr, on_step=False, on_epoch=True, batch_size=1)

    # ------------------------------------------------------------------ A. supervised phase
    def _project(self, head: nn.Module, a: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(head(a), dim=1)

    def supervised_step(self, step: Step) -> None:
        """``ℓ_s = CE + T`` (eq. 4) on the weak view of a labelled minibatch; one step, then one teacher update."""
        opt = self.optimizers()
        opt.zero_grad()
        x = weak_view(step.x, self.shift, self._generator(step))
        a = self.client(x)
        logits = self.server(a)
        loss = nn.functional.cross_entropy(logits, step.y)
        if self.contrastive:
            z = self._project(self.projection, a)
            loss = loss + contrastive_loss(z, z, *same_label_positives(step.y), self.temperature).mean()
        scale = self.supervised_loss_scale()
        self.manual_backward(loss if scale == 1 else scale * loss)
        self.take_step(opt)
        decay = ema_decay(int(self.teacher_updates), self.ema)
        for teacher, student in self._teacher_pairs():
            ema_update(teacher, student, decay)
        self.teacher_updates += 1
        self._round_sup_losses.append(loss.detach())
        self.log("train/supervised_loss", loss.detach(), on_step=False, on_epoch=True, batch_size=len(step.y))

    def supervised_loss_scale(self) -> float:
        """A factor on the supervised loss as it is backpropagated (FedMatch's ``λ_s``); 1 here."""
        return 1.0

    def _teacher_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [
            (self.teacher_client, self.client.net),
            (self.teacher_server, self.server.net),
            (self.teacher_projection, self.projection),
        ]

    # ------------------------------------------------------------------ C. cross-entity phase
    def unlabelled_step(self, step: Step) -> dict[str, torch.Tensor]:
        """Handler of ``"unlabelled"`` steps: one split iteration of the round's clients on their unlabelled batch
        (views and pseudo-labels in :meth:`send_activations` and :meth:`split_losses`), then the clients' teachers
        follow their students and the teacher projections enter the queue."""
        if not self._slots_ready:  # B.: the round's clients download w_c and w̃_c
            self.download()
            self._slots_ready = True
        server_loss, client_loss = split_iteration(self, step)
        view, self._view = self._view, {}
        if self.client_teacher == "ema":  # eq. 8: w̃_c,i ← γ·w̃_c,i + (1 − γ)·w_c,i
            self._client_teachers_follow(step)
        if view["keys"] is not None:
            self._enqueue(view["keys"], view["labels"], view["mask"])
        labels, mask = view["labels"], view["mask"]
        self.log("train/mask_rate", mask.float().mean(), on_step=False, on_epoch=True, batch_size=len(mask))
        losses = {"server_loss": server_loss.detach(), "client_loss": client_loss.detach()}
        return {**losses, "pseudo_labels": labels, "mask": mask}  # the labels for metrics (PseudoLabelQuality)

    @override
    def send_activations(self, step: Step) -> tuple[torch.Tensor, torch.Tensor]:
        """C., upload: the students' ``e_i = w_c,i(strong(x))`` ``[B, *act]`` (checked finite) and the teachers'
        ``ẽ_i = w̃_c,i(weak(x))`` (no labels travel); the views are kept for :meth:`split_losses`."""
        g = self._generator(step)
        weak, strong = weak_view(step.x, self.shift, g), strong_view(step.x, self.shift, g)
        acts = self.bank(strong, step.local_sizes, step.slots)  # e_i [B, *act]
        check_finite(step, ("activations", acts))
        with torch.no_grad():
            teacher_acts = self.client_banks["teacher"](weak, step.local_sizes, step.slots)  # ẽ_i
        self.send_up(step, acts, teacher_acts)
        self._view = {"weak": weak, "generator": g, "teacher_acts": teacher_acts}
        return acts, acts.detach().requires_grad_(True)

    @override
    def split_losses(self, acts: torch.Tensor, a: torch.Tensor, step: Step) -> tuple[torch.Tensor, torch.Tensor]:
        """C., on the server: pseudo-labels ``ŷ`` from the teacher on the weak view (eq. 1), then per row
        ``ℓ_u = H + C`` (eq. 6) of the students' activations ``a``; the clients' loss is the sum over clients of each
        client's mean (each gets its own gradient, eq. 8), the server's the mean over clients (eq. 7)."""
        view = self._view
        with torch.no_grad():
            teacher_logits = self.teacher_server(view["teacher_acts"])
            keys = self._project(self.teacher_projection, view["teacher_acts"]) if self.contrastive else None
        labels, mask = self.pseudo_label(step, view["weak"], teacher_logits)
        rows = self.unlabelled_rows(step, a, labels, mask, keys)
        sizes = step.sizes.to(rows.dtype)
        client_loss = (rows / sizes[step.owner]).sum()
        view.update(labels=labels, mask=mask, keys=keys)
        return client_loss / len(step.sizes), client_loss

    @override
    def client_extra_loss(self, step: Step, outputs: torch.Tensor, features=None) -> torch.Tensor | None:
        """Hook 5: :meth:`client_side_loss` on the step's views and pseudo-labels."""
        view = self._view
        return self.client_side_loss(step, view["weak"], view["labels"], view["mask"], view["generator"])

    # ------------------------------------------------------------------ hooks of the baselines (semi_baselines.py)
    def download(self) -> None:
        """B.: the round's clients download the student's and the teacher's client halves (bytes counted)."""
        self.reset_slots()

    def send_up(self, step: Step, acts: torch.Tensor, teacher_acts: torch.Tensor) -> None:
        """Bytes of what the clients send per step: ``e_i`` and ``ẽ_i`` (no labels); nothing in full-model FL."""
        if self.has_server_half:
            for tensor in (acts, teacher_acts):
                self.ledger.add_rows("up", "activations", tensor, step.sizes, step.slots)

    def pseudo_label(self, step: Step, weak: torch.Tensor, teacher_logits: torch.Tensor):
        """``(ŷ, mask)`` ``[B]`` each (eq. 1): the teacher's argmax on the weak view and its confidence ``> τ``."""
        return pseudo_labels(teacher_logits, self.threshold)

    def unlabelled_rows(self, step: Step, a: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, keys):
        """Per-row ``ℓ_u = H + C`` (eq. 6) ``[B]`` of the student's activations ``a`` (strong view): eq. 1's masked
        CE (masked rows count in the mean) plus eq. 5's clustering regularisation against the queue."""
        logits = self.server(a)
        rows = nn.functional.cross_entropy(logits, labels, reduction="none") * mask.to(logits.dtype)
        if self.contrastive:
            z = self._project(self.projection, a)
            filled = self.queue_labels >= 0
            positive, valid = queue_positives(labels, self.queue_labels, self.queue_confident, filled)
            rows = rows + contrastive_loss(z, self.queue_keys.to(z.dtype), positive, valid, self.temperature)
        return rows

    def client_side_loss(self, step: Step, weak: torch.Tensor, labels, mask, generator) -> torch.Tensor | None:
        """A loss computed on the clients alone (full-model methods; SemiFL's mixup), summed over clients."""
        return None

    @torch.no_grad()
    def _client_teachers_follow(self, step: Step) -> None:
        teachers = self.client_banks["teacher"]
        for slot in step.slots_list():
            old, new = teachers.snapshot(slot), self.bank.snapshot(slot)
            teachers.load_slot(
                slot,
                {
                    k: self.ema * v + (1 - self.ema) * new[k] if v.is_floating_point() else new[k]
                    for k, v in old.items()
                },
            )

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

    def _generator(self, step: Step) -> torch.Generator:
        """Augmentation draws seeded by (seed, round, step): the same views in a resumed run."""
        seed = int(self.client_stats.seed) * 1_000_003 + step.round * 10_007 + step.index
        return torch.Generator().manual_seed(seed)

    # ------------------------------------------------------------------ D./E. aggregation and K_s
    @override
    def aggregate(self, step: Step) -> None:
        """D.: ``w_c`` ← the unweighted mean of the round's client halves (teacher halves stay on the clients)."""
        weights = torch.ones(len(step.clients), dtype=torch.float64)
        self.aggregate_slots(weights, step.slots, models={"client": self.client.net})

    @override
    def round_metrics(self) -> dict[str, float]:
        """E.: the round's mean supervised loss, for eq. 9 (the schedule sets the next round's ``K_s`` from it)."""
        if not self._round_sup_losses:
            return {}
        return {"supervised_loss": float(torch.stack(self._round_sup_losses).mean())}

    @override
    def on_round_end(self, event) -> None:
        """``train/K_s`` is this round's ``K_s`` (the schedule then adapts it, eq. 9)."""
        self.log("train/K_s", float(self.schedule.supervised.steps), on_step=False, on_epoch=True, batch_size=1)

    # ------------------------------------------------------------------ evaluation: the teacher
    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.teacher_server(self.teacher_client(x))


@register("supervised_only", family="semi", study="semi_sfl")
class SupervisedOnly(SemiSFL):
    """The lower bound of Semi-SFL's Table II: the whole model trained on the server's labelled set only, with plain
    cross-entropy (no contrastive term, no clients). A round is ``K_s`` steps (``supervised_steps``, constant); the
    evaluated model is the EMA teacher, as for Semi-SFL, so that the two differ only in the unlabelled data."""

    step_handlers = {"supervised": "supervised_step"}
    phase_schedule = SupervisedOnlyRounds

    def __init__(self, supervised_steps: int = 50, **kwargs) -> None:
        kwargs.update(adaptive_steps=False, contrastive=False)
        super().__init__(supervised_steps=supervised_steps, **kwargs)

    @override
    def aggregate(self, step: Step) -> None:
        """No client half to aggregate."""
