"""FedConcat (Diao, Li & He, AAAI 2024): cluster the clients by label distribution, train one model per cluster,
concatenate the clusters' encoders and train a classifier on their concatenated features.

Two stages over the rounds ``t = 0, 1, ...``:

1. **Encoders** (``t < R_e``, ``encoder_rounds``): the server clusters the ``K`` clients into ``C`` groups by k-means
   on their label distributions ``P_k`` (:func:`cluster_clients`, once, before training). Every cluster ``c`` has its
   own full model ``w_c`` (encoder ``φ_c`` + classifier); a selected client trains its cluster's model with local SGD
   and the server averages, per cluster, the clients of that cluster that took part (``|D_k|``-weighted FedAvg).
2. **Classifier** (``t ≥ R_e``): the encoders are frozen and concatenated, ``z = [φ_1(x), ..., φ_C(x)]``
   ``[B, C·d]``; a new linear head ``g: [B, C·d] → [B, N]`` is trained by FedAvg over all clients. A client
   downloads the ``C`` encoders once (the first time it takes part in this stage) and the head every round.

The global model, evaluated every round, is ``g(z)``: during the encoder stage its head is still untrained
(accuracy near chance; the authors report nothing before the classifier stage).

Departures of the authors' code (``sjtudyq/FedConcat``) that we do not follow: the head's clients take 3 SGD
steps per round and are averaged uniformly (we use the method's ``local_iters`` and ``|D_k|`` weights, as every
other FL method here); the encoders stay in train mode while the head trains (dropout on; ours are in eval mode,
so frozen means frozen, BatchNorm statistics included); a size-capped k-means for CIFAR-100 only.

>>> dist = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
>>> labels = cluster_clients(dist, 2, seed=0)
>>> bool(labels[0] == labels[1]) and bool(labels[2] == labels[3]) and bool(labels[0] != labels[2])
True
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from typing_extensions import override

from lightning_sfl import trainer_view
from lightning_sfl.algorithms.fedavg import FedAvg
from lightning_sfl.algorithms.registry import register
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Step
from lightning_sfl.runtime import banks
from lightning_sfl.system.comm import module_bytes

__all__ = ["ConcatNet", "FedConcat", "cluster_clients"]


def cluster_clients(label_dist: torch.Tensor, num_clusters: int, seed: int = 0) -> torch.Tensor:
    """k-means (scikit-learn, 10 restarts) of the clients' label distributions ``[K, N]`` into ``num_clusters``
    groups; returns each client's cluster, ``[K]`` int64 (deterministic for a ``seed``)."""
    from sklearn.cluster import KMeans  # imported here: scikit-learn is slow to import

    points = label_dist.detach().double().cpu().numpy()
    labels = KMeans(n_clusters=num_clusters, n_init=10, random_state=seed).fit(points).labels_
    return torch.as_tensor(labels, dtype=torch.int64)


class ConcatNet(nn.Module):
    """``C`` copies of a model ending in ``nn.Linear`` (the clusters' models) and a head on their concatenated
    features: ``x [B, ...] → z = [φ_1(x), ..., φ_C(x)] [B, C·d] → g(z) [B, N]`` (``φ_c``: all but the last layer)."""

    def __init__(self, net: nn.Sequential, num_clusters: int) -> None:
        super().__init__()
        last = net[-1]
        if not isinstance(last, nn.Linear):
            raise ConfigError(f"FedConcat needs a model whose last layer is nn.Linear, got {type(last).__name__}")
        self.clusters = nn.ModuleList(copy.deepcopy(net) for _ in range(num_clusters))  # same init, as the authors
        self.head = nn.Linear(num_clusters * last.in_features, last.out_features)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """``z``: the encoders' features, concatenated, ``[B, C·d]``."""
        outs = []
        for net in self.clusters:
            h = x
            for layer in list(net)[:-1]:
                h = layer(h)
            outs.append(h.flatten(1))
        return torch.cat(outs, dim=1)

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


@register("fedconcat", family="fl")
class FedConcat(FedAvg):
    """FedConcat: per-cluster FedAvg of full models, then FedAvg of a head on the concatenated frozen encoders.

    State (checkpointed): each client's cluster (``fedconcat_cluster``, ``[K]``), the number of encoder rounds
    ``R_e`` resolved when the fit started (``fedconcat_encoder_rounds``) and which clients already hold the
    encoders (``fedconcat_has_encoders``, ``[K]``, for the traffic count).

    Args:
        clusters: ``C``, the number of clusters (``1 ≤ C ≤ K``). Default 5: the authors' code default and their
            CIFAR-10 script.
        encoder_rounds: ``R_e``, rounds of the encoder stage; the classifier stage takes the remaining rounds of the
            fit. ``None`` (default): half of the trainer's ``max_epochs`` (at least 1), fixed when the fit starts.
            (The authors' script runs 50 encoder rounds, then 1000 head rounds of 3 local steps each.)
        cluster_seed: seed of k-means.
        **kwargs: see :class:`~lightning_sfl.algorithms.fedavg.FedAvg`.
    """

    def __init__(self, clusters: int = 5, encoder_rounds: int | None = None, cluster_seed: int = 0, **kwargs) -> None:
        if isinstance(clusters, bool) or not isinstance(clusters, int) or clusters < 1:
            raise ConfigError(f"clusters={clusters!r} must be an int >= 1")
        if encoder_rounds is not None and encoder_rounds < 1:
            raise ConfigError(f"encoder_rounds={encoder_rounds} must be >= 1 (or None: half of max_epochs)")
        if isinstance(cluster_seed, bool) or not isinstance(cluster_seed, int) or cluster_seed < 0:
            raise ConfigError(f"cluster_seed={cluster_seed!r} must be an int >= 0")
        super().__init__(**kwargs)
        self.clusters, self.encoder_rounds, self.cluster_seed = clusters, encoder_rounds, cluster_seed
        self.client.net = ConcatNet(self.client.net, clusters)
        self.add_state("fedconcat_cluster", self._initial_clusters)
        self.add_state("fedconcat_encoder_rounds", lambda: torch.tensor(self._resolve_encoder_rounds()))
        self.add_state("fedconcat_has_encoders", lambda: torch.zeros(self.client_stats.num_clients, dtype=torch.bool))

    def _initial_clusters(self) -> torch.Tensor:
        num_clients = self.client_stats.num_clients
        if self.clusters > num_clients:
            raise ConfigError(f"clusters={self.clusters} must be <= the number of clients ({num_clients})")
        return cluster_clients(self.client_stats.label_distribution, self.clusters, self.cluster_seed)

    def _resolve_encoder_rounds(self) -> int:
        if self.encoder_rounds is not None:
            return self.encoder_rounds
        max_epochs = trainer_view.run_length(self.trainer)
        if max_epochs is None or max_epochs < 1:
            raise ConfigError(
                f"FedConcat needs encoder_rounds when the trainer's max_epochs is {max_epochs} (default: half of it)"
            )
        return max(1, max_epochs // 2)

    @override
    def client_models(self) -> dict[str, nn.Module]:
        """Slots hold a cluster's full model (encoder stage) or the head (classifier stage)."""
        return {"client": self.client.net.clusters[0], "head": self.client.net.head}

    def in_head_stage(self, step: Step) -> bool:
        return step.round >= int(self.fedconcat_encoder_rounds)

    def _cluster_masks(self, step: Step) -> list[tuple[int, torch.Tensor]]:
        """``(cluster, mask over the step's clients)`` for every cluster with clients in the step."""
        of = self.fedconcat_cluster[step.clients]
        return [(c, of == c) for c in torch.unique(of).tolist()]

    @override
    def start_round(self, step: Step) -> None:
        """Encoder stage: every client downloads its cluster's model. Classifier stage: the head (and, the first
        time, the ``C`` encoders)."""
        net = self.client.net
        if not self.in_head_stage(step):
            for c, mask in self._cluster_masks(step):
                self.reset_slots(step.slots_tensor[mask], {"client": net.clusters[c]})
            return
        self.reset_slots(step.slots, {"head": net.head})
        new = ~self.fedconcat_has_encoders[step.clients]
        if new.any():
            encoders = sum(module_bytes(m) - module_bytes(m[-1]) for m in net.clusters)
            self.ledger.add("down", banks.traffic_kind(self), encoders, step.slots_tensor[new])
            self.fedconcat_has_encoders[step.clients] = True

    @override
    def slot_forward(self, step: Step) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Classifier stage: each slot's head on the frozen concatenated features (encoders in eval mode)."""
        if not self.in_head_stage(step):
            return super().slot_forward(step)
        net = self.client.net
        modes = [m.training for m in net.clusters]
        net.clusters.eval()
        with torch.no_grad():
            z = net.features(step.x)
        for m, mode in zip(net.clusters, modes):
            m.train(mode)
        return None, self.client_banks["head"](z, step.local_sizes, step.slots)

    @torch.no_grad()
    @override
    def aggregate(self, step: Step) -> None:
        """Encoder stage: per-cluster FedAvg. Classifier stage: FedAvg of the heads."""
        net, weights = self.client.net, self.aggregation_weights(step)
        if self.in_head_stage(step):
            self.aggregate_slots(weights, step.slots, {"head": net.head}, step.clients, self.step_seed(step))
            return
        for c, mask in self._cluster_masks(step):
            clients, seed = step.clients[mask], self.step_seed(step) + c
            self.aggregate_slots(weights[mask], step.slots_tensor[mask], {"client": net.clusters[c]}, clients, seed)
