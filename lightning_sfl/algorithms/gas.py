"""GAS: asynchronous split federated learning with generative activations (Yang and Liu, "GAS: Generative
Activation-Aided Asynchronous Split Federated Learning", Alg. 1), and its ablation without generation, ``AsyncSFL``.

``C`` clients train at once on the simulated clock of :class:`~lightning_sfl.loop.AsyncEvents`. On every activation
arrival (a batched ``"arrivals"`` step of distinct clients) the server

1. stores ``(A_k, Y_k)`` in the activation buffer (eq. 4) and, in GAS, merges them into the per-label Gaussians with
   the progress weight ``s(n) = n``, ``n = t·E + e`` (eqs. 11-12);
2. when the buffer holds ``Q_s`` arrivals, takes one SGD step on ``w_s`` with plain cross-entropy over the buffer
   and, in GAS, activations generated per label from the Gaussians (eq. 5; ``max(B − n_y, 0)`` of label ``y``, once
   every label has statistics), and clears the buffer;
3. sends ``G_k = ∂l_k/∂A_k`` back, ``l_k`` the mean over the client's rows of ``CE(s + log P_k)`` (eq. 6); the
   client steps its half (eq. 8). Alg. 1 steps the server (line 10) before computing ``G_k`` (line 12): the
   gradient of the arrival that fills the buffer comes from the updated server (``gradient_order=
   "after_server_step"``, default: the schedule gives that arrival a step of its own, and the server updates when its
   activations arrive, before its split iteration takes ``G_k`` with the method's ``client_loss``); the authors' code
   uses the server before the step (``"before_server_step"``: the server updates after the iteration).

Every upload enters the model buffer (eq. 9); the ``Q_c``-th replaces the global client half by the ``|D_k|``-weighted
mean of the buffered halves (eq. 10; the code's uniform mean: ``aggregation="uniform"``): one global iteration, one
round (epoch). The client drawn to replace a finished one downloads the global half as it is then.

Arrivals with no server update between them see the same ``w_s``, and a slot moves only through its own events, so the
schedule runs them in waves of distinct clients (:func:`~lightning_sfl.loop.async_events.arrival_waves`), and one
batched step equals processing its arrivals one at a time, on either client bank (``tests/integration/test_gas.py``
checks it in float64; with ``covariance="lowrank"`` the truncated factor depends on how arrivals are grouped, so there
it is close, not equal). ``client_bank="stacked"`` runs a step's client halves as one stacked computation.

AsyncSFL is a split method (:class:`~lightning_sfl.algorithms.split_method.SplitMethod`: its hooks and defences) with
the asynchronous clients of :mod:`~lightning_sfl.algorithms.async_base`: the clock, the persistent slots and the model
buffer (times from the run's system model; GAS's ``f_k ~ U[1e9, 1e10]``: ``--clock.flops_high 1e10``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from typing_extensions import override

from lightning_sfl import trainer_view
from lightning_sfl.algorithms import async_base
from lightning_sfl.algorithms.async_base import choice
from lightning_sfl.algorithms.registry import register
from lightning_sfl.algorithms.split_method import SplitMethod
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import AsyncEvents
from lightning_sfl.loop.async_events import ArrivalStep, UploadStep
from lightning_sfl.loop.sampling import round_generator
from lightning_sfl.losses import row_label_distribution
from lightning_sfl.models.label_gaussians import COVARIANCES, LabelGaussians, generation_counts
from lightning_sfl.runtime import federated
from lightning_sfl.runtime.client_bank import SequentialBank
from lightning_sfl.runtime.iteration import split_iteration
from lightning_sfl.runtime.stacked_bank import AUTO_STACKED_MIN_SLOTS_ASYNC_CPU, StackedBank, make_bank

__all__ = ["GAS", "AsyncSFL"]

GRADIENT_ORDERS = ("after_server_step", "before_server_step")
_GENERATION_STREAM = 11
#: ``rank`` of ``covariance="lowrank"`` when not given.
DEFAULT_RANK = 16


@register("async_sfl", family="async")
class AsyncSFL(SplitMethod):
    """Asynchronous SFL without generation (GAS's ablation): see the module docstring.

    Args:
        gradient_order: ``after_server_step`` (Alg. 1) or ``before_server_step`` (the authors' code): which server
            computes the gradient of the arrival that fills the buffer.
        missing_class_floor: ``0``: ``log P_k = −∞`` for absent classes in ``l_k`` (the equation); the GAS code adds
            ``1e-12``.
        concurrency: ``C``, clients in flight.
        flush_every: ``Q_s``, activation arrivals per server update.
        aggregate_every: ``Q_c``, uploads per aggregation (one round).
        client_batch_size: ``B``, rows per client minibatch (``None``: the data module's ``batch_size``).
        aggregation: ``data_size`` (``|D_k|`` weights, eq. 10) or ``uniform`` (the GAS code).
        full_bandwidth: every client gets the whole bandwidth (the GAS code) instead of ``W / C``.
        batch_arrivals: process the arrivals between two server updates in batched steps, one for every slot's
            next arrival (exact); ``False``: one step per arrival.
        **kwargs: a split method's (``defences``: none by default; the inversion regulariser needs synchronous rounds)
            and the base's (``local_iters`` is ``E``; ``client_selection`` is refused: the clock draws the next client).
    """

    averages_uploaded_models = False  # its uploads are buffered and aggregated as they arrive

    supports_tail = False  # asynchronous events: no U-shaped step

    step_handlers = {"arrivals": "arrivals", "upload": "upload"}

    def __init__(
        self,
        gradient_order: str = "after_server_step",
        missing_class_floor: float = 0.0,
        concurrency: int = 10,
        flush_every: int = 10,
        aggregate_every: int = 10,
        client_batch_size: int | None = None,
        aggregation: str = "data_size",
        full_bandwidth: bool = False,
        batch_arrivals: bool = True,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        settings = (concurrency, flush_every, aggregate_every, client_batch_size, aggregation, full_bandwidth)
        async_base.keep_settings(self, *settings, batch_arrivals)
        self.gradient_order = choice("gradient_order", gradient_order, GRADIENT_ORDERS)
        self.missing_class_floor = missing_class_floor
        self.add_state("act_buffer", lambda: torch.zeros(self._capacity, *self._act_shape))
        self.add_state("act_labels", lambda: torch.zeros(self._capacity, dtype=torch.long))
        self.add_state("act_count", lambda: torch.zeros((), dtype=torch.long))
        self.add_state("server_updates", lambda: torch.zeros((), dtype=torch.long))
        self.round_means = async_base.RoundMeans()  # the round's logged means, logged at its end

    @override
    def setup(self, stage: str) -> None:
        if stage == "fit":  # the buffer holds at most Q_s arrivals of at most max_k b_k rows of [*act]
            self._act_shape = federated.output_shape(self.example_input_array, self.client)
            stats = self.client_stats
            rows = max(self.schedule.rows_per_batch(k, stats) for k in range(stats.num_clients))
            self._capacity = self.schedule.flush_every * rows
        super().setup(stage)

    # ------------------------------------------------------------------ activation arrivals (Alg. 1, lines 5-13)
    @override
    def client_prior(self, step: ArrivalStep) -> torch.Tensor:
        """``P_k`` of each row's client, ``[B, N]``: the base's client loss is then eq. (6)."""
        return row_label_distribution(self.label_dist, step)

    @override
    def make_bank(self, template: torch.nn.Module, num_slots: int) -> SequentialBank | StackedBank:
        """A bank of the configured kind; ``auto`` on a CPU stacks the arrivals' slots from
        :data:`~lightning_sfl.runtime.stacked_bank.AUTO_STACKED_MIN_SLOTS_ASYNC_CPU` slots on (arrivals one at a
        time run the sequential bank: :func:`~lightning_sfl.runtime.federated.checked_schedule`)."""
        device = trainer_view.device(self.trainer)
        return make_bank(
            template, num_slots, self.client_bank, device=device, min_slots_cpu=AUTO_STACKED_MIN_SLOTS_ASYNC_CPU
        )

    @classmethod
    @override
    def unused_options(cls) -> dict[str, str]:
        return {**super().unused_options(), **async_base.UNUSED_OPTIONS}

    @override
    def configure_schedule(self) -> AsyncEvents:
        """The asynchronous clients' events, with the arrival that fills the buffer a step of its own when its gradient
        comes from the updated server (``after_server_step``)."""
        return async_base.async_events(self, flush_alone=self.gradient_order == "after_server_step")

    @override
    def default_system(self):
        return async_base.default_system()

    @override
    def one_process_only(self) -> str | None:
        """The asynchronous clock and its slots live in one process."""
        return type(self).__name__

    # ------------------------------------------------------------------ round edges, uploads, aggregation
    @override
    def start_round(self, step) -> None:
        self.round_means.clear()
        async_base.start_round(self, step)

    def upload(self, step: UploadStep) -> None:
        """A client's upload (eq. 9, :func:`~lightning_sfl.algorithms.async_base.upload`)."""
        async_base.upload(self, step, self.round_means)

    @override
    def aggregate(self, step: UploadStep) -> None:
        """Eq. (10) (:func:`~lightning_sfl.algorithms.async_base.aggregate`); the round's means are logged
        (``train/client_loss``, ``train/server_loss``, ``train/staleness``, GAS's ``train/generated``:
        :class:`~lightning_sfl.algorithms.async_base.RoundMeans`)."""
        async_base.aggregate(self, step)
        self.round_means.log_to(self)

    def arrivals(self, step: ArrivalStep) -> None:
        """Handler of ``"arrivals"`` steps (Alg. 1, lines 5-13): one split iteration of the arriving clients. Their
        activations enter the buffer as they arrive (eq. 4); the arrival that fills it (``step.flush``) makes the
        server update (eq. 5, :meth:`flush`): before its ``G_k`` is taken with ``after_server_step`` (its step holds
        it alone), after the iteration with ``before_server_step``."""
        update_first = step.flush and self.gradient_order == "after_server_step"

        def arrived(acts: torch.Tensor) -> None:
            self.buffer_arrivals(acts, step)
            if update_first:
                self.flush()

        _, client_loss = split_iteration(self, step, on_arrival=arrived)
        if step.flush and not update_first:
            self.flush()
        self.round_means.add("train/client_loss", client_loss.detach(), len(step.clients))  # a mean per client

    @override
    def server_loss(self, logits: torch.Tensor, step: ArrivalStep) -> None:
        """No server loss at an arrival: the server trains on its activation buffer when it flushes."""
        return None

    def flush(self) -> None:
        """The server's update on its full activation buffer (eq. 5; :meth:`server_update`), logged as
        ``train/server_loss``; the clients' gradients of the iteration, if any were taken, are cleared first (their
        step is done)."""
        opt = self.optimizers()
        opt.zero_grad()
        self.round_means.add("train/server_loss", self.server_update(opt))

    def buffer_arrivals(self, acts: torch.Tensor, step: ArrivalStep) -> None:
        """Eq. (4): append the arrivals' activations ``[B, *act]`` and labels to the activation buffer."""
        n, start = len(acts), int(self.act_count)
        self.act_buffer[start : start + n] = acts
        self.act_labels[start : start + n] = step.y
        self.act_count.add_(n)  # in place (no module __setattr__)

    def server_batch(self, acts: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What the server trains on at a flush (eq. 5): the buffered activations; GAS adds generated ones."""
        return acts, labels

    def server_update(self, opt) -> torch.Tensor:
        """One SGD step on ``w_s`` with cross-entropy over :meth:`server_batch`; clears the buffer."""
        n = int(self.act_count)
        acts, labels = self.server_batch(self.act_buffer[:n], self.act_labels[:n])
        loss = F.cross_entropy(self.server(acts), labels)
        self.manual_backward(loss)
        self.take_step(opt, count_step=False)  # one global_step per training step: the slots' step counts
        opt.zero_grad()
        self.act_count.zero_()
        self.server_updates.add_(1)
        return loss.detach()


@register("gas", family="async")
class GAS(AsyncSFL):
    """GAS (Alg. 1): :class:`AsyncSFL` whose server also trains on activations generated from per-label Gaussians
    of the activations seen so far (eqs. 11-12; generation rule of the authors' code).

    Args:
        covariance: ``full`` (the paper), ``diag`` or ``lowrank`` (rank ``rank``): the form of ``Σ_y``.
        rank: rank of ``lowrank`` (another covariance refuses a rank other than the default).
        nonnegative: clamp generated activations at 0 (real ones follow a ReLU; the code does not clamp).
        ridge: added to ``Σ_y``'s diagonal when sampling (the code adds ``1e-5`` at every merge). With 0, ``Σ_y``
            is singular at least until label ``y`` has seen more activations than their dimension, and sampling goes
            through an eigen-decomposition instead of Cholesky, several times slower for a wide cut (AlexNet's
            3,136-dimensional one: the study of GAS's Table 1 on the results pages gives the times).
        **kwargs: :class:`AsyncSFL`'s.
    """

    def __init__(
        self,
        covariance: str = "full",
        rank: int = DEFAULT_RANK,
        nonnegative: bool = False,
        ridge: float = 0.0,
        **kwargs,
    ) -> None:
        choice("covariance", covariance, COVARIANCES)
        if covariance != "lowrank" and rank != DEFAULT_RANK:
            raise ConfigError(f"rank={rank!r} is the rank of covariance='lowrank' (got covariance={covariance!r})")
        super().__init__(**kwargs)
        self.covariance, self.rank, self.nonnegative, self.ridge = covariance, rank, nonnegative, ridge
        LabelGaussians(self.num_classes, 1, covariance, rank, ridge)  # checks rank and ridge now
        dim = lambda: math.prod(self._act_shape)  # noqa: E731
        n = self.num_classes
        self.add_state("gauss_weight", lambda: torch.zeros(n, dtype=torch.float64))
        self.add_state("gauss_mean", lambda: torch.zeros(n, dim(), dtype=torch.float64))
        full = covariance == "full"
        self.add_state(
            "gauss_second", lambda: torch.zeros((n, dim(), dim()) if full else (n, dim()), dtype=torch.float64)
        )
        if covariance == "lowrank":
            self.add_state("gauss_factor", lambda: torch.zeros(n, dim(), rank, dtype=torch.float64))

    @property
    def gaussians(self) -> LabelGaussians:
        """The per-label statistics, as views of the checkpointed states."""
        g = LabelGaussians.__new__(LabelGaussians)
        g.num_classes, g.dim, g.covariance, g.rank = (
            self.num_classes,
            self.gauss_mean.shape[1],
            self.covariance,
            self.rank,
        )
        g.ridge, g.nonnegative = float(self.ridge), self.nonnegative
        g.weight, g.mean, g.second = self.gauss_weight, self.gauss_mean, self.gauss_second
        g.factor = getattr(self, "gauss_factor", None)
        return g

    @override
    def buffer_arrivals(self, acts: torch.Tensor, step: ArrivalStep) -> None:
        super().buffer_arrivals(acts, step)
        weights = step.progress.to(acts.device)[step.owner].double()  # s(n) = n of each row's arrival
        self.gaussians.update(acts, step.y, weights)

    @override
    def server_batch(self, acts: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gaussians = self.gaussians
        if not gaussians.ready():
            return acts, labels
        counts = generation_counts(labels, self.num_classes, self.schedule.batch_size or self.client_stats.batch_size)
        g = round_generator(self.client_stats.seed, int(self.server_updates), stream=_GENERATION_STREAM)
        fake, fake_labels = gaussians.sample(counts.cpu(), generator=g)
        self.round_means.add("train/generated", float(len(fake)))
        fake = fake.to(acts.dtype).reshape(len(fake), *acts.shape[1:])
        return torch.cat([acts, fake]), torch.cat([labels, fake_labels])
