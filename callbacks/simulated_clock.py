"""``SimulatedClock``: wall-clock time of every round on a simulated wireless cell (SCALA §5.1, GAS).

At the start of a fit the ``K`` clients are placed uniformly in a cell of radius ``R`` around the server and given
compute speeds ``f_k ~ U[flops_low, flops_high]`` FLOP/s, both drawn from one generator seeded by ``seed`` (distances
first, then capacities; see :mod:`lightning_sfl.system.channel`) and fixed for the run. The client half's training
cost ``c`` (FLOPs per sample, forward + backward) is counted once with :mod:`lightning_sfl.system.flops`.

When a round ends (the ``on_round_end`` event, after the FL phase; the round's ledger is then complete), with
``S`` participating clients, client ``k``'s training rows in the round ``n_k`` (``T·B_k`` for synchronous rounds of
``T`` local iterations) and its bytes in the round's ledger::

    W_k      = bandwidth_hz / S                                    (orthogonal, equal shares)
    rate_k   = W_k · log2(1 + p·g(r_k) / (N0·W_k))                 bit/s
    t_k      = n_k·c / f_k + 8·up_bytes_k / rate_k  [+ 8·down_bytes_k / rate_k  if include_downlink]
    t_round  = max_k t_k                                           (synchronous round: the straggler)

With ``barrier="iteration"`` a round of a split method waits at every local iteration instead (MiniBatch-SFL, S²FL
and SplitFed on the clock of GAS's Fig. 3): the server needs every client's activations before it steps, and the next
iteration starts once every client has back-propagated. With ``b_k`` rows per iteration, ``c_fwd``, ``c_bwd`` FLOPs
per sample of the client half's forward and backward pass, ``a`` bytes of one row's activations (plus 8 for its label)
and ``m`` bytes of the client half (:func:`~lightning_sfl.system.flops.cut_costs`, the costs of
:class:`~lightning_sfl.algorithms.AsyncMethod`'s clock)::

    t_round  = Σ_t [ max_k (b_k·c_fwd/f_k + 8·b_k·(a + 8)/rate_k) + max_k b_k·c_bwd/f_k ]  +  max_k 8·m/rate_k

(the sums over the iterations ``t`` each client takes; with ``include_downlink`` the gradients ``8·b_k·a/rate_k``
join the first term and the model's download ``8·m/rate_k`` is charged once). A method with a sliding split (S²FL)
names the cut points it may use (``split_options()``): every client takes the cut that makes its own participation
shortest (if that shortens the round; else everyone starts at the method's ``split_point``), then one client at a time
moves to the cut that shortens the round most, until no move does (a round never gets longer than without sliding).
Rounds without activation traffic (plain FL) keep the straggler formula above.

Schedules that keep their own simulated clock (asynchronous ones) stamp the round's end with its time; the clock
then logs that time instead (``t_round`` = the time since the previous round's end).

``up_bytes_k`` is everything client ``k`` sent this round (activations and labels of all ``T`` iterations and the
client half, or the whole model for plain FL); ``down_bytes_k`` what it received (activation gradients and the
broadcast model). Logged once per round (``on_epoch``), to plot accuracy against simulated time next to
``comm/cumulative_bytes`` of :class:`~lightning_sfl.callbacks.CommunicationBytes`:

* ``clock/round_seconds`` — ``t_round``;
* ``clock/elapsed_seconds`` — the sum since round 1 (checkpointed with the callback's state).

The model ignores the server's computation, the downlink (unless ``include_downlink``; it is then charged at the
uplink rate), propagation delay, protocol overhead, fading, and the waiting within a local iteration for the
server's gradients: compute and transmission of a client simply add up. FLOPs of method-specific extras on the
client (auxiliary heads, regularisers) are not counted, only the client half's forward and backward pass.
"""

from __future__ import annotations

import torch

from lightning_sfl.loop import RoundCallback, RoundEnd
from lightning_sfl.models import build_model
from lightning_sfl.system.channel import bandwidth_per_client, compute_capacities, place_clients, uplink_rates
from lightning_sfl.system.flops import CutCost, cut_costs, training_flops_per_sample

BARRIERS = ("round", "iteration")
LABEL_BYTES = 8  # one int64 label per row


class SimulatedClock(RoundCallback):
    """Simulated duration of each synchronous round (keys ``clock/*``, one value per round).

    Args:
        radius_m: cell radius ``R`` (m); the server is at the centre.
        tx_power_w: client transmit power ``p`` (W).
        bandwidth_hz: total uplink bandwidth ``W`` (Hz), shared equally by the round's participants.
        noise_dbm_per_hz: noise power spectral density ``N0`` (dBm/Hz).
        flops_low: lowest client compute speed (FLOP/s).
        flops_high: highest client compute speed (FLOP/s); GAS uses ``1e10``.
        seed: seeds the placement and the compute speeds (fixed for the run).
        include_downlink: also charge the received bytes, at the uplink rate.
        barrier: ``round`` (each client's compute and traffic add up; the round waits for the slowest) or
            ``iteration`` (split methods wait for every client at every local iteration; see the module docstring).
    """

    def __init__(
        self,
        radius_m: float = 1000.0,
        tx_power_w: float = 0.2,
        bandwidth_hz: float = 10e6,
        noise_dbm_per_hz: float = -174.0,
        flops_low: float = 1e9,
        flops_high: float = 5e9,
        seed: int = 0,
        include_downlink: bool = False,
        barrier: str = "round",
    ) -> None:
        if not radius_m > 0 or not tx_power_w > 0 or not bandwidth_hz > 0:
            raise ValueError("radius_m, tx_power_w and bandwidth_hz must be > 0")
        if not 0 < flops_low <= flops_high:
            raise ValueError(f"need 0 < flops_low <= flops_high, got {flops_low}, {flops_high}")
        self.radius_m, self.tx_power_w, self.bandwidth_hz = radius_m, tx_power_w, bandwidth_hz
        self.noise_dbm_per_hz, self.flops_low, self.flops_high = noise_dbm_per_hz, flops_low, flops_high
        if barrier not in BARRIERS:
            raise ValueError(f"barrier={barrier!r} must be one of: {', '.join(BARRIERS)}")
        self.seed, self.include_downlink, self.barrier = seed, include_downlink, barrier
        self.cuts: dict[str, CutCost] = {}  # barrier="iteration", split methods: the cut points a client may use
        self.nominal_cut: str | None = None  # the method's split_point
        self.last_cuts: list[str] | None = None  # the cut charged to each slot in the last round, for inspection
        self.distances_m: torch.Tensor | None = None  # [K] m
        self.capacities: torch.Tensor | None = None  # [K] FLOP/s
        self.flops_per_sample: float | None = None
        self.elapsed_seconds = 0.0
        self.last_client_seconds: torch.Tensor | None = None  # [S] t_k of the last round, for inspection

    def draw_system(self, num_clients: int) -> None:
        """Place ``num_clients`` clients and draw their compute speeds from a generator seeded by ``seed``."""
        g = torch.Generator().manual_seed(self.seed)
        self.distances_m = place_clients(num_clients, self.radius_m, generator=g)
        self.capacities = compute_capacities(num_clients, self.flops_low, self.flops_high, generator=g)

    def setup(self, trainer, pl_module, stage: str) -> None:
        # Before any checkpoint is restored (load_state_dict then replaces elapsed time and placement).
        if stage != "fit":
            return
        if trainer.datamodule is None:
            raise RuntimeError("SimulatedClock needs a FederatedDataModule (trainer.datamodule is None)")
        self.draw_system(trainer.datamodule.num_clients)
        hp = pl_module.hparams
        self.flops_per_sample = training_flops_per_sample(pl_module.client.net, tuple(hp.input_shape))
        self.elapsed_seconds = 0.0
        self.cuts = {}
        if self.barrier == "iteration" and getattr(pl_module, "split", False):
            options = getattr(pl_module, "split_options", lambda: None)() or [hp.split_point]
            self.cuts = cut_costs(build_model(hp.arch, pl_module.num_classes, tuple(hp.input_shape)), options)
            self.nominal_cut = hp.split_point

    def client_seconds(
        self, clients: torch.Tensor, samples: torch.Tensor, up: torch.Tensor, down: torch.Tensor
    ) -> torch.Tensor:
        """``t_k`` (s, ``[S]`` float64) of ``clients`` (``[S]`` ids) that trained on ``samples`` rows each in the
        round (``T·B_k``) and sent/received the round's ``up``/``down`` bytes (``[S]`` each)."""
        clients = clients.detach().cpu().long()
        w = bandwidth_per_client(self.bandwidth_hz, len(clients))
        rates = uplink_rates(self.distances_m[clients], w, self.tx_power_w, self.noise_dbm_per_hz)
        compute = samples.detach().cpu().double() * self.flops_per_sample / self.capacities[clients]
        bits = 8.0 * up.detach().cpu().double()
        if self.include_downlink:
            bits = bits + 8.0 * down.detach().cpu().double()
        return compute + bits / rates

    def barrier_seconds(self, clients: torch.Tensor, samples: torch.Tensor, iterations: torch.Tensor) -> float:
        """``t_round`` (s) of a split round with a barrier at every local iteration (module docstring): slot ``i``
        holds client ``clients[i]`` (``-1``: unused) that took ``iterations[i]`` local iterations over ``samples[i]``
        rows in all (``[S]`` each)."""
        used = (clients >= 0) & (iterations > 0)
        clients, iters = clients[used].cpu().long(), iterations[used].cpu().long()
        rows = samples[used].cpu().double() / iters  # b_k
        rates = uplink_rates(
            self.distances_m[clients],
            bandwidth_per_client(self.bandwidth_hz, len(clients)),
            self.tx_power_w,
            self.noise_dbm_per_hz,
        )
        caps = self.capacities[clients]
        names = list(self.cuts)
        per_cut = []  # per cut: (forward + upload, backward, model upload) seconds of each client, [S] each
        for cost in self.cuts.values():
            up = 8.0 * rows * (cost.activation_bytes + LABEL_BYTES) / rates
            if self.include_downlink:
                up = up + 8.0 * rows * cost.activation_bytes / rates
            model = 8.0 * cost.model_bytes / rates * (2 if self.include_downlink else 1)
            per_cut.append((rows * cost.forward / caps + up, rows * cost.backward / caps, model))
        arrive, backward, model = (torch.stack(parts) for parts in zip(*per_cut))  # [cuts, S] each
        columns = torch.arange(len(clients))

        def round_seconds(pick: torch.Tensor) -> float:
            a, b = arrive[pick, columns], backward[pick, columns]
            total = sum(float(a[iters > t].max() + b[iters > t].max()) for t in range(int(iters.max())))
            return total + float(model[pick, columns].max())

        if not len(clients):
            return 0.0
        pick = torch.full((len(clients),), names.index(self.nominal_cut), dtype=torch.long)
        best = round_seconds(pick)
        own = (iters.double() * (arrive + backward) + model).argmin(dim=0)  # each client's own fastest participation
        if len(names) > 1 and round_seconds(own) < best:
            pick, best = own, round_seconds(own)
        improved = len(names) > 1
        while improved:  # the sliding split: move one client at a time to the cut that shortens the round most
            improved = False
            for i in range(len(clients)):
                for j in range(len(names)):
                    trial = pick.clone()
                    trial[i] = j
                    seconds = round_seconds(trial)
                    if seconds < best - 1e-12:
                        best, pick, improved = seconds, trial, True
        self.last_cuts = [names[int(j)] for j in pick]
        return best

    def on_round_end(self, trainer, pl_module, event: RoundEnd) -> None:
        if event.time is not None:  # the schedule keeps its own clock
            round_seconds = event.time - self.elapsed_seconds
            self.elapsed_seconds = float(event.time)
        elif self.cuts and event.ledger.totals().get("up/activations", 0) > 0:
            round_seconds = self.barrier_seconds(event.clients, event.samples, event.iterations)
            self.elapsed_seconds += round_seconds
        else:
            ledger = event.ledger
            t = self.client_seconds(event.clients, event.samples, ledger.per_client("up"), ledger.per_client("down"))
            self.last_client_seconds = t
            round_seconds = float(t.max())
            self.elapsed_seconds += round_seconds
        metrics = {"clock/round_seconds": round_seconds, "clock/elapsed_seconds": self.elapsed_seconds}
        pl_module.log_dict(metrics, on_step=False, on_epoch=True, batch_size=1)

    def state_dict(self) -> dict:
        return {
            "seed": self.seed,
            "elapsed_seconds": self.elapsed_seconds,
            "distances_m": None if self.distances_m is None else self.distances_m.clone(),
            "capacities": None if self.capacities is None else self.capacities.clone(),
        }

    def load_state_dict(self, state_dict: dict) -> None:
        self.elapsed_seconds = float(state_dict["elapsed_seconds"])
        if state_dict.get("distances_m") is not None:  # the placement of the run being resumed
            self.seed = int(state_dict["seed"])
            self.distances_m = torch.as_tensor(state_dict["distances_m"], dtype=torch.float64)
            self.capacities = torch.as_tensor(state_dict["capacities"], dtype=torch.float64)
