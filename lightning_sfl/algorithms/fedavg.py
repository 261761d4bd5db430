"""Plain federated-learning baselines: FedAvg and the methods that change its local objective.

With ``split = False`` the "client half" of :class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm` is the
whole model and there is no server half: every selected client trains its own full copy (one slot of
``self.bank``) for ``T`` local SGD iterations on its own minibatches, and the server averages the copies
weighted by ``|D_k|`` (McMahan et al., 2017). Each method below is FedAvg plus one change:

* FedAvg: ``CE(f(x), y)``;
* FedProx: ``CE + (μ/2)‖w − w_g‖²`` (``w_g``: global model of the round) — a regulariser;
* FedDyn: ``CE − ⟨∇L_k(θ_k^{t−1}), θ⟩ + (α/2)‖θ − θ^{t−1}‖²`` — a regulariser and its own aggregation;
* FedLC: ``CE(f(x) − τ·n_y^{−1/4}, y)`` — a row loss;
* FedLogit: ``CE(f(x) + log P_k(y), y)`` — a row loss;
* FedDecorr: ``CE + β·(1/d²)‖K(z)‖_F²`` — a regulariser on the features ``z``.

One training step is one local iteration of every selected client at once: the loss is the sum over clients
of each client's own objective (mean over its own rows plus its own regulariser), so the gradient w.r.t. slot
``k`` is exactly client ``k``'s gradient, and one SGD step over all slots is every client's local step.

>>> counts = torch.tensor([[16.0, 0.0, 81.0]])  # class 1 absent: its calibrated logit is -inf
>>> fedlc_margin(counts, tau=1.0).tolist()
[[0.5, inf, 0.3333333432674408]]
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from typing_extensions import override

from lightning_sfl.algorithms.base import SplitFedAlgorithm
from lightning_sfl.algorithms.registry import register
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import LocalEpochs, Schedule, Step
from lightning_sfl.loop.selection import FedCBSSelection
from lightning_sfl.loss_terms import ProximalTerm
from lightning_sfl.losses import row_label_distribution
from lightning_sfl.runtime import banks, federated
from lightning_sfl.runtime.aggregate import (
    flat_parameters,
    load_flat_parameters,
    parameter_zeros,
    slot_flat_parameters,
)
from lightning_sfl.runtime.iteration import full_model_iteration
from lightning_sfl.runtime.options import option_defaults
from lightning_sfl.system.comm import module_bytes

__all__ = [
    "FedAvg",
    "FedDecorr",
    "FedDyn",
    "FedLC",
    "FedLogit",
    "FedProx",
    "feddecorr_loss",
    "fedlc_cross_entropy",
    "fedlc_margin",
]


# ----------------------------------------------------------------------------------------------- pure functions
def fedlc_margin(counts: torch.Tensor, tau: float, floor: float = 0.0) -> torch.Tensor:
    """FedLC's per-class calibration ``τ·n_y^{−1/4}`` (Zhang et al., 2022, eq. 6) for class counts ``n_y``.

    A class the client does not hold (``n_y = 0``) gets ``+inf`` (the limit of ``n^{-1/4}`` as ``n → 0``), so its
    calibrated logit is ``−inf`` and it leaves the softmax. With ``τ = 0`` the margin is 0 for every class
    (plain cross-entropy), not ``0·inf``. ``floor > 0``: a missing class counts as ``n = floor`` instead (finite
    margin ``τ·floor^{−1/4}``), as public FedLC code does with ``1e-8`` or ``1e-5``.
    """
    if tau < 0:
        raise ConfigError(f"tau={tau} must be >= 0")
    if floor > 0:
        return tau * torch.where(counts > 0, counts, torch.full_like(counts, floor)).pow(-0.25)
    margin = tau * counts.clamp_min(1).pow(-0.25)
    absent = torch.full_like(margin, float("inf") if tau > 0 else 0.0)
    return torch.where(counts > 0, margin, absent)


def fedlc_cross_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    counts: torch.Tensor,
    tau: float,
    reduction: str = "mean",
    floor: float = 0.0,
) -> torch.Tensor:
    """FedLC's calibrated loss (eq. 6): ``−log softmax(f(x) − τ·n^{−1/4})_y``.

    Args:
        logits: ``[B, N]`` model outputs ``f(x)``.
        targets: ``[B]`` labels; each must be a class the row's client holds (``n_y > 0``), which is always
            the case for a client's own data, so the loss is finite.
        counts: ``[N]`` or ``[B, N]`` local class counts ``n_{k,y}`` of each row's client.
        tau: ``τ >= 0``.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        floor: ``0`` (default) or the count a missing class is given (see :func:`fedlc_margin`).

    Absent classes enter with logit ``−inf``: softmax gives them probability 0 and their gradient is exactly 0
    (finite), as for ``log P_k(y) = −inf`` in :func:`~lightning_sfl.losses.log_prior`.
    """
    calibrated = logits - fedlc_margin(counts.to(logits.dtype), tau, floor)
    return F.cross_entropy(calibrated, targets, reduction=reduction)


def feddecorr_loss(z: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """FedDecorr's regulariser (Shi et al., ICLR 2023, eq. 4): ``(1/d²)‖K‖_F²`` on one client's features.

    ``z`` ``[n, d]`` is standardised per dimension over its ``n`` rows (mean 0, population variance 1:
    ``ẑ = (z − mean)/sqrt(var + eps)``) and ``K = ẑᵀẑ / n`` is their ``d × d`` correlation matrix (diagonal
    ``var/(var+eps) ≈ 1``). Differences from the authors' code (``FedDecorrLoss`` in Yujun-Shi/FedCLS), which
    averages the squared *off-diagonal* entries of the unnormalised ``ẑᵀẑ`` and divides by ``n``: we follow the
    paper's formula; both have the same minimiser (uncorrelated dimensions).

    Degenerate inputs never give NaN: with fewer than two rows the correlation is undefined and the term is 0
    (as in the authors' code); a dimension with zero variance (e.g. a dead ReLU unit) standardises to 0 thanks
    to ``eps`` and contributes nothing.

    >>> round(float(feddecorr_loss(torch.tensor([[1.0, 2.0], [2.0, 4.0], [3.0, 0.0]]))), 6)  # K = [[1,-.5],[-.5,1]]
    0.625
    """
    n, d = z.shape
    if n < 2:
        return z.new_zeros(())
    centred = z - z.mean(dim=0, keepdim=True)
    zhat = centred / torch.sqrt(centred.pow(2).mean(dim=0, keepdim=True) + eps)
    corr = zhat.T @ zhat / n
    return corr.pow(2).sum() / d**2


# ----------------------------------------------------------------------------------------------- FedAvg
@register("fedavg", family="fl")
class FedAvg(SplitFedAlgorithm):
    """FedAvg (McMahan et al., AISTATS 2017): local SGD on the full model, ``|D_k|``-weighted averaging.

    Client ``k`` minimises ``F_k(w) = (1/B_k) Σ_{i∈k} ℓ(f(w; x_i), y_i)`` for ``T`` SGD steps from the global
    ``w``; the server sets ``w ← Σ_k |D_k| w_k / Σ_k |D_k|`` (eq. 10 of SCALA, done by the base class).

    Subclasses change the local objective through two hooks: :meth:`row_loss` (per-row loss, plain CE here)
    and :meth:`client_regulariser` (hook 5 of the base: a regulariser every process computes in full, none here). Set
    ``uses_features = True`` to receive the features ``z`` (input of the last layer) in :meth:`client_regulariser`.

    Every FL method can also train each client for ``E`` local epochs over its own shard instead of ``T`` steps
    (``local_epochs``; :class:`~lightning_sfl.loop.LocalEpochs`): clients with more data then take more steps
    (``τ_k = ⌈E·|D_k| / b⌉``), the setting in which FedNova differs from FedAvg.

    Args:
        local_epochs: ``E > 0`` local epochs per round (``local_iters`` is then unused: other than its default, it is
            refused); ``None``: ``T`` local iterations with SCALA's batch split (eq. 3), the default.
        local_batch_size: rows per client and step with ``local_epochs`` (refused without it); ``None``: ``⌊B / S⌋``.
        **kwargs: see :class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm` (``split_point`` is refused: there is
            no server half).
    """

    has_server_half: ClassVar[bool] = False
    #: Whether :meth:`client_regulariser` needs the features ``z`` (then the bank's ``forward_features`` is used).
    uses_features: ClassVar[bool] = False

    def __init__(self, local_epochs: float | None = None, local_batch_size: int | None = None, **kwargs) -> None:
        if local_batch_size is not None and local_epochs is None:
            raise ConfigError(
                f"local_batch_size={local_batch_size!r} is a setting of local_epochs: give local_epochs too"
            )
        super().__init__(**kwargs)
        self.local_epochs, self.local_batch_size = local_epochs, local_batch_size
        if local_epochs is not None and self.local_iters != option_defaults(type(self))["local_iters"]:
            raise ConfigError(
                f"local_iters={self.local_iters} changes nothing with local_epochs: each client takes "
                "⌈E·|D_k| / b⌉ steps"
            )
        if local_epochs is not None:  # the settings are checked now (one-line errors at construction)
            federated.checked_schedule(self, self.local_epoch_rounds())

    @override
    def configure_schedule(self) -> Schedule:
        """``T`` local iterations (the base's), or ``E`` local epochs per client with ``local_epochs``."""
        if self.local_epochs is None:
            return super().configure_schedule()
        return self.local_epoch_rounds()

    def local_epoch_rounds(self) -> LocalEpochs:
        """The schedule of ``E`` local epochs per client."""
        return LocalEpochs(self.local_epochs, self.local_batch_size, self.selection)

    def local_steps(self, clients: torch.Tensor) -> torch.Tensor:
        """``τ_k``: local steps each of ``clients`` ``[S]`` takes in a round (from the schedule), ``[S]``."""
        return self.schedule.local_steps(self.client_sizes[clients].cpu(), self.client_stats)

    def client_counts(self, step: Step) -> torch.Tensor:
        """Local class counts ``n_{k,y}`` of each slot's client, ``[S, N]`` (exact integers, as floats)."""
        clients = step.clients
        return (self.client_sizes[clients, None] * self.label_dist[clients]).round()

    def row_loss(self, logits: torch.Tensor, step: Step) -> torch.Tensor:
        """Loss of every row, ``[B]``. Default: plain cross-entropy (:meth:`cross_entropy`)."""
        return self.cross_entropy(logits, step.y)

    def slot_forward(self, step: Step) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Every slot's model on its client's rows: features ``z`` (input of the last layer, only when
        ``uses_features``, else ``None``) and logits ``[B, N]``."""
        if self.uses_features:
            return self.bank.forward_features(step.x, step.local_sizes, step.slots)
        return None, self.bank(step.x, step.local_sizes, step.slots)

    def local_iteration(self, step: Step) -> tuple[torch.Tensor, torch.Tensor]:
        """One local SGD step of every selected client: ``Σ_k [mean_{i∈k} ℓ_i + R_k]``, backward, step
        (:func:`~lightning_sfl.runtime.iteration.full_model_iteration`)."""
        loss = full_model_iteration(self, step, self.slot_forward, self.row_loss)
        return loss, loss


# ----------------------------------------------------------------------------------------------- FedProx
@register("fedprox", family="fl")
class FedProx(FedAvg):
    """FedProx (Li et al., MLSys 2020): FedAvg plus a proximal term.

    Client ``k`` minimises ``h_k(w) = F_k(w) + (μ/2)‖w − w_g‖²`` where ``w_g`` is the global model of the round
    (``self.client.net``, unchanged during the round); its gradient adds ``μ(w − w_g)``: FedAvg plus
    :class:`~lightning_sfl.loss_terms.ProximalTerm`, by composition.

    Args:
        mu: ``μ >= 0``. Default 0.01: from the grid ``{0.001, 0.01, 0.1, 1}`` of Li et al. (§5.3), the value most
            benchmarks of label skew use (e.g. NIID-Bench, Li et al., ICDE 2022). The SCALA papers do not state it.
        **kwargs: see :class:`FedAvg`.
    """

    def __init__(self, mu: float = 0.01, **kwargs) -> None:
        term = ProximalTerm(mu)  # (checks mu first)
        super().__init__(**kwargs)
        self._proximal = term
        self.add_client_term(term)

    @property
    def mu(self) -> float:
        """``μ``, the weight of the proximal term (its :class:`~lightning_sfl.loss_terms.ProximalTerm`'s)."""
        return self._proximal.mu

    @mu.setter
    def mu(self, value: float) -> None:
        self._proximal.mu = float(value)


# ----------------------------------------------------------------------------------------------- FedDyn
@register("feddyn", family="fl")
class FedDyn(FedAvg):
    """FedDyn (Acar et al., ICLR 2021, Algorithm 1): dynamic regularisation and a corrected server model.

    Client ``k ∈ P_t`` starts from ``θ^{t−1}`` and minimises

        ``L_k(θ) − ⟨∇L_k(θ_k^{t−1}), θ⟩ + (α/2)‖θ − θ^{t−1}‖²``

    (``T`` SGD steps), then updates its state ``∇L_k(θ_k^t) = ∇L_k(θ_k^{t−1}) − α(θ_k^t − θ^{t−1})``. The server
    updates ``h^t = h^{t−1} − α·(1/K)Σ_{k∈P_t}(θ_k^t − θ^{t−1})`` (``K``: all clients) and sets

        ``θ^t = (1/|P_t|)Σ_{k∈P_t} θ_k^t − (1/α)h^t``.

    As in the paper, the average over participants is **uniform** (not ``|D_k|``-weighted as in FedAvg);
    buffers of the model (e.g. BatchNorm statistics) are averaged uniformly too. States start at 0.

    The per-client gradients ``∇L_k`` (``feddyn_client_grads``, ``[K, P]`` over the flattened parameters, order of
    ``self.client.net.parameters()``) are a per-client store: rows held for the clients that have trained (0 for the
    others), on disk beyond a memory budget, written incrementally with the checkpoints
    (:mod:`~lightning_sfl.client_store`); ``h`` (``feddyn_h``, ``[P]``) is a persistent buffer. Clients
    keep their ``∇L_k`` locally: no extra traffic.

    Args:
        penalty: FedDyn's ``α > 0``, the weight of the dynamic regulariser (named in words: ``--data.alpha`` is
            the skew). Default 0.01: Acar et al. search ``α ∈ {0.1, 0.01, 0.001}`` and use 0.01 in most of
            their CIFAR-10/100 settings.
        **kwargs: see :class:`FedAvg`.
    """

    averages_uploaded_models = False  # its server model is its own correction of the average

    def __init__(self, penalty: float = 0.01, **kwargs) -> None:
        if not penalty > 0:
            raise ConfigError(f"penalty={penalty} must be > 0")
        super().__init__(**kwargs)
        self.penalty = penalty
        self.add_client_state("feddyn_client_grads", lambda: parameter_zeros(self.client.net))  # ∇L_k, [K, P]
        self.add_state("feddyn_h", lambda: parameter_zeros(self.client.net))

    @override
    def client_regulariser(self, step: Step, logits: torch.Tensor, features: torch.Tensor | None) -> torch.Tensor:
        """``Σ_k [−⟨∇L_k(θ_k^{t−1}), θ_k⟩ + (α/2)‖θ_k − θ^{t−1}‖²]`` over the slots."""
        theta_prev = flat_parameters(self.client.net).detach()
        total = logits.new_zeros(())
        for k, client in zip(step.slots_list(), step.clients.tolist()):
            theta = flat_parameters(self.bank.slots[k])
            total = total - torch.dot(self.feddyn_client_grads[client], theta)
            total = total + 0.5 * self.penalty * (theta - theta_prev).pow(2).sum()
        return total

    @torch.no_grad()
    @override
    def aggregate(self, step: Step) -> None:
        """Client states, server state ``h`` and ``θ^t`` (uniform over participants); traffic as the base."""
        clients = step.clients
        theta_prev = flat_parameters(self.client.net).clone()
        thetas = slot_flat_parameters(self.bank, step.slots_list())  # [S, P]
        delta = thetas - theta_prev
        self.feddyn_client_grads[clients] -= self.penalty * delta
        self.feddyn_h -= self.penalty * delta.sum(dim=0) / self.feddyn_client_grads.shape[0]
        self.bank.aggregate_into(self.client.net, torch.ones(len(self.bank)))  # uniform; also the buffers
        load_flat_parameters(self.client.net, thetas.double().mean(dim=0) - self.feddyn_h.double() / self.penalty)
        self.ledger.add("up", banks.traffic_kind(self), module_bytes(self.client.net))


# ----------------------------------------------------------------------------------------------- FedLC
@register("fedlc", family="fl")
class FedLC(FedAvg):
    """FedLC (Zhang et al., ICML 2022, eq. 6): FedAvg with logits calibrated by the local class counts.

    Client ``k`` minimises ``−log [e^{f_y(x) − τ n_y^{−1/4}} / Σ_i e^{f_i(x) − τ n_i^{−1/4}}]``, ``n_i`` the number of
    samples of class ``i`` in its whole local dataset. (The paper's eq. 6 prints ``i ≠ y`` under the sum, a typo
    for the softmax that eq. 5 and the authors' derivation use.)

    **Classes the client lacks** (``n_i = 0``): ``n_i^{−1/4} = +∞``, so the calibrated logit is ``−∞`` and the class
    drops out of the softmax (probability 0, gradient exactly 0, loss finite since targets are present classes).
    Public implementations disagree (some clamp ``n_i`` to 1 or add a small constant); we take the limit of
    the formula. See :func:`fedlc_margin`.

    Args:
        tau: ``τ >= 0``. Default 1.0: the paper gives no value; 1.0 is the common default of public
            implementations (e.g. FL-bench's ``fedlc``).
        missing_class_floor: ``0`` (default): the limit above; ``> 0``: a missing class counts as this many samples
            (finite margin, e.g. ``1e-8`` as in public code).
        **kwargs: see :class:`FedAvg`.
    """

    def __init__(self, tau: float = 1.0, missing_class_floor: float = 0.0, **kwargs) -> None:
        if tau < 0:
            raise ConfigError(f"tau={tau} must be >= 0")
        super().__init__(**kwargs)
        self.tau = tau
        self.missing_class_floor = missing_class_floor

    @override
    def row_loss(self, logits: torch.Tensor, step: Step) -> torch.Tensor:
        counts = self.client_counts(step)[step.owner]  # [B, N]
        return fedlc_cross_entropy(logits, step.y, counts, self.tau, "none", self.missing_class_floor)


# ----------------------------------------------------------------------------------------------- FedLogit
@register("fedlogit", family="fl")
class FedLogit(FedAvg):
    """FedLogit (SCALA, ICML 2024 conference version, §5.1): FedAvg whose local loss is the client-side logit
    adjustment of eq. (15), ``CE(f(x) + log P_k(y), y)``, ``P_k`` the client's local label distribution.

    A class absent from client ``k`` has ``log P_k = −∞`` and drops out of the softmax (see
    :func:`~lightning_sfl.losses.log_prior`).

    Args:
        missing_class_floor: ``0`` (default): the limit above; ``> 0``: ``log(P_k + floor)`` (finite, as public code).
        **kwargs: see :class:`FedAvg`.
    """

    def __init__(self, missing_class_floor: float = 0.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.missing_class_floor = missing_class_floor

    @override
    def row_loss(self, logits: torch.Tensor, step: Step) -> torch.Tensor:
        prior = row_label_distribution(self.label_dist, step)  # P_k(y) of each row's client
        return self.cross_entropy(logits, step.y, prior)


# ----------------------------------------------------------------------------------------------- FedDecorr
@register("feddecorr", family="fl")
class FedDecorr(FedAvg):
    """FedDecorr (Shi et al., ICLR 2023): FedAvg plus a decorrelation penalty on the features.

    Client ``k`` minimises ``F_k(w) + β·L_FedDecorr(z_k)`` with ``L_FedDecorr = (1/d²)‖K‖_F²``, ``K`` the correlation
    matrix of its minibatch features ``z_k`` ``[B_k, d]`` (input of the classifier, the last layer), each
    dimension standardised over the client's own rows (:func:`feddecorr_loss`). The step's loss adds
    ``β Σ_k L_FedDecorr(z_k)`` (each client's own term; a client with a single row contributes 0). Under DDP each
    process decorrelates its own share of a client's rows, so multi-process runs approximate the term.

    Args:
        decorr_coef: ``β >= 0``. Default 0.1: Shi et al.'s value for CIFAR-10/100.
        **kwargs: see :class:`FedAvg`.
    """

    uses_features: ClassVar[bool] = True

    def __init__(self, decorr_coef: float = 0.1, **kwargs) -> None:
        if decorr_coef < 0:
            raise ConfigError(f"decorr_coef={decorr_coef} must be >= 0")
        super().__init__(**kwargs)
        self.decorr_coef = decorr_coef

    @override
    def client_regulariser(self, step: Step, logits: torch.Tensor, features: torch.Tensor | None) -> torch.Tensor:
        """``β Σ_k L_FedDecorr(z_k)`` over the clients' own rows."""
        terms = [feddecorr_loss(z.flatten(1)) for z in features.split(step.local_sizes.tolist())]
        return self.decorr_coef * torch.stack(terms).sum()


@register("fedcbs", family="fl")
class FedCBS(FedAvg):
    """Fed-CBS (Zhang et al., ICML 2023): FedAvg with class-imbalance-reducing client sampling — each round's
    clients are drawn one by one with probabilities favouring groups of low QCID (``fedcbs`` policy, see
    ``lightning_sfl.loop.selection``)."""

    default_selection = FedCBSSelection
