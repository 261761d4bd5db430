"""The base of the semi-supervised methods of Semi-SFL's tables (labels at the server, unlabelled clients): Semi-SFL
(:mod:`~lightning_sfl.algorithms.semi_sfl`) and its baselines (:mod:`~lightning_sfl.algorithms.semi_baselines`,
:mod:`~lightning_sfl.algorithms.fedmatch`) are each this base with their own losses.

Round ``h`` (:class:`~lightning_sfl.loop.phases.Phases`):

A. ``K_s`` supervised steps on the server's labelled set (:meth:`SemiSupervised.supervised_step`: cross-entropy on the
   weak view, plus a method's term, :meth:`SemiSupervised.supervised_loss`), each followed by one update of the EMA
   teacher ``w̃ ← γ_t·w̃ + (1 − γ_t)·w`` (:func:`~lightning_sfl.losses.semi.ema_update`, warm-up
   ``γ_t = min(1 − 1/(t+1), γ)`` with ``t`` the supervised steps so far).
B. The round's clients download the student's and the teacher's client halves (:meth:`SemiSupervised.download`).
C. ``K_u`` cross-entity steps: the step's two views of every client's batch (:class:`Views`, weak and strong, drawn
   once from the step's generator) are values the step carries (:class:`ViewedStep`) through one split iteration:
   the students upload ``e_i = w_c,i(strong(x))`` and the teachers ``ẽ_i = w̃_c,i(weak(x))``; the server labels with
   the teacher (:meth:`SemiSupervised.pseudo_label`, ``τ``) and trains on each row's loss
   (:meth:`SemiSupervised.unlabelled_rows`; eq. 1's masked CE here); client ``i`` gets the gradient of its own batch
   mean; then its teacher half follows by EMA (``client_teacher="ema"``) or stays as downloaded (``"frozen"``).
D. ``w_c`` ← the unweighted mean of the round's client halves (teacher halves are not uploaded).
E. ``K_s`` for the next round from eq. 9 (:class:`~lightning_sfl.loop.ks_control.SupervisedSteps`), from the round's
   mean supervised loss (``round_metrics``).

A method with ``has_server_half = False`` runs the same round on the whole model (the "server half" is empty: no
activations travel). Accuracy is the teacher's.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from typing_extensions import override

from lightning_sfl import trainer_view
from lightning_sfl.algorithms.async_base import choice
from lightning_sfl.algorithms.base import SplitFedAlgorithm
from lightning_sfl.data.augment import strong_view, weak_view
from lightning_sfl.defences import Defence
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Step
from lightning_sfl.loop.ks_control import SupervisedSteps
from lightning_sfl.loop.phases import Phases, UnlabelledStep
from lightning_sfl.losses import sum_of_client_means
from lightning_sfl.losses.semi import ema_decay, ema_update, pseudo_labels
from lightning_sfl.runtime import federated
from lightning_sfl.runtime.client_bank import clip_gradients_
from lightning_sfl.runtime.guards import check_finite
from lightning_sfl.runtime.options import option_defaults

__all__ = ["KS_OPTIONS", "SemiSupervised", "ViewedStep", "Views", "cosine_lr"]

CLIENT_TEACHERS = ("ema", "frozen")
LR_SCHEDULES = ("constant", "cosine")
#: The options of eq. 9's control of ``K_s``, ``ks_<name>``, in the order of
#: :class:`~lightning_sfl.loop.ks_control.SupervisedSteps`' arguments.
KS_OPTIONS = ("window", "low", "high", "milestone_every", "min", "max")


def cosine_lr(round_idx: int, rounds: int, lr: float, lr_min: float) -> float:
    """The learning rate of round ``h`` of ``H`` under cosine decay: ``lr_min + (lr − lr_min)·(1 + cos(π·h/H))/2``.

    >>> [round(cosine_lr(h, 4, 0.02, 0.005), 6) for h in range(5)]
    [0.02, 0.017803, 0.0125, 0.007197, 0.005]
    """
    return lr_min + (lr - lr_min) * (1 + math.cos(math.pi * round_idx / rounds)) / 2


@dataclass(frozen=True)
class Views:
    """The two views of an unlabelled batch ``x`` ``[B, C, H, W]``, drawn once per step from ``generator`` (weak
    first): ``weak`` (translation) and ``strong`` (translation and photometric noise,
    :mod:`lightning_sfl.data.augment`); ``generator`` goes on to draw what the step draws after them (SemiFL's mix
    partners)."""

    weak: torch.Tensor
    strong: torch.Tensor
    generator: torch.Generator


@dataclass
class ViewedStep(UnlabelledStep):
    """An unlabelled step with its :class:`Views`, and what its split iteration derives from them, in order: the
    teachers' upload ``ẽ`` (``teacher_acts`` ``[B, *act]``), then on the server the pseudo-labels ``ŷ`` and their
    ``mask`` (``[B]`` each) and the teacher's projections ``keys`` (Semi-SFL's; ``None`` otherwise)."""

    views: Views | None = None
    teacher_acts: torch.Tensor | None = None
    pseudo_labels: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    keys: torch.Tensor | None = None

    @classmethod
    def of(cls, step: Step, views: Views) -> ViewedStep:
        """``step`` with its ``views``."""
        return cls(**{f.name: getattr(step, f.name) for f in dataclasses.fields(step)}, views=views)


class SemiSupervised(SplitFedAlgorithm):
    """Labels at the server, unlabelled clients (see the module docstring). ``local_iters`` is ``K_u``; the data module
    needs ``--data.labelled_per_class``.

    Args:
        supervised_steps: ``K_s`` of the first round.
        adaptive_steps: adapt ``K_s`` by eq. 9 (``False``: the paper's constant-``K_s`` ablation, which refuses the
            ``ks_*`` options other than at their defaults).
        ks_window: rounds per loss average of eq. 9.
        ks_low: ``ϱ1``.
        ks_high: ``ϱ2``.
        ks_milestone_every: rounds between the milestones of eq. 9.
        ks_min: lower bound of ``K_s``.
        ks_max: upper bound (default ``4·supervised_steps``).
        labelled_batch_size: rows of the labelled set per supervised step.
        client_batch_size: rows per client per cross-entity step.
        threshold: ``τ`` in ``(0, 1]``, pseudo-label confidence.
        ema: ``γ``, the teacher's decay.
        client_teacher: ``ema`` (Semi-SFL's eq. 8) or ``frozen`` (the authors' code).
        shift: pixels of the random translation (default: 12.5 % of the image side, at least 1).
        lr_schedule: ``constant`` or ``cosine`` (Semi-SFL's: round ``h`` of ``H`` = ``max_epochs`` uses
            ``lr_min + (lr − lr_min)·(1 + cos(π·h/H))/2``; :func:`cosine_lr`).
        lr_min: the floor of the cosine schedule (the authors' code: 0.005); refused with the constant one.
        grad_clip: clip the gradient norm of each model at every step to this value (each client's own, and the
            server's parameters together; ``None``: no clipping; SemiFL's authors clip at 1).
        defences: the clients' defences of what they upload (a split method's: Semi-SFL, FedSwitch-SL), in order, as
            for the supervised split methods (``--model.defences+=NoPeek``): the activation defences act on both
            uploads, the students' (strong view) and the teachers' (weak view), NoPeek on the students' (its inputs
            are the strong view they computed on), a bottleneck on the student's and the teacher's halves alike.
            Refused: the label defences (the clients have no labels), the inversion regulariser (its warm-up needs
            plain synchronous rounds), and any defence where the clients train the whole model.
        **kwargs: see :class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm`.
    """

    step_handlers = {"supervised": "supervised_step", "unlabelled": "unlabelled_step"}
    #: The schedule of the rounds (:meth:`configure_schedule`).
    phase_schedule: ClassVar[type[Phases]] = Phases

    @override
    def give_compression(self, compression: list | None) -> None:
        """The model exchange's compressor only (``crossing='model'``): the two uploads of a view each (students' and
        teachers') take none yet, refused in one line."""
        super().give_compression(compression)
        rows = [c for c in self.compression if c != "model"]
        if rows:
            raise ConfigError(
                f"compression: {type(self).__name__} compresses its model exchange only (crossing='model'); its "
                f"{rows[0]} crossing takes no compressor yet"
            )

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
        ema: float = 0.99,
        client_teacher: str = "ema",
        shift: int | None = None,
        lr_schedule: str = "constant",
        lr_min: float = 0.0,
        grad_clip: float | None = None,
        defences: list[Defence] | None = None,
        **kwargs,
    ) -> None:
        if grad_clip is not None and not grad_clip > 0:
            raise ConfigError(f"grad_clip={grad_clip} must be > 0 (or null: no clipping)")
        if not 0 < threshold <= 1:
            raise ConfigError(f"threshold={threshold} (τ) must be in (0, 1]")
        if not 0 <= ema < 1:
            raise ConfigError(f"ema={ema} (γ) must be in [0, 1)")
        supervised = SupervisedSteps(
            supervised_steps, adaptive_steps, ks_window, ks_low, ks_high, ks_milestone_every, ks_min, ks_max
        )
        if not adaptive_steps:  # eq. 9's settings would change nothing
            ks = (ks_window, ks_low, ks_high, ks_milestone_every, ks_min, ks_max)
            defaults = option_defaults(SemiSupervised)
            for name, value in zip((f"ks_{k}" for k in KS_OPTIONS), ks):
                if value != defaults[name]:
                    raise ConfigError(
                        f"{name}={value!r} changes nothing with adaptive_steps=False: K_s stays supervised_steps"
                    )
        client_teacher = choice("client_teacher", client_teacher, CLIENT_TEACHERS)
        lr_schedule = choice("lr_schedule", lr_schedule, LR_SCHEDULES)
        if not 0 <= lr_min:
            raise ConfigError(f"lr_min={lr_min} must be >= 0")
        if lr_min != 0 and lr_schedule != "cosine":
            raise ConfigError(f"lr_min={lr_min} is the floor of lr_schedule='cosine' (got lr_schedule={lr_schedule!r})")
        super().__init__(**kwargs)
        self.supervised = supervised  # the K_s controller (eq. 9): its state is the schedule's
        self.labelled_batch_size, self.client_batch_size = labelled_batch_size, client_batch_size
        self.client_teacher, self.lr_schedule, self.lr_min = client_teacher, lr_schedule, float(lr_min)
        self.grad_clip = None if grad_clip is None else float(grad_clip)
        federated.checked_schedule(self, self.configure_schedule())  # the settings are checked now (one-line errors)
        self.threshold, self.ema = threshold, ema
        side = self.hparams.input_shape[-1]
        self.shift = max(1, round(side / 8)) if shift is None else int(shift)
        self.shape.defend(self, defences)  # (before the teachers are copied: a bottleneck is theirs too)
        labelled = [type(d).__name__ for d in self.defences.values() if d.needs_client_labels]
        if labelled:
            raise ConfigError(f"defences: {labelled[0]} defends the clients' labels; {type(self).__name__}'s have none")
        name, selection = type(self).__name__, self.selection  # what the defences refuse of the phases: one line now
        self.defences.configure_schedule(self.configure_schedule(), name, self.local_iters, selection)
        self.teacher_client = copy.deepcopy(self.client.net).requires_grad_(False)
        self.teacher_server = copy.deepcopy(self.server.net).requires_grad_(False)
        self.add_state("teacher_updates", lambda: torch.zeros((), dtype=torch.long))
        self._round_sup_losses: list[torch.Tensor] = []
        self._slots_ready = False  # the round's clients downloaded the halves (set at its first unlabelled step)

    @override
    def one_process_only(self) -> str | None:
        """The phases' views, queue and pseudo-labels live in one process."""
        return type(self).__name__

    @override
    def configure_schedule(self) -> Phases:
        """The rounds (:attr:`phase_schedule`): ``K_s`` supervised steps, then ``K_u`` cross-entity steps."""
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
        return [*self.server.parameters(), *self.client.parameters()]

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
    def supervised_step(self, step: Step) -> None:
        """:meth:`supervised_loss` on the weak view of a labelled minibatch; one step, then one teacher update."""
        opt = self.optimizers()
        opt.zero_grad()
        x = weak_view(step.x, self.shift, self._generator(step))
        a = self.client(x)
        loss = self.supervised_loss(a, self.server(a), step.y)
        scale = self.supervised_loss_scale()
        self.manual_backward(loss if scale == 1 else scale * loss)
        self.take_step(opt)
        decay = ema_decay(int(self.teacher_updates), self.ema)
        for teacher, student in self._teacher_pairs():
            ema_update(teacher, student, decay)
        self.teacher_updates += 1
        self._round_sup_losses.append(loss.detach())
        self.log("train/supervised_loss", loss.detach(), on_step=False, on_epoch=True, batch_size=len(step.y))

    def supervised_loss(self, a: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The server's loss on a labelled batch (its activations ``a`` ``[B, *act]``, logits ``[B, N]``): CE."""
        return nn.functional.cross_entropy(logits, labels)

    def supervised_loss_scale(self) -> float:
        """A factor on the supervised loss as it is backpropagated (FedMatch's ``λ_s``); 1 here."""
        return 1.0

    def _teacher_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """``(teacher, student)`` modules the teacher update moves."""
        return [(self.teacher_client, self.client.net), (self.teacher_server, self.server.net)]

    # ------------------------------------------------------------------ C. cross-entity phase
    def unlabelled_step(self, step: Step) -> dict[str, torch.Tensor]:
        """Handler of ``"unlabelled"`` steps: the step's :class:`Views`, then one local step of the round's clients on
        them (a split iteration, or without a server half the FL one:
        :func:`~lightning_sfl.runtime.iteration.full_model_iteration`; both read the views from the
        :class:`ViewedStep`), then the clients' teachers follow their students (``client_teacher="ema"``)."""
        if not self._slots_ready:  # B.: the round's clients download w_c and w̃_c
            self.download()
            self._slots_ready = True
        views = self.views(step)  # the students compute on the strong view: the defences' inputs (NoPeek's X_k)
        step = ViewedStep.of(step, views).replace(x=views.strong)
        server_loss, client_loss = self.local_step(step)
        if self.client_teacher == "ema":  # eq. 8: w̃_c,i ← γ·w̃_c,i + (1 − γ)·w_c,i
            self._client_teachers_follow(step)
        self.on_unlabelled_step_end(step)
        labels, mask = step.pseudo_labels, step.mask
        self.log("train/mask_rate", mask.float().mean(), on_step=False, on_epoch=True, batch_size=len(mask))
        losses = {"server_loss": server_loss.detach(), "client_loss": client_loss.detach()}
        return {**losses, "pseudo_labels": labels, "mask": mask}  # the labels for metrics (PseudoLabelQuality)

    def local_step(self, step: ViewedStep) -> tuple[torch.Tensor, torch.Tensor]:
        """One local step of the round's clients on the step's views, the shape's: a split iteration (the hooks
        below), or without a server half the FL one, whose logits on the students' views are what they "upload"
        (:meth:`upload_views`) and whose rows' loss is :meth:`pseudo_labelled_rows`."""
        forward = lambda s: (None, self.upload_views(s))  # noqa: E731
        return self.shape.iteration(self, step, forward=forward, row_loss=self.pseudo_labelled_rows)

    def views(self, step: Step) -> Views:
        """The step's two views of its rows ``step.x``, from its generator (``_generator``), weak first."""
        g = self._generator(step)
        return Views(weak_view(step.x, self.shift, g), strong_view(step.x, self.shift, g), g)

    def upload_views(self, step: ViewedStep) -> torch.Tensor:
        """C., the clients: the students' ``e_i = w_c,i(strong(x))`` ``[B, *act]`` (checked finite; returned) and the
        teachers' ``ẽ_i = w̃_c,i(weak(x))`` (``step.teacher_acts``), sent up (no labels travel)."""
        noise = self.defences.training_noise(step)  # (the defences' draws: both uploads are defended)
        acts = self.defences.upload(self.bank(step.views.strong, step.local_sizes, step.slots), noise)  # e_i [B, *act]
        check_finite(step, ("activations", acts))
        with torch.no_grad():
            teacher_acts = self.client_banks["teacher"](step.views.weak, step.local_sizes, step.slots)  # ẽ_i
            step.teacher_acts = self.defences.upload(teacher_acts, noise)
        self.send_up(step, acts, step.teacher_acts)
        return acts

    def pseudo_labelled_rows(self, a: torch.Tensor, step: ViewedStep) -> torch.Tensor:
        """C., the server: pseudo-labels ``ŷ`` from the teacher on the weak view (eq. 1; ``step.pseudo_labels``,
        ``step.mask``), then the per-row loss ``[B]`` of the students' activations ``a`` (:meth:`unlabelled_rows`)."""
        with torch.no_grad():
            teacher_logits = self.teacher_server(step.teacher_acts)
            step.keys = self.teacher_keys(step.teacher_acts)
        step.pseudo_labels, step.mask = self.pseudo_label(step, step.views.weak, teacher_logits)
        return self.unlabelled_rows(step, a, step.pseudo_labels, step.mask)

    def send_activations(self, step: ViewedStep) -> tuple[torch.Tensor, torch.Tensor]:
        """The split iteration's upload (:meth:`upload_views`) and the server's copy of ``e_i``."""
        acts = self.upload_views(step)
        return acts, acts.detach().requires_grad_(True)

    def split_losses(self, acts: torch.Tensor, a: torch.Tensor, step: ViewedStep) -> tuple[torch.Tensor, torch.Tensor]:
        """The split iteration's losses from :meth:`pseudo_labelled_rows`: the clients' loss is the sum over clients of
        each client's mean (each gets its own gradient, eq. 8), the server's the mean over clients (eq. 7)."""
        rows = self.pseudo_labelled_rows(a, step)
        client_loss = sum_of_client_means(rows, step.owner, step.sizes)
        return client_loss / len(step.sizes), client_loss

    @override
    def client_extra_loss(self, step: ViewedStep, outputs: torch.Tensor, features=None) -> torch.Tensor | None:
        """Hook 5: :meth:`client_side_loss` of the step."""
        return self.client_side_loss(step)

    # ------------------------------------------------------------------ the methods' hooks
    def download(self) -> None:
        """B.: the round's clients download the student's and the teacher's client halves (bytes counted)."""
        self.reset_slots()

    def send_up(self, step: Step, acts: torch.Tensor, teacher_acts: torch.Tensor) -> None:
        """Bytes of what the clients send per step: ``e_i`` and ``ẽ_i`` (no labels); nothing in full-model FL."""
        for tensor in (acts, teacher_acts):
            self.shape.count_up(self.ledger, "activations", tensor, step)

    def teacher_keys(self, teacher_acts: torch.Tensor) -> torch.Tensor | None:
        """What the server keeps of the teachers' upload besides their logits (Semi-SFL: projections); none here."""
        return None

    def pseudo_label(self, step: ViewedStep, weak: torch.Tensor, teacher_logits: torch.Tensor):
        """``(ŷ, mask)`` ``[B]`` each (eq. 1): the teacher's argmax on the weak view and its confidence ``> τ``."""
        return pseudo_labels(teacher_logits, self.threshold)

    def unlabelled_rows(self, step: ViewedStep, a: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor):
        """Per-row loss ``[B]`` of the students' activations ``a`` (strong view): eq. 1's masked CE (masked rows count
        in the mean)."""
        logits = self.server(a)
        return nn.functional.cross_entropy(logits, labels, reduction="none") * mask.to(logits.dtype)

    def client_side_loss(self, step: ViewedStep) -> torch.Tensor | None:
        """A loss computed on the clients alone (full-model methods; SemiFL's mixup), summed over clients."""
        return None

    def on_unlabelled_step_end(self, step: ViewedStep) -> None:
        """After a cross-entity step (Semi-SFL: its queue takes the teacher's projections); nothing here."""

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

    def _generator(self, step: Step) -> torch.Generator:
        """Augmentation draws seeded by (seed, round, step): the same views in a resumed run."""
        seed = int(self.client_stats.seed) * 1_000_003 + step.round * 10_007 + step.index
        return torch.Generator().manual_seed(seed)

    # ------------------------------------------------------------------ D./E. aggregation and K_s
    @override
    def aggregate(self, step: Step) -> None:
        """D.: ``w_c`` ← the unweighted mean of the round's client halves (teacher halves stay on the clients)."""
        weights = torch.ones(len(step.clients), dtype=torch.float64)
        self.aggregate_slots(weights, step.slots, {"client": self.client.net}, step.clients, self.step_seed(step))

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
        """The global teacher, with the activation defences as deployed: logits ``[B, N]``."""
        return self.teacher_server(self.defences.upload(self.teacher_client(x)))
