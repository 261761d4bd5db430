"""The semi-supervised baselines of Semi-SFL's Tables II, IV and V, each the semi-supervised base
(:class:`~lightning_sfl.algorithms.semi_supervised.SemiSupervised`, Semi-SFL without its projection head and queue)
with one to three changes. Labelled data stays on the server, clients are unlabelled; a round is ``K_s`` supervised
steps on the server, then ``K_u`` steps on the round's clients, then the clients' models are averaged (unweighted).

* :class:`FedSwitchSL` (``fedswitch_sl``) — Semi-SFL without the contrastive and clustering terms (eqs. 3 and 5), with
  teacher/student *switching* for the pseudo-labels: the paper's ablation of its clustering regularisation.
* :class:`FedSwitch` (``fedswitch``; Zhao et al., 2023, arXiv 2301.10114) — the same in full-model federated learning:
  every client trains the whole model on FixMatch's loss (CE of the strong view on the teacher's confident
  pseudo-labels of the weak view), its local teacher follows its student by EMA ("local teacher adaptation"), and the
  server trains the whole model on the labelled set and keeps the global EMA teacher (the evaluated model).
* :class:`SemiFL` (``semifl``; Diao et al., NeurIPS 2022) — full-model federated learning with server training and
  pseudo-labelled clients with mixup; no EMA teacher: the clients label their data with the global model they
  received (frozen through the round) and the evaluated model is the server-trained global model.

**Switching** (FedSwitch, FedSwitch-SL). FedSwitch's abstract names "adaptive switching between teacher and student for
pseudo-label generation" without the rule in what we could read; our rule (``switching="confidence"``, an assumption,
not verified against its paper): for each client and step, the pseudo-labels come from whichever of the client's
student and teacher is more confident on that client's weak batch (mean max-softmax). In split learning this costs a
third activation upload per step (the student's weak view), counted in the ledger. ``switching="off"``: the teacher
always labels.

**SemiFL's client loss** (``client_side_loss``; its paper's eq. for the "mix" loss, as in its authors' code): over the
client's confident rows ``F`` (the fix set, confidence ``≥ τ``),
``mean_F [CE(f(strong x), ŷ) + λ·CE(f(m), ŷ) + (1 − λ)·CE(f(m), ŷ')]`` with ``m = λ·weak(x) + (1 − λ)·weak(x')``,
``x'`` a row of the same client's batch drawn with replacement, ``ŷ'`` its argmax pseudo-label (no threshold) and
``λ ~ Beta(α, α)`` per client and step (``α = 0.75``). Departures from the authors' code, documented: the mix rows
come from the same minibatch (the code draws them from the client's whole set); the server trains before the clients
in a round (the code: after), so the model evaluated at the end of round ``h`` is the server-trained model of round
``h``; a client without a confident row still uploads (the code leaves it out of the round). As in the authors' code
(``diaoenmao/SemiFL-…``, ``src/modules/modules.py``), by default: every model's gradient norm is clipped at 1
(``grad_clip``, on the server and on each client); the server combines the clients' models with a *global
optimiser*, SGD with lr 1 and momentum 0.5 (``global_lr``, ``global_momentum``) on the pseudo-gradient
``x − mean_k x_k`` (unweighted mean over the round's clients), its momentum buffer kept across rounds
(checkpointed; ``global_momentum=0`` with ``global_lr=1`` is the plain unweighted mean); and static batch
normalisation (``static_bn``, :func:`static_batch_norm_`: BatchNorm statistics recomputed over the whole training set
before the model is sent and before it is tested; the clients train on batch statistics either way).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from torch import nn
from typing_extensions import override

from lightning_sfl.algorithms.async_base import choice
from lightning_sfl.algorithms.fedopt import server_step
from lightning_sfl.algorithms.registry import register
from lightning_sfl.algorithms.semi_supervised import SemiSupervised, ViewedStep
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Step
from lightning_sfl.losses.semi import pseudo_labels
from lightning_sfl.runtime.aggregate import flat_parameters, load_flat_parameters, parameter_zeros

__all__ = [
    "FedSwitch",
    "FedSwitchSL",
    "SemiFL",
    "mixup_rows",
    "static_batch_norm_",
    "client_means",
    "same_client_partners",
    "switch_logits",
]

SWITCHING = ("confidence", "off")


def client_means(values: torch.Tensor, owner: torch.Tensor, num_clients: int) -> torch.Tensor:
    """Mean of ``values`` ``[B]`` over each client's rows (``owner`` ``[B]`` in ``0..S-1``): ``[S]``.

    >>> client_means(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([0, 0, 1]), 2).tolist()
    [2.0, 5.0]
    """
    sums = torch.zeros(num_clients, dtype=values.dtype, device=values.device).index_add_(0, owner, values)
    counts = torch.bincount(owner, minlength=num_clients).to(values.dtype)
    return sums / counts.clamp(min=1)


def switch_logits(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, owner: torch.Tensor, num_clients: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Our switching rule: each client's rows take the logits ``[B, N]`` of whichever of its student and teacher has
    the higher mean confidence (max softmax) over that client's rows; returns those logits and ``use_student`` ``[S]``
    (ties: the teacher)."""
    confidence = [lg.softmax(dim=1).max(dim=1).values for lg in (student_logits, teacher_logits)]
    student_mean, teacher_mean = (client_means(c, owner, num_clients) for c in confidence)
    use_student = student_mean > teacher_mean
    return torch.where(use_student[owner][:, None], student_logits, teacher_logits), use_student


@torch.no_grad()
def static_batch_norm_(model: nn.Module, batches) -> int:
    """SemiFL's static batch normalisation (sBN): every BatchNorm of ``model`` forgets its running statistics and
    recomputes them as the plain average over ``batches`` (an iterable of inputs; ``momentum=None``), in training mode;
    the model's mode and momenta are restored. Returns the number of BatchNorm layers (0: nothing to do).

    >>> bn = nn.BatchNorm1d(1)
    >>> static_batch_norm_(bn, [torch.tensor([[1.0], [3.0]]), torch.tensor([[5.0], [7.0]])]), bn.running_mean.tolist()
    (1, [4.0])
    """
    layers = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not layers:
        return 0
    was_training, momenta = model.training, [m.momentum for m in layers]
    for m in layers:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    for x in batches:
        model(x)
    for m, momentum in zip(layers, momenta):
        m.momentum = momentum
    model.train(was_training)
    return len(layers)


def same_client_partners(local_sizes: torch.Tensor, owner: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """For each row ``[B]`` (clients' rows contiguous, ``local_sizes`` ``[S]``), a row of the same client drawn
    uniformly with replacement: SemiFL's mix partner ``x'``."""
    starts = torch.cumsum(local_sizes, 0) - local_sizes
    draw = (torch.rand(len(owner), generator=generator) * local_sizes[owner].cpu()).long()
    return (starts[owner].cpu() + draw).to(owner.device)


def mixup_rows(logits: torch.Tensor, labels: torch.Tensor, partner: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """SemiFL's mix loss per row ``[B]``: ``λ·CE(f(m), ŷ) + (1 − λ)·CE(f(m), ŷ')`` with ``logits = f(m)`` ``[B, N]``,
    ``ŷ' = labels[partner]`` and ``lam`` ``[B]``."""
    ce = nn.functional.cross_entropy
    return lam * ce(logits, labels, reduction="none") + (1 - lam) * ce(logits, labels[partner], reduction="none")


@register("fedswitch_sl", family="semi")
class FedSwitchSL(SemiSupervised):
    """Semi-SFL without eqs. 3 and 5 (CE terms only: the semi-supervised base), with teacher/student switching for
    the pseudo-labels (see the module docstring).

    Args:
        switching: ``confidence`` (per client and step, the more confident of student and teacher labels) or ``off``.
        **kwargs: see :class:`~lightning_sfl.algorithms.semi_supervised.SemiSupervised`.
    """

    def __init__(self, switching: str = "confidence", **kwargs) -> None:
        self.switching = choice("switching", switching, SWITCHING)
        super().__init__(**kwargs)

    @override
    def pseudo_label(self, step: ViewedStep, weak: torch.Tensor, teacher_logits: torch.Tensor):
        if self.switching == "off":
            return super().pseudo_label(step, weak, teacher_logits)
        with torch.no_grad():
            student_acts = self.bank(weak, step.local_sizes, step.slots)
            self.shape.count_up(self.ledger, "activations", student_acts, step)  # the student's weak view too
            student_logits = self.server(student_acts)
        logits, use_student = switch_logits(student_logits, teacher_logits.detach(), step.owner, len(step.clients))
        self.log("train/student_labels", use_student.float().mean(), on_step=False, on_epoch=True, batch_size=1)
        return pseudo_labels(logits, self.threshold)


@register("fedswitch", family="semi")
class FedSwitch(FedSwitchSL):
    """FedSwitch-SL in full-model federated learning: the clients train the whole model (no activations travel), the
    server trains it on the labelled set; the evaluated model is the global EMA teacher."""

    has_server_half: ClassVar[bool] = False


@register("semifl", family="semi")
class SemiFL(SemiSupervised):
    """SemiFL (see the module docstring): full-model FL; the server trains on the labelled set; each client labels its
    batch with the global model it received (``τ``, confidence ``≥ τ`` as in the authors' code) and trains on the
    strong view of its confident rows plus the mixup loss.

    Args:
        mix_alpha: ``α`` of ``λ ~ Beta(α, α)``.
        global_momentum: momentum of the server's global optimiser (the authors': 0.5; 0 with ``global_lr = 1``:
            the plain mean).
        global_lr: its learning rate (the authors': 1).
        grad_clip: see :class:`~lightning_sfl.algorithms.semi_supervised.SemiSupervised` (the authors' code clips
            every model at 1).
        static_bn: sBN (:func:`static_batch_norm_`): the global model's BatchNorm statistics are recomputed over the
            whole training set (the server's labelled rows and every client's, without augmentation) before the
            clients download it and before it is evaluated, as in the authors' code; nothing to do for a model
            without BatchNorm (none of the digits, CNN, AlexNet and VGG models of the zoo has any).
        ema: fixed at 0 (the teacher is the current global model): another value is refused.
        client_teacher: fixed at ``frozen`` (the clients label with the global model they downloaded): ``ema`` is
            refused.
        **kwargs: see :class:`~lightning_sfl.algorithms.semi_supervised.SemiSupervised`.
    """

    has_server_half: ClassVar[bool] = False

    def __init__(
        self,
        mix_alpha: float = 0.75,
        global_momentum: float = 0.5,
        global_lr: float = 1.0,
        grad_clip: float | None = 1.0,
        static_bn: bool = True,
        ema: float = 0.0,
        client_teacher: str = "frozen",
        **kwargs,
    ) -> None:
        if not mix_alpha > 0:
            raise ConfigError(f"mix_alpha={mix_alpha} (α of Beta(α, α)) must be > 0")
        if not 0 <= global_momentum < 1 or not global_lr > 0:
            raise ConfigError(
                f"need 0 <= global_momentum < 1 and global_lr > 0, got global_momentum={global_momentum}, "
                f"global_lr={global_lr}"
            )
        self.mix_alpha = float(mix_alpha)
        self.global_momentum, self.global_lr = float(global_momentum), float(global_lr)
        self.static_bn = bool(static_bn)
        super().__init__(grad_clip=grad_clip, ema=ema, client_teacher=client_teacher, **kwargs)
        self.add_state("global_momentum_buffer", lambda: parameter_zeros(self.client.net))

    @classmethod
    @override
    def unused_options(cls) -> dict[str, str]:
        """``ema`` and ``client_teacher``: SemiFL's teacher is the current global model, frozen on the clients."""
        teacher = "SemiFL's teacher is the current global model, frozen on the clients"
        return {**super().unused_options(), "ema": teacher, "client_teacher": teacher}

    @torch.no_grad()
    @override
    def aggregate(self, step: Step) -> None:
        """The unweighted mean of the round's client models, then the global optimiser: SGD with ``global_lr`` and
        ``global_momentum`` on the pseudo-gradient (:func:`~lightning_sfl.algorithms.fedopt.server_step`'s
        ``momentum``: ``m ← β·m + Δ``, ``x ← x + η·m`` with ``Δ = mean_k x_k − x``, torch's SGD on ``−Δ``)."""
        if self.global_momentum == 0 and self.global_lr == 1:
            return super().aggregate(step)
        x = flat_parameters(self.client.net).detach()
        super().aggregate(step)
        delta = flat_parameters(self.client.net).detach() - x
        new_x, m, _ = server_step(
            "momentum", x, delta, self.global_momentum_buffer, self.global_momentum_buffer, self.global_lr,
            self.global_momentum,
        )  # fmt: skip
        self.global_momentum_buffer.copy_(m)
        load_flat_parameters(self.client.net, new_x)

    def _static_bn(self, model: nn.Module) -> bool:
        """sBN of ``model`` over the whole training set, in batches of 250 rows (the authors'); ``False`` if there is
        nothing to do (off, or no BatchNorm)."""
        federation = self.federation
        if not self.static_bn or federation is None or federation.data is None:
            return False
        if not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
            return False
        stats, device = federation.stats, next(model.parameters()).device
        rows = torch.cat([stats.labelled, *stats.shards]).sort().values
        static_batch_norm_(model, (federation.data.train_inputs(r, device) for r in rows.split(250)))
        return True

    @override
    def download(self) -> None:
        """The clients download the global model once: it is both their student and their (frozen) labeller. With
        sBN its statistics are recomputed first, the clients label in eval mode (with those statistics, as the
        authors' code) and the evaluated model — the same server-trained weights — takes the same statistics."""
        recomputed = self._static_bn(self.client.net)
        self.reset_slots(models={"client": self.client.net})
        self.client_banks["teacher"].reset(self.client.net)
        if recomputed:
            self.client_banks["teacher"].eval()  # until Lightning sets training mode again: the next round
            with torch.no_grad():
                for name, buffer in self.client.net.named_buffers():
                    self.teacher_client.get_buffer(name).copy_(buffer)

    @override
    def pseudo_label(self, step: ViewedStep, weak: torch.Tensor, teacher_logits: torch.Tensor):
        return pseudo_labels(teacher_logits, self.threshold, strict=False)

    def _fix_counts(self, step: Step, mask: torch.Tensor) -> torch.Tensor:
        """Confident rows of each row's client, at least 1: ``[B]``."""
        counts = torch.bincount(step.owner[mask], minlength=len(step.clients)).clamp(min=1)
        return counts[step.owner].to(torch.get_default_dtype())

    @override
    def unlabelled_rows(self, step: ViewedStep, a: torch.Tensor, labels, mask) -> torch.Tensor:
        """``CE(f(strong x), ŷ)`` on the fix set, scaled so that the base's per-client mean is a mean over it."""
        scale = step.sizes[step.owner].to(a.dtype) / self._fix_counts(step, mask).to(a.dtype)
        return nn.functional.cross_entropy(self.server(a), labels, reduction="none") * mask.to(a.dtype) * scale

    @override
    def client_side_loss(self, step: ViewedStep) -> torch.Tensor:
        """The mixup term ``λ·CE(f(m), ŷ) + (1 − λ)·CE(f(m), ŷ')`` over each client's fix set, summed over
        clients (the weak view's rows, mixed; partners and ``λ`` drawn from the step's generator)."""
        weak, labels, mask, generator = step.views.weak, step.pseudo_labels, step.mask, step.views.generator
        rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=generator)))  # seeded: exact resume
        lam = torch.as_tensor(rng.beta(self.mix_alpha, self.mix_alpha, len(step.clients)), dtype=weak.dtype)
        lam = lam.to(weak.device)[step.owner]  # [B], one λ per client
        partner = same_client_partners(step.local_sizes, step.owner, generator)
        mixed = lam[:, None, None, None] * weak + (1 - lam[:, None, None, None]) * weak[partner]
        rows = mixup_rows(self.server(self.bank(mixed, step.local_sizes, step.slots)), labels, partner, lam)
        return (rows * mask.to(rows.dtype) / self._fix_counts(step, mask).to(rows.dtype)).sum()
