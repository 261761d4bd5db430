"""``EdgeDevices``: the system model of Semi-SFL (§V-A): heterogeneous edge devices behind fluctuating links.

The paper: "the computing time of one local iteration on each simulated client follows a Gaussian distribution. The
mean and variance of the Gaussian distribution are derived from time records of performing one local iteration on
various commercial edge devices, such as NVIDIA Jetson NX and AGX. [...] the outbound bandwidths are implemented to
fluctuate between 2Mbps and 8Mbps, and the inbound bandwidths vary between 10Mbps and 20Mbps". Neither the paper nor
the authors' code (``littlefishe/Capsule``, which has no system model) gives the means or variances, so ours are
derived, and configurable:

* **Device types.** When bound to a federation, each of the ``K`` clients is given a device type (``device_share``,
  default equal shares, assigned by a permutation seeded by ``seed``). A type has an effective training throughput
  (``device_gflops``, GFLOP/s). A client's mean time per local iteration of ``b`` rows is ``μ = b·c / F`` with ``c`` the
  client-side model's training FLOPs per sample (:class:`~lightning_sfl.system.timing.ClientCosts`), so the same
  device is slower on a bigger model or a later cut; each iteration's time is drawn from ``N(μ, (v·μ)²)``
  (``device_cv`` = ``v``, clipped below at ``μ/10``).
* **Defaults** (``jetson_nx`` 24, ``jetson_agx`` 40 GFLOP/s): calibrated on Semi-SFL's Table III, where FedSwitch
  computes for 310 min on SVHN (CNN) and 500 min on CIFAR-10 (AlexNet) over 1,000 rounds: 18.6 s and 30 s a round of
  ``K_u = 50`` iterations of 64 rows, i.e. 50·64·101 MFLOP / 18.6 s ≈ 17 GFLOP/s and 50·64·417 MFLOP / 30 s ≈
  44 GFLOP/s (our FLOP counts of ``cnn_svhn`` and ``alexnet_cifar``); the two types keep the ratio of the devices'
  peak FP32 throughput (Xavier NX 0.85, AGX Xavier 1.41 TFLOP/s). ``device_cv = 0.1`` is an assumption (the paper
  gives no variance). The server (an RTX 3090 in the paper) trains at ``server_gflops`` (default 3,500: a tenth of
  its FP32 peak, assumed).
* **Links.** In every round each participating client's uplink rate is drawn from ``U[uplink_mbps]`` and its downlink
  rate from ``U[downlink_mbps]`` (Mbit/s, 10⁶ bit/s).

All draws of round ``h`` come from a generator seeded by ``(seed, h)``: a run resumed at any round's end draws the
same times (the device types are checkpointed with the federation).

**A synchronous round** (:meth:`EdgeDevices.round_seconds`) with ``R`` rows trained on the server's labelled set
(Semi-SFL's supervised phase; 0 for other methods), client ``k``'s bytes in the round's ledger and ``τ_{k,t}`` its
compute time of local iteration ``t``::

    t_server = R · c_full / server_flops                          (c_full: the whole model's training FLOPs/sample)
    barrier="iteration" (split methods: the server steps once per iteration with every client's activations, eq. 7):
      t_round = t_server + max_k 8·model_down_k/d_k + Σ_t max_k (τ_{k,t} + 8·act_up_k/u_k + 8·grad_down_k/d_k)
                         + max_k 8·model_up_k/u_k
    barrier="round" (full-model FL, or split methods without the per-iteration wait):
      t_round = t_server + max_k (8·down_k/d_k + Σ_t τ_{k,t} + 8·up_k/u_k)

``u_k``, ``d_k`` are the round's up/down rates (bit/s); ``act_up_k`` (activations and labels) and ``grad_down_k``
(gradients) are client ``k``'s bytes per iteration (its round total over its iterations), ``model_*`` the rest of its
bytes (client halves, full models, teachers, control variates). The server's share of the split iterations, the
time of method-specific extras on the clients (a teacher's forward pass) and propagation delays are not charged.

Asynchronous schedules (:meth:`EdgeDevices.client_times`) get each client's mean compute times and the midpoint of the
uplink range (downloads are not charged there, as on the wireless cell).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from typing_extensions import override

from lightning_sfl.errors import ConfigError
from lightning_sfl.system.timing import (
    ClientCosts,
    ClientTimes,
    RoundTraffic,
    SystemModel,
    checked_redraw,
    draws_digest,
)  # fmt: skip

__all__ = ["DEVICE_GFLOPS", "EdgeDevices", "iteration_seconds", "link_rates"]

#: Effective training throughput (GFLOP/s) of the paper's device types (module docstring: calibrated on Table III).
DEVICE_GFLOPS = {"jetson_nx": 24.0, "jetson_agx": 40.0}
BARRIERS = ("iteration", "round")
PER_ITERATION_KINDS = {
    "up": ("activations", "labels", "body_gradients", "label_counts"),
    "down": ("gradients", "body_outputs", "label_prior"),
}


def iteration_seconds(
    mean: torch.Tensor, cv: torch.Tensor, iterations: int, generator: torch.Generator
) -> torch.Tensor:
    """Compute time (s) of ``iterations`` local iterations of each client, ``[S, T]`` float64: ``N(μ, (v·μ)²)`` per
    entry with ``μ = mean`` and ``v = cv`` (``[S]`` each), clipped below at ``μ/10``.

    >>> g = torch.Generator().manual_seed(0)
    >>> iteration_seconds(torch.tensor([2.0, 1.0]), torch.zeros(2), 3, g).tolist()
    [[2.0, 2.0, 2.0], [1.0, 1.0, 1.0]]
    """
    mean, cv = mean.double()[:, None], cv.double()[:, None]
    noise = torch.randn(len(mean), iterations, generator=generator, dtype=torch.float64)
    return torch.maximum(mean * (1 + cv * noise), mean / 10)


def link_rates(count: int, mbps_range: Sequence[float], generator: torch.Generator) -> torch.Tensor:
    """``count`` rates (bit/s, ``[S]`` float64) uniform in ``mbps_range`` Mbit/s."""
    low, high = (1e6 * float(v) for v in mbps_range)
    return low + (high - low) * torch.rand(count, generator=generator, dtype=torch.float64)


class EdgeDevices(SystemModel):
    """Heterogeneous edge devices behind fluctuating links: Semi-SFL's system (see the module docstring).

    Args:
        device_types: names of the device types (e.g. ``[jetson_nx, jetson_agx]``).
        device_gflops: effective training throughput of each type (GFLOP/s); default: :data:`DEVICE_GFLOPS` of the
            named types.
        device_cv: ``v``, the standard deviation of an iteration's time over its mean, one value or one per type.
        device_share: fraction of the clients of each type (default equal; normalised).
        uplink_mbps: ``[low, high]`` of each client's uplink rate, drawn every round (Mbit/s).
        downlink_mbps: ``[low, high]`` of each client's downlink rate, drawn every round (Mbit/s).
        server_gflops: the server's training throughput (GFLOP/s), for the rows it trains on its own.
        barrier: ``iteration`` (split methods wait for every client at every iteration) or ``round``.
        seed: seeds the device types and every round's draws; ``None``: the data seed.
    """

    def __init__(
        self,
        device_types: Sequence[str] = ("jetson_nx", "jetson_agx"),
        device_gflops: Sequence[float] | None = None,
        device_cv: float | Sequence[float] = 0.1,
        device_share: Sequence[float] | None = None,
        uplink_mbps: Sequence[float] = (2.0, 8.0),
        downlink_mbps: Sequence[float] = (10.0, 20.0),
        server_gflops: float = 3500.0,
        barrier: str = "iteration",
        seed: int | None = None,
    ) -> None:
        self.device_types = [str(t) for t in device_types]
        n = len(self.device_types)
        if n == 0:
            raise ConfigError("device_types must name at least one device type")
        if device_gflops is None:
            unknown = [t for t in self.device_types if t not in DEVICE_GFLOPS]
            if unknown:
                raise ConfigError(
                    f"device_types {unknown} have no default throughput: give device_gflops (one per type) or use "
                    f"{', '.join(DEVICE_GFLOPS)}"
                )
            device_gflops = [DEVICE_GFLOPS[t] for t in self.device_types]
        cvs = [device_cv] * n if isinstance(device_cv, (int, float)) else list(device_cv)
        shares = [1.0] * n if device_share is None else list(device_share)
        for name, values in (("device_gflops", device_gflops), ("device_cv", cvs), ("device_share", shares)):
            if len(values) != n:
                raise ConfigError(f"{name} has {len(values)} values; device_types has {n}")
        if not all(v > 0 for v in device_gflops) or not server_gflops > 0:
            raise ConfigError(f"device_gflops={list(device_gflops)} and server_gflops={server_gflops} must be > 0")
        if not all(v >= 0 for v in cvs) or not all(v >= 0 for v in shares) or not sum(shares) > 0:
            raise ConfigError(f"device_cv={cvs} must be >= 0 and device_share={shares} >= 0 with a positive sum")
        for name, pair in (("uplink_mbps", uplink_mbps), ("downlink_mbps", downlink_mbps)):
            if len(pair) != 2 or not 0 < pair[0] <= pair[1]:
                raise ConfigError(f"{name}={list(pair)} must be [low, high] with 0 < low <= high (Mbit/s)")
        if barrier not in BARRIERS:
            raise ConfigError(f"barrier={barrier!r} must be one of: {', '.join(BARRIERS)}")
        self.device_gflops = torch.tensor([float(v) for v in device_gflops], dtype=torch.float64)
        self.device_cv = torch.tensor([float(v) for v in cvs], dtype=torch.float64)
        self.device_share = torch.tensor([float(v) for v in shares], dtype=torch.float64) / sum(shares)
        self.uplink_mbps, self.downlink_mbps = [float(v) for v in uplink_mbps], [float(v) for v in downlink_mbps]
        self.server_flops, self.barrier, self.seed = 1e9 * float(server_gflops), barrier, seed
        self.costs: ClientCosts | None = None
        self.client_types: torch.Tensor | None = None  # [K] index into device_types
        self.last_client_seconds: torch.Tensor | None = None  # [S] each slot's own time in the last round

    # ------------------------------------------------------------------ the run's clients
    @override
    def bind(self, num_clients: int, seed: int, costs: ClientCosts) -> None:
        self.seed = seed if self.seed is None else self.seed
        if self.client_types is None or len(self.client_types) != num_clients:
            self.client_types = self.assign_types(num_clients)
        self.costs = costs
        _ = costs.training_flops  # measured now, in the dtype the model is built in

    def assign_types(self, num_clients: int) -> torch.Tensor:
        """Device type of each of ``num_clients`` clients ``[K]``: ``round(share·K)`` of each type (largest
        remainders first), in an order permuted by a generator seeded by ``seed``."""
        exact = self.device_share * num_clients
        counts = exact.floor().long()
        rest = num_clients - int(counts.sum())
        counts[torch.argsort(exact - counts, descending=True, stable=True)[:rest]] += 1
        types = torch.repeat_interleave(torch.arange(len(counts)), counts)
        g = torch.Generator().manual_seed(int(self.seed))
        return types[torch.randperm(num_clients, generator=g)]

    def mean_iteration_seconds(self, clients: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``μ_k = b_k·c / F_type(k)`` (s, ``[S]``) of ``clients`` training ``rows`` rows an iteration."""
        flops = 1e9 * self.device_gflops[self.client_types[clients]]
        return rows.double() * self.costs.training_flops / flops

    def _round_generator(self, round_idx: int) -> torch.Generator:
        return torch.Generator().manual_seed(int(self.seed) * 1_000_003 + int(round_idx) * 7_919 + 17)

    # ------------------------------------------------------------------ synchronous rounds
    def server_seconds(self, rows: int) -> float:
        """Seconds of the server's own training on ``rows`` rows (the whole model)."""
        return float(rows) * self.costs.full_training_flops / self.server_flops if rows else 0.0

    @override
    def round_seconds(self, traffic: RoundTraffic) -> float:
        used = (traffic.clients >= 0) & (traffic.iterations > 0 if traffic.iterations is not None else True)
        server = self.server_seconds(traffic.server_rows)
        if not bool(used.any()):
            self.last_client_seconds = torch.zeros(0, dtype=torch.float64)
            return server
        clients = traffic.clients[used].cpu().long()
        iters = (traffic.iterations[used] if traffic.iterations is not None else torch.ones_like(clients)).cpu().long()
        rows = traffic.samples[used].cpu().double() / iters
        g = self._round_generator(traffic.round)
        up_rate = link_rates(len(clients), self.uplink_mbps, g)
        down_rate = link_rates(len(clients), self.downlink_mbps, g)
        mean = self.mean_iteration_seconds(clients, rows)
        compute = iteration_seconds(mean, self.device_cv[self.client_types[clients]], int(iters.max()), g)
        compute = compute * (torch.arange(compute.shape[1])[None, :] < iters[:, None])  # [S, T]: 0 past T_k
        kinds = {key: value[used].cpu().double() for key, value in traffic.by_kind.items()}
        per_iter_up = sum((v for (d, k), v in kinds.items() if d == "up" and k in PER_ITERATION_KINDS["up"]), 0.0)
        per_iter_down = sum((v for (d, k), v in kinds.items() if d == "down" and k in PER_ITERATION_KINDS["down"]), 0.0)
        up, down = traffic.up[used].cpu().double(), traffic.down[used].cpu().double()
        if self.barrier == "iteration" and self.costs.sends_activations:
            exchange = 8.0 * per_iter_up / iters / up_rate + 8.0 * per_iter_down / iters / down_rate  # [S]
            model_down = 8.0 * (down - per_iter_down) / down_rate
            model_up = 8.0 * (up - per_iter_up) / up_rate
            step = (compute + exchange[:, None]) * (compute > 0)  # [S, T]
            seconds = float(model_down.max() + step.max(dim=0).values.sum() + model_up.max())
            self.last_client_seconds = model_down + step.sum(dim=1) + model_up
            return server + seconds
        self.last_client_seconds = 8.0 * down / down_rate + compute.sum(dim=1) + 8.0 * up / up_rate
        return server + float(self.last_client_seconds.max())

    # ------------------------------------------------------------------ asynchronous clients
    @override
    def client_times(self, rows: torch.Tensor, concurrency: int, full_bandwidth: bool = False) -> ClientTimes:
        """Mean times (module docstring): each client's mean iteration time, the midpoint uplink rate (shared by
        nobody: a client's link is its own, so ``concurrency`` and ``full_bandwidth`` change nothing)."""
        costs = self.costs
        flops = 1e9 * self.device_gflops[self.client_types]
        rate = 1e6 * sum(self.uplink_mbps) / 2
        rows = rows.double()
        model_upload = torch.full_like(rows, 8.0 * costs.model_bytes / rate)
        if not costs.sends_activations:
            return ClientTimes.local(rows * costs.training_flops / flops, model_upload)
        return ClientTimes.split(
            rows * costs.forward_flops / flops,
            rows * costs.backward_flops / flops,
            rows * costs.activation_row_bits / rate,
            model_upload,
        )

    # ------------------------------------------------------------------ checkpointed state
    @override
    def state_dict(self) -> dict:
        """The seed and ``K`` that assign the clients' devices, and a digest of the assignment (not ``K`` numbers)."""
        assigned = self.client_types is not None
        return {
            "seed": self.seed,
            "num_clients": len(self.client_types) if assigned else None,
            "draws": draws_digest(self.client_types),
        }

    @override
    def load_state_dict(self, state: dict) -> None:
        if state.get("client_types") is not None:  # a checkpoint of an earlier version: the assignment itself
            self.seed = int(state["seed"])
            self.client_types = torch.as_tensor(state["client_types"], dtype=torch.long)
        elif state.get("num_clients") is not None:  # the devices of the run being resumed, assigned again
            self.seed = int(state["seed"])
            self.client_types = self.assign_types(int(state["num_clients"]))
            checked_redraw(state["draws"], draws_digest(self.client_types), type(self).__name__)
