"""GAS: asynchronous split federated learning with generative activations (``papers/gas.txt``, Alg. 1), and its
ablation without generation, ``AsyncSFL``.

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
   "after_server_step"``, default); the authors' code uses the server before the step (``"before_server_step"``).

Every upload enters the model buffer (eq. 9); the ``Q_c``-th replaces the global client half by the ``|D_k|``-weighted
mean of the buffered halves (eq. 10; the code's uniform mean: ``aggregation="uniform"``): one global iteration, one
round (epoch). The client drawn to replace a finished one downloads the global half as it is then.

Arrivals of distinct clients with no server update between them see the same ``w_s`` and touch disjoint slots, so
one batched step equals processing them one at a time (``tests/test_gas.py`` checks it; with ``covariance="lowrank"``
the truncated factor depends on how arrivals are grouped, so there it is close, not equal).

The simulated times come from the run's system model (:class:`~lightning_sfl.callbacks.SimulatedClock`: placement,
compute speeds, bandwidth; GAS's ``f_k ~ U[1e9, 1e10]``: ``--clock.flops_high 1e10``): client ``k`` with ``b_k`` rows
spends ``b_k·c_fwd / f_k`` on a forward pass, ``b_k·c_bwd / f_k`` on a backward pass, ``8·b_k·a / r_k`` uploading
activations and labels and ``8·m / r_k`` uploading its half, with ``r_k`` at ``W / C`` of the bandwidth (the code
gives every client all of ``W``: ``full_bandwidth=True``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from lightning_sfl.algorithms.base import SplitFedAlgorithm, checked_floor
from lightning_sfl.algorithms.client_bank import ClientBank
from lightning_sfl.algorithms.label_gaussians import COVARIANCES, LabelGaussians, generation_counts
from lightning_sfl.algorithms.losses import logit_adjusted_cross_entropy, per_client_mean
from lightning_sfl.data.sampling import round_generator
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import AsyncEvents, ClientStats, ClientTimes, Schedule
from lightning_sfl.loop.async_events import ArrivalStep, UploadStep
from lightning_sfl.system.channel import uplink_rates
from lightning_sfl.system.comm import module_bytes
from lightning_sfl.system.flops import forward_flops_per_sample, training_flops_per_sample

__all__ = ["GAS", "AsyncSFL"]

GRADIENT_ORDERS = ("after_server_step", "before_server_step")
AGGREGATIONS = ("data_size", "uniform")
_GENERATION_STREAM = 11


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} must be one of: {', '.join(allowed)}")
    return value


class AsyncSFL(SplitFedAlgorithm):
    """Asynchronous SFL without generation (GAS's ablation): see the module docstring.

    Args:
        concurrency: ``C``, clients in flight.
        flush_every: ``Q_s``, activation arrivals per server update.
        aggregate_every: ``Q_c``, uploads per aggregation (one round).
        client_batch_size: ``B``, rows per client minibatch (``None``: the data module's ``batch_size``).
        gradient_order: ``after_server_step`` (Alg. 1) or ``before_server_step`` (the authors' code): which server
            computes the gradient of the arrival that fills the buffer.
        aggregation: ``data_size`` (eq. 10) or ``uniform`` (the authors' code).
        missing_class_floor: ``0``: ``log P_k = −∞`` for absent classes in ``l_k`` (the equation); the GAS code adds
            ``1e-12``.
        full_bandwidth: every client gets the whole bandwidth (the code) instead of ``W / C``.
        batch_arrivals: process the arrivals of distinct clients between two server updates as one batched step
            (exact); ``False``: one step per arrival.
        **kwargs: the base's (``local_iters`` is ``E``, local iterations per participation).
    """

    step_handlers = {"arrivals": "arrivals", "upload": "upload"}

    def __init__(
        self,
        concurrency: int = 10,
        flush_every: int = 10,
        aggregate_every: int = 10,
        client_batch_size: int | None = None,
        gradient_order: str = "after_server_step",
        aggregation: str = "data_size",
        missing_class_floor: float = 0.0,
        full_bandwidth: bool = False,
        batch_arrivals: bool = True,
        **kwargs,
    ) -> None:
        self._async = {
            "concurrency": concurrency,
            "flush_every": flush_every,
            "aggregate_every": aggregate_every,
            "batch_size": client_batch_size,
            "batch_arrivals": batch_arrivals,
        }
        self.gradient_order = _choice("gradient_order", gradient_order, GRADIENT_ORDERS)
        self.aggregation = _choice("aggregation", aggregation, AGGREGATIONS)
        super().__init__(**kwargs)
        self.missing_class_floor = checked_floor(missing_class_floor)
        self.full_bandwidth = bool(full_bandwidth)
        self.uploads: list[tuple[dict[str, torch.Tensor], int]] = []  # the model buffer; empty at every round end
        self.add_state("act_buffer", lambda: torch.zeros(self._capacity, *self._act_shape))
        self.add_state("act_labels", lambda: torch.zeros(self._capacity, dtype=torch.long))
        self.add_state("act_count", lambda: torch.zeros((), dtype=torch.long))
        self.add_state("server_updates", lambda: torch.zeros((), dtype=torch.long))

    def configure_schedule(self) -> Schedule:
        return AsyncEvents(local_iters=self.local_iters, **self._async)

    # ------------------------------------------------------------------ setup: buffer shape and simulated times
    def setup(self, stage: str) -> None:
        if stage == "fit":
            if self.world_size > 1:
                raise ConfigError(f"{type(self).__name__} runs on one process (got {self.world_size})")
            stats: ClientStats = self.trainer.datamodule.client_stats
            rows = [self.schedule.rows_per_batch(k, stats) for k in range(stats.num_clients)]
            self._act_shape = self.activation_shape()
            self._capacity = self.schedule.flush_every * max(rows)
            if self.schedule.times is None:
                self.schedule.bind_times(self.client_times(stats, torch.tensor(rows)))
        super().setup(stage)

    @torch.no_grad()
    def activation_shape(self) -> tuple[int, ...]:
        """Shape of one sample's activations at the cut (the global half in eval mode: no statistics move)."""
        param = next(self.client.parameters())
        was_training = self.client.training
        self.client.eval()
        out = self.client(self.example_input_array.to(param.device, param.dtype))
        self.client.train(was_training)
        return tuple(out.shape[1:])

    def client_times(self, stats: ClientStats, rows: torch.Tensor) -> ClientTimes:
        """Per-client seconds of a forward pass, a backward pass, an activation upload and a model upload, from the
        run's system model (see the module docstring)."""
        from lightning_sfl.callbacks import SimulatedClock

        clock = next((cb for cb in self.trainer.callbacks if isinstance(cb, SimulatedClock)), None)
        if clock is None:  # used without the CLI: the GAS paper's system (f_k ~ U[1e9, 1e10])
            clock = SimulatedClock(flops_high=1e10, seed=stats.seed)
        if clock.distances_m is None or len(clock.distances_m) != stats.num_clients:
            clock.draw_system(stats.num_clients)
        shape = tuple(self.hparams.input_shape)
        forward = forward_flops_per_sample(self.client.net, shape)
        backward = training_flops_per_sample(self.client.net, shape) - forward
        bandwidth = clock.bandwidth_hz if self.full_bandwidth else clock.bandwidth_hz / self.schedule.concurrency
        rate = uplink_rates(clock.distances_m, bandwidth, clock.tx_power_w, clock.noise_dbm_per_hz)
        value_bytes = next(self.client.parameters()).element_size()
        act_bits = 8.0 * (math.prod(self._act_shape) * value_bytes + 8)  # per row: activations and an int64 label
        rows = rows.double()
        return ClientTimes.split(
            forward=rows * forward / clock.capacities,
            backward=rows * backward / clock.capacities,
            activation_upload=rows * act_bits / rate,
            model_upload=8.0 * module_bytes(self.client.net) / rate,
        )

    # ------------------------------------------------------------------ round edges
    def start_round(self, step) -> None:
        if step.round == 0:  # the first C clients download the initial half; later clients when they start
            self.reset_slots()

    # ------------------------------------------------------------------ activation arrivals (Alg. 1, lines 4-12)
    def arrival_priors(self, step: ArrivalStep) -> torch.Tensor:
        """``P_k`` of each row's client, ``[B, N]`` (eq. 6)."""
        return self.label_dist[step.clients][step.owner]

    def arrivals(self, step: ArrivalStep) -> None:
        opt = self.optimizers()
        opt.zero_grad()
        acts = self.client_forward(step)
        self.check_finite("activations", acts, step)
        self.ledger.add_rows("up", "activations", acts, step.sizes, step.slots)
        self.ledger.add_rows("up", "labels", step.y, step.sizes, step.slots)
        a = acts.detach().requires_grad_(True)
        logits = self.server(a)
        self.check_finite("logits", logits, step)
        priors = self.arrival_priors(step)
        rows = logit_adjusted_cross_entropy(logits, step.y, priors, "none", self.missing_class_floor)
        client_loss = per_client_mean(rows, step.owner, step.sizes)
        (grad_a,) = torch.autograd.grad(client_loss, a)
        self.buffer_arrivals(a.detach(), step)
        if step.flush:
            server_loss = self.server_update(opt)
            self.log("train/server_loss", server_loss, on_step=False, on_epoch=True, batch_size=1)
            if self.gradient_order == "after_server_step":  # the flushing (last) arrival's G_k from the new w_s
                last = step.owner == len(step.clients) - 1
                a_last = a.detach()[last].requires_grad_(True)
                loss = logit_adjusted_cross_entropy(
                    self.server(a_last), step.y[last], priors[last], "mean", self.missing_class_floor
                )
                grad_a = grad_a.clone()
                (grad_a[last],) = torch.autograd.grad(loss, a_last)
        self.ledger.add_rows("down", "gradients", grad_a, step.sizes, step.slots)
        self.manual_backward(acts, grad_a)
        self.take_step(opt)  # the arriving clients' slots only: nothing else has a gradient
        mean_loss = client_loss.detach() / len(step.clients)
        self.log("train/client_loss", mean_loss, on_step=False, on_epoch=True, batch_size=len(step.clients))

    def buffer_arrivals(self, acts: torch.Tensor, step: ArrivalStep) -> None:
        """Eq. (4): append the arrivals' activations ``[B, *act]`` and labels to the activation buffer."""
        n, start = len(acts), int(self.act_count)
        self.act_buffer[start : start + n] = acts
        self.act_labels[start : start + n] = step.y
        self.act_count += n

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
        self.server_updates += 1
        return loss.detach()

    # ------------------------------------------------------------------ uploads and aggregation (eqs. 9-10)
    def upload(self, step: UploadStep) -> None:
        slot = int(step.slots[0])
        self.uploads.append((self.bank.snapshot(slot), int(step.clients[0])))
        self.ledger.add("up", self.client_kind, module_bytes(self.client.net), step.slots)
        self.log("train/staleness", float(step.round - step.version), on_step=False, on_epoch=True, batch_size=1)
        if not step.aggregate:  # the next client starts from the global half as it is now
            self.reset_slots(step.slots)

    def aggregate(self, step: UploadStep) -> None:
        states, clients = zip(*self.uploads)
        sizes = self.client_sizes[list(clients)].double()
        weights = sizes if self.aggregation == "data_size" else torch.ones_like(sizes)
        ClientBank.aggregate_snapshots(self.client.net, states, weights)
        self.uploads.clear()
        self.reset_slots(step.slots)


class GAS(AsyncSFL):
    """GAS (Alg. 1): :class:`AsyncSFL` whose server also trains on activations generated from per-label Gaussians
    of the activations seen so far (eqs. 11-12; generation rule of the authors' code).

    Args:
        covariance: ``full`` (the paper), ``diag`` or ``lowrank`` (rank ``rank``): the form of ``Σ_y``.
        rank: rank of ``lowrank``.
        nonnegative: clamp generated activations at 0 (real ones follow a ReLU; the code does not clamp).
        ridge: added to ``Σ_y``'s diagonal when sampling (the code adds ``1e-5`` at every merge).
        **kwargs: :class:`AsyncSFL`'s.
    """

    def __init__(
        self,
        covariance: str = "full",
        rank: int = 16,
        nonnegative: bool = False,
        ridge: float = 0.0,
        **kwargs,
    ) -> None:
        _choice("covariance", covariance, COVARIANCES)
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

    def buffer_arrivals(self, acts: torch.Tensor, step: ArrivalStep) -> None:
        super().buffer_arrivals(acts, step)
        weights = step.progress.to(acts.device)[step.owner].double()  # s(n) = n of each row's arrival
        self.gaussians.update(acts, step.y, weights)

    def server_batch(self, acts: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gaussians = self.gaussians
        if not gaussians.ready():
            return acts, labels
        counts = generation_counts(labels, self.num_classes, self.schedule.batch_size or self.client_stats.batch_size)
        g = round_generator(self.client_stats.seed, int(self.server_updates), stream=_GENERATION_STREAM)
        fake, fake_labels = gaussians.sample(counts.cpu(), generator=g)
        self.log("train/generated", float(len(fake)), on_step=False, on_epoch=True, batch_size=1)
        fake = fake.to(acts.dtype).reshape(len(fake), *acts.shape[1:])
        return torch.cat([acts, fake]), torch.cat([labels, fake_labels])
