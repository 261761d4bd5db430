"""``GradientDissimilarity``: the layer-wise gradient dissimilarity of SCALA's Assumption 3, measured in a run.

At the global model ``w = [w_c; w_s]`` of round ``i`` (before the round's local training) and for every client
``k ∈ C^i`` of the round, ``g_k = ∇F_k(w)`` is the gradient of the mean plain cross-entropy of the global,
unsplit model (client half then server half) over client ``k``'s local data, one tensor per parameter tensor
("layer"). With ``p_k = |D_k| / Σ_{j∈C^i} |D_j|`` (the weights of ``F``, eq. 1, and of the FL phase, eq. 10) and
``∇F = Σ_k p_k g_k`` the callback logs (see :mod:`lightning_sfl.system.dissimilarity`)::

    dissimilarity/client.<name>   Σ_k p_k ‖g_{k,n} − ∇_n F‖² of each parameter tensor n of the client half
    dissimilarity/server.<name>   the same for the server half (none for plain FL: there is no server half)
    dissimilarity/tail.<name>     U-shaped (``--model.tail_point``): the same for the clients' tail after the body
    dissimilarity/client_half     sum over the client half's tensors (and the tail's: what the clients hold)
    dissimilarity/server_half     sum over the server half's tensors (0 for plain FL)
    dissimilarity/total           sum over all tensors, ‖·‖² of the whole gradient
    dissimilarity/round           i, the round whose starting model was measured

Layer names are the global halves' ``named_parameters()`` (e.g. ``client.0.weight``, ``server.9.bias``; the
halves keep the layer indices of the unsplit model).

**When.** Rounds ``i`` with ``i % every_n_rounds == 0`` (``i = trainer.current_epoch``, 0-based: round 0 is the
initial model), at the round's start (the ``on_round_start`` event, before its first step), when the global halves
still hold the model that the FL phase of round ``i − 1`` produced; the clients are those of the first step.
Values are logged once per measured round (``on_epoch``), so they land in the row of epoch ``i`` of the
loggers.

**Cost.** One extra forward and backward pass of the full model over each participating client's shard per
measured round, i.e. ``Σ_{k∈C^i} |D_k|`` samples (``Σ_k min(|D_k|, max_samples_per_client)`` when subsampling);
a round of training itself processes ``T·B`` samples. Every measured round also holds ``S`` gradient copies of
the model (``S``: clients per round) and, by default, one client's whole shard of activations at a time
(``chunk_size`` bounds that).

**Training is not disturbed.** The gradients are taken with ``torch.autograd.grad`` with respect to detached
aliases of the global weights, so no weight, no ``.grad`` (the server half's parameters are optimised by the
server; the client slots by the clients) and no optimiser state changes. The model runs with *train-mode*
semantics — BatchNorm normalises with the statistics of the rows it sees, as in local training, so ``F_k`` is
the local objective the clients actually descend — but on clones of the buffers, so the running statistics
(and ``num_batches_tracked``) of the global model are untouched; train/eval flags are restored. The subsample
comes from its own generator seeded by ``(seed, round, client)`` and the passes run inside
``torch.random.fork_rng``, so the random state used by training (e.g. by dropout) is unchanged.

**Distributed runs.** Every rank holds the same global model and the whole dataset, so every rank computes the
same values (the cost above, on each rank) and logs them without synchronisation; computing on every rank keeps
the ranks' code paths identical and ``callback_metrics`` the same on all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call
from typing_extensions import override

from lightning_sfl.callbacks.round_callback import RoundCallback
from lightning_sfl.errors import whole_number
from lightning_sfl.loop import Federation, Step
from lightning_sfl.system.dissimilarity import layer_dissimilarity, partition_totals

__all__ = ["GradientDissimilarity", "global_model_gradient"]


def global_model_gradient(
    halves: Mapping[str, nn.Module], x: torch.Tensor, y: torch.Tensor, chunk_size: int | None = None
) -> dict[str, torch.Tensor]:
    """Gradient of ``mean_i CE(f(x_i), y_i)`` for ``f`` the composition of ``halves`` (in order), per parameter.

    Args:
        halves: ``{prefix: module}``, applied one after another (e.g. ``{"client": w_c, "server": w_s}``; an
            empty ``nn.Sequential`` is the identity).
        x: ``[n, ...]`` float inputs; ``y``: ``[n]`` labels.
        chunk_size: rows per forward pass (``None``: all ``n`` at once). The gradient is the row-weighted sum of
            the chunks' gradients, exact for models without BatchNorm; with BatchNorm each chunk is normalised
            with its own statistics.

    Returns:
        ``{f"{prefix}.{name}": gradient}`` for every parameter of every half (zero where unused).

    The modules run in train mode on clones of their buffers; their parameters, ``.grad``, buffers and
    train/eval flags are left as they were.
    """
    n = len(y)
    if n == 0:
        raise ValueError("no rows: the gradient of a mean over an empty set is undefined")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size} must be >= 1 (or None)")
    params = {h: {k: p.detach().requires_grad_(True) for k, p in m.named_parameters()} for h, m in halves.items()}
    buffers = {h: {k: b.detach().clone() for k, b in m.named_buffers()} for h, m in halves.items()}
    names = [f"{h}.{k}" for h, ps in params.items() for k in ps]
    leaves = [p for ps in params.values() for p in ps.values()]
    total = [torch.zeros_like(p) for p in leaves]
    flags = [(m, m.training) for half in halves.values() for m in half.modules()]
    step = n if chunk_size is None else chunk_size
    try:
        for half in halves.values():
            half.train()
        with torch.enable_grad():
            for xs, ys in zip(x.split(step), y.split(step)):
                h = xs
                for name, half in halves.items():
                    h = functional_call(half, (params[name], buffers[name]), (h,))
                loss = F.cross_entropy(h, ys, reduction="sum") / n
                if not leaves:
                    continue
                grads = torch.autograd.grad(loss, leaves, allow_unused=True)
                for acc, g in zip(total, grads):
                    if g is not None:
                        acc.add_(g)
    finally:
        for m, training in flags:
            m.training = training
    return dict(zip(names, total))


class GradientDissimilarity(RoundCallback):
    """Logs the layer-wise gradient dissimilarity ``Σ_k p_k ‖∇F_k − ∇F‖²`` of the round's clients at the global model.

    Measured every ``every_n_rounds`` rounds (keys ``dissimilarity/*``; see the module docstring).

    Works for split methods (client half ∘ server half) and plain FL (the whole model is the client half,
    ``dissimilarity/server_half`` is 0). Reads the clients' shards and data from the fit's federation and the global
    model from the method (its ``client`` and ``server`` halves).

    Args:
        every_n_rounds: measure at rounds ``i`` (0-based ``trainer.current_epoch``) with ``i % every_n_rounds == 0``;
            0 turns it off.
        max_samples_per_client: ``None``: each client's whole shard (the exact ``∇F_k``); otherwise a uniform
            subsample without replacement of at most this many rows (an estimate; the weights ``p_k`` stay
            ``|D_k|``-based).
        seed: seeds the subsample of client ``k`` in round ``i`` with ``(seed, i, k)``.
        chunk_size: rows per forward pass (``None``: a client's rows at once; set it to bound memory).

    Cost: one forward+backward pass over ``Σ_{k∈C^i} |D_k|`` samples per measured round (see the module docstring).
    """

    #: The command line's group of its options (``--dissimilarity.every_n_rounds``), named in its errors.
    cli_group: ClassVar[str] = "dissimilarity"

    def __init__(
        self,
        every_n_rounds: int = 10,
        max_samples_per_client: int | None = None,
        seed: int = 0,
        chunk_size: int | None = None,
    ) -> None:
        group = self.cli_group
        self.every_n_rounds = whole_number(f"{group}.every_n_rounds", every_n_rounds, low=0)  # 0: off
        self.max_samples_per_client = None if max_samples_per_client is None else whole_number(
            f"{group}.max_samples_per_client", max_samples_per_client)  # fmt: skip
        self.seed = seed
        self.chunk_size = None if chunk_size is None else whole_number(f"{group}.chunk_size", chunk_size)
        self.federation: Federation | None = None  # the fit's (on_federation)

    def should_measure(self, round_idx: int) -> bool:
        return self.every_n_rounds > 0 and round_idx % self.every_n_rounds == 0

    def client_rows(self, indices: torch.Tensor, round_idx: int, client: int) -> torch.Tensor:
        """Rows of client ``client`` used in round ``round_idx``: all of ``indices`` or a seeded subsample (sorted)."""
        m = self.max_samples_per_client
        if m is None or len(indices) <= m:
            return indices
        g = torch.Generator()
        g.manual_seed(((self.seed * 1_000_003 + round_idx) * 1_000_033 + client) % (2**63 - 1))
        pick = torch.randperm(len(indices), generator=g)[:m]
        return indices[pick.sort().values]

    @torch.no_grad()
    def measure(self, pl_module, federation: Federation, clients: torch.Tensor, round_idx: int) -> dict[str, float]:
        """The ``dissimilarity/*`` metrics of the current global model (the method's ``client`` and ``server`` halves)
        for ``clients`` (``[S]`` ids) on the federation's data."""
        device = pl_module.device
        halves = {"client": pl_module.client.net, "server": pl_module.server.net}
        if getattr(pl_module, "tail", None) is not None:  # U-shaped: the clients' tail after the server's body
            halves["tail"] = pl_module.tail.net
        data, stats = federation.data, federation.stats
        ids = clients.tolist()
        rng_devices = []
        if device.type == "cuda":
            rng_devices = [device.index if device.index is not None else torch.cuda.current_device()]
        with torch.random.fork_rng(devices=rng_devices):
            grads = []
            for k in ids:
                rows = self.client_rows(stats.shards[k], round_idx, k)
                x = data.train_inputs(rows, device)
                y = data.train_labels(rows).to(device)
                grads.append(global_model_gradient(halves, x, y, self.chunk_size))
        sizes = stats.sizes[clients.cpu()].to(device)  # |D_k|, [S]
        per_layer = layer_dissimilarity(grads, sizes)
        partition = {
            "client_half": [n for n in per_layer if n.startswith(("client.", "tail."))],  # what the clients hold
            "server_half": [n for n in per_layer if n.startswith("server.")],
        }
        totals = partition_totals(per_layer, partition)
        metrics = {f"dissimilarity/{n}": float(v) for n, v in per_layer.items()}
        metrics.update({f"dissimilarity/{g}": float(v) for g, v in totals.items()})
        metrics["dissimilarity/round"] = float(round_idx)
        return metrics

    @override
    def on_federation(self, trainer, pl_module, federation: Federation) -> None:
        self.federation = federation

    @override
    def on_round_start(self, trainer, pl_module, step: Step) -> None:
        round_idx = step.round
        if not self.should_measure(round_idx) or not len(step.clients):
            return
        federation = self.federation
        if federation is None or federation.data is None:
            raise RuntimeError("GradientDissimilarity needs the clients' data: a federation with a FederatedDataModule")
        metrics = self.measure(pl_module, federation, step.clients, round_idx)
        pl_module.log_dict(metrics, on_step=False, on_epoch=True, batch_size=1)
