"""``WirelessCell``: the system model of SCALA (journal §5.1) and GAS: clients in one wireless cell, each with its own
compute speed (formulas and constants in :mod:`lightning_sfl.system.channel`).

When bound to a federation the ``K`` clients are placed uniformly in a cell of radius ``R`` around the server and
given compute speeds ``f_k ~ U[flops_low, flops_high]`` FLOP/s, both from one generator seeded by ``seed`` (distances
first, then capacities) and fixed for the run.

**Synchronous rounds** (:meth:`WirelessCell.round_seconds`), with ``S`` participating clients, client ``k``'s training
rows in the round ``n_k`` (``T·B_k`` for ``T`` local iterations), ``c`` the client model's training FLOPs per sample
and its bytes in the round's ledger::

    W_k      = bandwidth_hz / S                                    (orthogonal, equal shares)
    rate_k   = W_k · log2(1 + p·g(r_k) / (N0·W_k))                 bit/s
    t_k      = n_k·c / f_k + 8·up_bytes_k / rate_k  [+ 8·down_bytes_k / rate_k  if include_downlink]
    t_round  = max_k t_k                                           (the straggler)

With ``barrier="iteration"`` a round of a split method waits at every local iteration instead (MiniBatch-SFL, S²FL
and SplitFed on the clock of GAS's Fig. 3): the server needs every client's activations before it steps, and the next
iteration starts once every client has back-propagated. With ``b_k`` rows per iteration, ``c_fwd``, ``c_bwd`` FLOPs
per sample of the client half's forward and backward pass, ``a`` bytes of one row's activations (plus 8 for its label)
and ``m`` bytes of the client half (:func:`~lightning_sfl.system.flops.cut_costs`)::

    t_round  = Σ_t [ max_k (b_k·c_fwd/f_k + 8·b_k·(a + 8)/rate_k) + max_k b_k·c_bwd/f_k ]  +  max_k 8·m/rate_k

(the sums over the iterations ``t`` each client takes; with ``include_downlink`` the gradients ``8·b_k·a/rate_k``
join the first term and the model's download ``8·m/rate_k`` is charged once). A method with a sliding split (S²FL)
offers several cut points (``ClientCosts.cut_options``): every client takes the cut that makes its own participation
shortest (if that shortens the round; else everyone starts at the method's ``split_point``), then one client at a time
moves to the cut that shortens the round most, until no move does (a round never gets longer than without sliding).
Rounds without activation traffic (plain FL) keep the straggler formula.

**Asynchronous clients** (:meth:`WirelessCell.client_times`, GAS's ``f_k ~ U[1e9, 1e10]`` is ``flops_high=1e10``):
each client's rate ``r_k`` at ``W / C`` of the bandwidth (the GAS code gives every client all of ``W``:
``full_bandwidth``). With ``b_k`` rows per minibatch, ``c_fwd``/``c_bwd`` FLOPs per sample of a forward/backward pass of
the client model, ``a`` bytes of one row's activations and label and ``m`` bytes of the client model:

* split methods: forward ``b_k·c_fwd / f_k``, activation upload ``8·b_k·a / r_k``, backward ``b_k·c_bwd / f_k``,
  model upload ``8·m / r_k``;
* FL methods: a local iteration ``b_k·(c_fwd + c_bwd) / f_k``, model upload ``8·m / r_k``.

The model ignores the server's computation, the downlink (unless ``include_downlink``; it is then charged at the
uplink rate), propagation delay, protocol overhead, fading, and the waiting within a local iteration for the
server's gradients: compute and transmission of a client simply add up. FLOPs of method-specific extras on the
client (auxiliary heads, regularisers) are not counted, only the client model's forward and backward pass.
"""

from __future__ import annotations

import torch
from typing_extensions import override

from lightning_sfl.errors import ConfigError
from lightning_sfl.system.channel import bandwidth_per_client, compute_capacities, place_clients, uplink_rates
from lightning_sfl.system.timing import (
    LABEL_BYTES,
    ClientCosts,
    ClientTimes,
    RoundTraffic,
    SystemModel,
    checked_redraw,
    draws_digest,
)  # fmt: skip

__all__ = ["BARRIERS", "WirelessCell"]

BARRIERS = ("round", "iteration")


class WirelessCell(SystemModel):
    """Clients in one wireless cell (see the module docstring).

    Args:
        radius_m: cell radius ``R`` (m); the server is at the centre.
        tx_power_w: client transmit power ``p`` (W).
        bandwidth_hz: total uplink bandwidth ``W`` (Hz), shared equally by the clients transmitting at once.
        noise_dbm_per_hz: noise power spectral density ``N0`` (dBm/Hz).
        flops_low: lowest client compute speed (FLOP/s).
        flops_high: highest client compute speed (FLOP/s); GAS uses ``1e10``.
        seed: seeds the placement and the compute speeds (fixed for the run); ``None``: the data seed.
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
        seed: int | None = 0,
        include_downlink: bool = False,
        barrier: str = "round",
    ) -> None:
        if not radius_m > 0 or not tx_power_w > 0 or not bandwidth_hz > 0:
            raise ConfigError(
                f"radius_m={radius_m}, tx_power_w={tx_power_w} and bandwidth_hz={bandwidth_hz} must be > 0"
            )
        if not 0 < flops_low <= flops_high:
            raise ConfigError(f"need 0 < flops_low <= flops_high, got flops_low={flops_low}, flops_high={flops_high}")
        if barrier not in BARRIERS:
            raise ConfigError(f"barrier={barrier!r} must be one of: {', '.join(BARRIERS)}")
        self.radius_m, self.tx_power_w, self.bandwidth_hz = radius_m, tx_power_w, bandwidth_hz
        self.noise_dbm_per_hz, self.flops_low, self.flops_high = noise_dbm_per_hz, flops_low, flops_high
        self.seed, self.include_downlink, self.barrier = seed, include_downlink, barrier
        self.costs: ClientCosts | None = None
        self.distances_m: torch.Tensor | None = None  # [K] m
        self.capacities: torch.Tensor | None = None  # [K] FLOP/s
        self.last_cuts: list[str] | None = None  # the cut charged to each slot in the last round, for inspection
        self.last_client_seconds: torch.Tensor | None = None  # [S] t_k of the last straggler round, for inspection

    # ------------------------------------------------------------------ the run's clients
    @override
    def bind(self, num_clients: int, seed: int, costs: ClientCosts) -> None:
        self.seed = seed if self.seed is None else self.seed
        if self.distances_m is None or len(self.distances_m) != num_clients:
            self.draw_system(num_clients)
        self.costs = costs
        _ = costs.training_flops  # measured now, in the dtype the model is built in
        if self.barrier == "iteration" and costs.sends_activations:
            _ = costs.cuts

    @override
    def slides_cut(self) -> bool:
        """With a barrier at every local iteration (``barrier="iteration"``), S²FL's sliding split."""
        return self.barrier == "iteration"

    def draw_system(self, num_clients: int) -> None:
        """Place ``num_clients`` clients and draw their compute speeds from a generator seeded by ``seed``."""
        g = torch.Generator().manual_seed(self.seed)
        self.distances_m = place_clients(num_clients, self.radius_m, generator=g)
        self.capacities = compute_capacities(num_clients, self.flops_low, self.flops_high, generator=g)

    def rates(self, clients: torch.Tensor, bandwidth_hz: float) -> torch.Tensor:
        """Uplink rates (bit/s) of ``clients`` ``[S]`` at ``bandwidth_hz`` each."""
        return uplink_rates(self.distances_m[clients], bandwidth_hz, self.tx_power_w, self.noise_dbm_per_hz)

    # ------------------------------------------------------------------ synchronous rounds
    @override
    def round_seconds(self, traffic: RoundTraffic) -> float:
        if self.barrier == "iteration" and self.costs.sends_activations and traffic.activations_up > 0:
            return self.barrier_seconds(traffic.clients, traffic.samples, traffic.iterations)
        t = self.client_seconds(traffic.clients, traffic.samples, traffic.up, traffic.down)
        self.last_client_seconds = t
        return float(t.max())

    def client_seconds(
        self, clients: torch.Tensor, samples: torch.Tensor, up: torch.Tensor, down: torch.Tensor
    ) -> torch.Tensor:
        """``t_k`` (s, ``[S]`` float64) of ``clients`` (``[S]`` ids) that trained on ``samples`` rows each in the
        round (``T·B_k``) and sent/received the round's ``up``/``down`` bytes (``[S]`` each)."""
        clients = clients.detach().cpu().long()
        rates = self.rates(clients, bandwidth_per_client(self.bandwidth_hz, len(clients)))
        compute = samples.detach().cpu().double() * self.costs.training_flops / self.capacities[clients]
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
        rates = self.rates(clients, bandwidth_per_client(self.bandwidth_hz, len(clients)))
        caps = self.capacities[clients]
        cuts = self.costs.cuts
        names = list(cuts)
        per_cut = []  # per cut: (forward + upload, backward, model upload) seconds of each client, [S] each
        tail = self.costs.tail_row_bytes  # U-shaped: the body's output down, its gradient up, no label; and the tail
        tail_forward = self.costs.tail_forward_flops
        tail_backward = self.costs.tail_training_flops - tail_forward
        for cost in cuts.values():
            up = 8.0 * rows * (cost.activation_bytes + (tail if tail else LABEL_BYTES)) / rates
            if self.include_downlink:
                up = up + 8.0 * rows * (cost.activation_bytes + tail) / rates
            model = 8.0 * cost.model_bytes / rates * (2 if self.include_downlink else 1)
            forward, backward = (
                rows * (cost.forward + tail_forward) / caps,
                rows * (cost.backward + tail_backward) / caps,
            )
            per_cut.append((forward + up, backward, model))
        arrive, backward, model = (torch.stack(parts) for parts in zip(*per_cut))  # [cuts, S] each
        columns = torch.arange(len(clients))

        def round_seconds(pick: torch.Tensor) -> float:
            a, b = arrive[pick, columns], backward[pick, columns]
            total = sum(float(a[iters > t].max() + b[iters > t].max()) for t in range(int(iters.max())))
            return total + float(model[pick, columns].max())

        if not len(clients):
            return 0.0
        pick = torch.full((len(clients),), names.index(self.costs.nominal_cut), dtype=torch.long)
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

    # ------------------------------------------------------------------ asynchronous clients
    @override
    def client_times(self, rows: torch.Tensor, concurrency: int, full_bandwidth: bool = False) -> ClientTimes:
        costs = self.costs
        forward, backward = costs.forward_flops, costs.backward_flops
        bandwidth = self.bandwidth_hz if full_bandwidth else self.bandwidth_hz / concurrency
        rate = uplink_rates(self.distances_m, bandwidth, self.tx_power_w, self.noise_dbm_per_hz)
        rows, caps = rows.double(), self.capacities
        model_upload = 8.0 * costs.model_bytes / rate
        if not costs.sends_activations:
            return ClientTimes.local(rows * (forward + backward) / caps, model_upload)
        return ClientTimes.split(
            rows * forward / caps, rows * backward / caps, rows * costs.activation_row_bits / rate, model_upload
        )

    # ------------------------------------------------------------------ checkpointed draws
    @override
    def state_dict(self) -> dict:
        """The seed and ``K`` that draw the clients' distances and speeds, and a digest of the draws (not ``2K``
        numbers: a checkpoint's size does not grow with ``K``)."""
        drawn = self.distances_m is not None
        return {
            "seed": self.seed,
            "num_clients": len(self.distances_m) if drawn else None,
            "draws": draws_digest(self.distances_m, self.capacities),
        }

    @override
    def load_state_dict(self, state: dict) -> None:
        if state.get("distances_m") is not None:  # a checkpoint of an earlier version: the draws themselves
            self.seed = int(state["seed"])
            self.distances_m = torch.as_tensor(state["distances_m"], dtype=torch.float64)
            self.capacities = torch.as_tensor(state["capacities"], dtype=torch.float64)
        elif state.get("num_clients") is not None:  # the placement of the run being resumed, drawn again
            self.seed = int(state["seed"])
            self.draw_system(int(state["num_clients"]))
            checked_redraw(state["draws"], draws_digest(self.distances_m, self.capacities), type(self).__name__)
