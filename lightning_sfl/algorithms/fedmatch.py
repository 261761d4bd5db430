"""FedMatch (Jeong et al., "Federated Semi-Supervised Learning with Inter-Client Consistency & Disjoint Learning",
ICLR 2021; code ``wyjeong/FedMatch``), labels-at-server: one of Semi-SFL's baselines (Tables II, IV, V). Full-model
federated learning; labelled data on the server, unlabelled clients; a round is ``K_s`` supervised server steps, then
``K_u`` steps on the round's clients, then aggregation (the rounds of
:class:`~lightning_sfl.algorithms.semi_supervised.SemiSupervised`).

**Parameter decomposition** ``θ = σ + ψ`` (:func:`decompose_`): every convolution and linear weight is ``σ + ψ``;
``σ`` (and the biases) is learned on the server only, ``ψ`` on the clients only; ``ψ`` starts at ``psi_factor·σ``
(the code's 0.2; the paper's text at hand is silent).

* Server, ``ψ`` frozen: ``L_s(σ) = λ_s·CE(y, p_{σ+ψ}(x))`` (``supervised_weight`` = ``λ_s``; default 1, the loss
  of every other method of the study, whose optimiser FedMatch shares: the code's ``λ_s = 10`` goes with its plain
  SGD at lr 1e-3 and diverges in the first round at Semi-SFL's lr 0.02 with momentum 0.9 (measured on digits);
  ``configs/digits/fedmatch.yaml`` runs the code's whole setting).
* Client ``k``, ``σ`` frozen: ``L_u(ψ) = λ_ICC·Φ_{σ+ψ}(u) + λ_L2·‖σ − ψ‖² + λ_L1·‖ψ‖₁`` summed over the decomposed
  weights, with ``Φ = CE(ŷ, p_θ(π(u))) + (1/H)·Σ_h KL(p_{σ+ψ_h}(u) ‖ p_θ(u))`` (:func:`consistency_rows`): ``π`` the
  strong view, ``u`` the un-augmented image (the code's), ``ŷ`` the *agreement* pseudo-label (:func:`agreement_labels`:
  the most voted class among the argmaxes of the local model and its ``H`` helpers, ties to the lowest index) of the
  rows whose local confidence is ``≥ τ`` (the CE term only, as in the equation; ``mask_kl=True`` masks the KL term
  too, as the code does). The CE and KL terms are means over each client's confident rows (CE) and rows (KL).
  Defaults from the code: ``λ_ICC = 1e-2`` (``consistency_weight``, the code's weight of both terms),
  ``λ_L2 = 10`` (``l2_weight``; it pulls ψ toward σ, as in the code), ``λ_L1 = 1e-5`` (``l1_weight``).

**Helpers (inter-client consistency).** After each client trains, the server embeds its model as its softmax output on
one fixed random image (:func:`probe_image`; truncated normal, mean 125, std 125, clipped to [0, 255], /255) and keeps
its ``ψ_k`` (stale ones kept). A client of round ``h`` with an embedding is sent the ``ψ`` of the ``H`` other clients
nearest to its own embedding (Euclidean; :func:`nearest_helpers`) in rounds with ``(h + 1) % helper_interval == 0``
(the code: every 10 rounds; default: every round, as the equations read); the client rebuilds each helper as its own
``σ`` plus the helper's ``ψ``. Without helpers ``ŷ`` is the local argmax and the KL term vanishes.

**Traffic.** Down: ``σ`` and ``ψ`` (the whole model, ``full_model``) and the helpers' ``ψ`` (``helpers``); up: ``ψ_k``
only (``psi``). The server's ``ψ`` is the unweighted mean of the round's ``ψ_k``. Departures, documented: exact dense
transfer (the code thresholds changes below 1e-5 before upload and counts the cost of a thresholded download); no
thresholding of ``ψ`` at evaluation (the code zeroes ``|ψ| ≤ 1e-5``); the evaluated model is the global ``σ + ψ``.
BatchNorm affine parameters and statistics, where a model has them, belong to ``σ`` (the official model has no BN).
The study's optimiser (SGD with momentum, Semi-SFL's for every method) replaces the code's plain SGD with lr 1e-3.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn
from torch.nn import functional as F
from typing_extensions import override

from lightning_sfl.algorithms.registry import register
from lightning_sfl.algorithms.semi_baselines import client_means
from lightning_sfl.algorithms.semi_supervised import SemiSupervised
from lightning_sfl.data.augment import strong_view
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Step
from lightning_sfl.runtime.iteration import full_model_iteration
from lightning_sfl.system.comm import tensor_bytes

__all__ = [
    "DecomposedConv2d", "DecomposedLinear", "FedMatch", "agreement_labels", "consistency_rows", "decompose_",
    "nearest_helpers", "per_client_consistency", "per_row_consistency", "probe_image",
]  # fmt: skip

PSI = "psi"


class DecomposedLinear(nn.Linear):
    """``nn.Linear`` whose weight is ``σ + ψ``: ``weight`` holds ``σ``, ``psi`` holds ``ψ``."""

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight + self.psi, self.bias)


class DecomposedConv2d(nn.Conv2d):
    """``nn.Conv2d`` whose weight is ``σ + ψ``: ``weight`` holds ``σ``, ``psi`` holds ``ψ``."""

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(x, self.weight + self.psi, self.bias)


_DECOMPOSED = {nn.Linear: DecomposedLinear, nn.Conv2d: DecomposedConv2d}


@torch.no_grad()
def decompose_(module: nn.Module, psi_factor: float) -> int:
    """Turn every ``nn.Linear`` and ``nn.Conv2d`` of ``module`` into its decomposed twin in place, ``ψ = psi_factor·σ``
    (``σ`` the current weight); returns how many layers were decomposed.

    >>> layer = nn.Linear(2, 1)
    >>> decompose_(layer, 0.5), torch.equal(layer.psi, 0.5 * layer.weight)
    (1, True)
    """
    count = 0
    for layer in module.modules():
        twin = _DECOMPOSED.get(type(layer))
        if twin is not None:
            layer.__class__ = twin
            layer.register_parameter(PSI, nn.Parameter(psi_factor * layer.weight.detach().clone()))
            count += 1
    return count


def bank_named_parameters(bank) -> list[tuple[str, nn.Parameter]]:
    """A client bank's parameters with template names (a StackedBank's stacked ``[S, ...]`` ones, a SequentialBank's
    per slot)."""
    if hasattr(bank, "stacked_params"):
        return list(zip(bank.param_names, bank.stacked_params))
    return list(bank.named_parameters())


def is_psi(name: str) -> bool:
    """A decomposed layer's ``ψ`` (by parameter name)."""
    return name == PSI or name.endswith("." + PSI)


def agreement_labels(votes: torch.Tensor, num_classes: int) -> torch.Tensor:
    """The most voted class of each row (ties: the lowest index): ``votes`` ``[V, B]`` class indices (the local
    model's argmax and its helpers'), returns ``[B]``.

    >>> agreement_labels(torch.tensor([[0, 1, 2], [3, 1, 1], [3, 2, 0]]), 4).tolist()
    [3, 1, 0]
    """
    counts = F.one_hot(votes, num_classes).sum(dim=0)  # [B, N]
    return counts.argmax(dim=1)  # argmax returns the first maximum: the lowest index


def consistency_rows(
    strong_logits: torch.Tensor, local_log_probs: torch.Tensor, helper_probs: torch.Tensor | None, labels, mask
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row ``[B]``: ``CE(ŷ, p_θ(π(u)))·mask`` and ``(1/H)·Σ_h KL(p_h(u) ‖ p_θ(u))`` (0 without helpers) from the
    strong view's logits ``[B, N]``, the local model's log-probabilities on ``u`` ``[B, N]`` and the helpers'
    probabilities ``[H, B, N]``."""
    ce = F.cross_entropy(strong_logits, labels, reduction="none") * mask.to(strong_logits.dtype)
    if helper_probs is None or len(helper_probs) == 0:
        return ce, torch.zeros_like(ce)
    kl = (helper_probs * (helper_probs.clamp_min(1e-12).log() - local_log_probs[None])).sum(dim=2)  # [H, B]
    return ce, kl.mean(dim=0)


def per_client_consistency(
    ce: torch.Tensor, kl: torch.Tensor, owner: torch.Tensor, mask: torch.Tensor, sizes: torch.Tensor, mask_kl: bool
) -> torch.Tensor:
    """``Σ_k [mean of CE over k's confident rows + mean of KL over k's rows]`` (``mask_kl``: KL over the confident rows
    too); ``ce`` (already masked), ``kl``, ``owner``, ``mask`` ``[B]``, ``sizes`` ``[S]`` rows per client. A client
    without a confident row adds 0 for the masked terms.

    >>> per_client_consistency(torch.tensor([2.0, 0.0, 4.0]), torch.tensor([1.0, 3.0, 5.0]), torch.tensor([0, 0, 1]),
    ...                        torch.tensor([True, False, True]), torch.tensor([2, 1]), False).item()
    13.0
    """
    clients = len(sizes)
    confident = torch.bincount(owner[mask], minlength=clients).clamp(min=1).to(ce.dtype)
    kl_rows = confident if mask_kl else sizes.clamp(min=1).to(kl.dtype)
    kl = kl * mask.to(kl.dtype) if mask_kl else kl
    ce_sum = torch.zeros(clients, dtype=ce.dtype, device=ce.device).index_add_(0, owner, ce)
    kl_sum = torch.zeros(clients, dtype=kl.dtype, device=kl.device).index_add_(0, owner, kl)
    return (ce_sum / confident + kl_sum / kl_rows).sum()


def per_row_consistency(
    ce: torch.Tensor, kl: torch.Tensor, owner: torch.Tensor, mask: torch.Tensor, sizes: torch.Tensor, mask_kl: bool
) -> torch.Tensor:
    """:func:`per_client_consistency` as rows ``[B]`` whose per-client means (over each client's ``B_k`` rows) sum to
    it: a row's CE scaled by ``B_k / confident_k`` and its KL by ``B_k / kl_rows_k``, what the FL step
    (:func:`~lightning_sfl.runtime.iteration.full_model_iteration`) averages.

    >>> ce, kl, owner = torch.tensor([2.0, 0.0, 4.0]), torch.tensor([1.0, 3.0, 5.0]), torch.tensor([0, 0, 1])
    >>> rows = per_row_consistency(ce, kl, owner, torch.tensor([True, False, True]), torch.tensor([2, 1]), False)
    >>> rows.tolist(), float(rows[:2].mean() + rows[2:].mean())
    ([5.0, 3.0, 9.0], 13.0)
    """
    clients = len(sizes)
    confident = torch.bincount(owner[mask], minlength=clients).clamp(min=1).to(ce.dtype)
    kl_rows = confident if mask_kl else sizes.clamp(min=1).to(kl.dtype)
    kl = kl * mask.to(kl.dtype) if mask_kl else kl
    rows_k = sizes.clamp(min=1).to(ce.dtype)
    return ce * (rows_k / confident)[owner] + kl * (rows_k / kl_rows)[owner]


def nearest_helpers(embeddings: torch.Tensor, known: torch.Tensor, client: int, count: int) -> list[int]:
    """The ``count`` clients nearest to ``client`` by the Euclidean distance of their embeddings ``[K, N]`` among the
    ``known`` ones ``[K]`` (bool), ``client`` itself excluded (ties: the lower id); ``[]`` if ``client`` is unknown.

    >>> e = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.1, 0.0], [5.0, 5.0]])
    >>> nearest_helpers(e, torch.tensor([True, True, True, False]), 0, 2)
    [2, 1]
    """
    if not bool(known[client]):
        return []
    candidates = torch.nonzero(known, as_tuple=True)[0]
    candidates = candidates[candidates != client]
    if not len(candidates):
        return []
    distances = (embeddings[candidates] - embeddings[client]).norm(dim=1)
    order = torch.argsort(distances, stable=True)[:count]
    return candidates[order].tolist()


def probe_image(input_shape, seed: int = 0) -> torch.Tensor:
    """The fixed random image models are embedded on ``[1, C, H, W]``: normal(125, 125) clipped to [0, 255], /255."""
    g = torch.Generator().manual_seed(seed)
    return ((125 + 125 * torch.randn(1, *input_shape, generator=g)).clamp(0, 255) / 255).to(torch.get_default_dtype())


@register("fedmatch", family="semi")
class FedMatch(SemiSupervised):
    """FedMatch (see the module docstring): decomposed parameters, inter-client consistency with helpers.

    Args:
        psi_factor: ``ψ`` at the start, a multiple of ``σ`` (the code's 0.2).
        supervised_weight: ``λ_s`` of the server's loss (the code: 10, with lr 1e-3 and no momentum).
        consistency_weight: ``λ_ICC``, the weight of ``Φ``.
        l2_weight: ``λ_L2`` of ``‖σ − ψ‖²``.
        l1_weight: ``λ_L1`` of ``‖ψ‖₁``.
        helpers: ``H``, helpers per client.
        helper_interval: helpers are sent in rounds ``h`` with ``(h + 1) % helper_interval == 0`` (the code: 10).
        mask_kl: the KL term only on confident rows (the code) instead of every row (the equation).
        ema: fixed at 0 (no EMA teacher): another value is refused, as is ``client_teacher`` (the clients hold no
            teacher).
        **kwargs: see :class:`~lightning_sfl.algorithms.semi_supervised.SemiSupervised`.
    """

    averages_uploaded_models = False  # ψ and σ are uploaded and averaged by its own rule

    has_server_half: ClassVar[bool] = False

    def __init__(
        self,
        psi_factor: float = 0.2,
        supervised_weight: float = 1.0,
        consistency_weight: float = 1e-2,
        l2_weight: float = 10.0,
        l1_weight: float = 1e-5,
        helpers: int = 2,
        helper_interval: int = 1,
        mask_kl: bool = False,
        ema: float = 0.0,
        **kwargs,
    ) -> None:
        weights = dict(supervised_weight=supervised_weight, consistency_weight=consistency_weight)
        weights.update(l2_weight=l2_weight, l1_weight=l1_weight, psi_factor=psi_factor)
        for name, value in weights.items():
            if not value >= 0:
                raise ConfigError(f"{name}={value} must be >= 0")
        for name, value, low in (("helpers", helpers, 0), ("helper_interval", helper_interval, 1)):
            if int(value) != value or value < low:
                raise ConfigError(f"{name}={value!r} must be a whole number >= {low}")
        super().__init__(ema=ema, **kwargs)
        self.psi_factor, self.supervised_weight = float(psi_factor), float(supervised_weight)
        self.consistency_weight, self.l2_weight, self.l1_weight = map(float, (consistency_weight, l2_weight, l1_weight))
        self.helpers, self.helper_interval, self.mask_kl = int(helpers), int(helper_interval), bool(mask_kl)
        if decompose_(self.client.net, self.psi_factor) == 0:
            raise ConfigError(f"arch={self.model_source.label!r} has no linear or convolution layer to decompose")
        self.register_buffer("probe", probe_image(self.hparams.input_shape), persistent=False)
        #: name and shape of each ψ tensor, in the order of ``_psi_vector`` (a helper's ψ_h is split back by it)
        self._psi_layout = [(n, p.shape) for n, p in self.client.net.named_parameters() if is_psi(n)]
        psi_size = sum(shape.numel() for _, shape in self._psi_layout)
        clients = lambda: len(self.client_stats.sizes)  # noqa: E731 (known when a fit starts)
        # the server's store (checkpointed): each client's latest ψ_k and embedding (per-client stores: rows for the
        # clients that have uploaded), and whether it has one ([K] bool)
        self.add_client_state("client_psi", lambda: torch.zeros(psi_size))  # [K, |ψ|]
        self.add_client_state("client_embedding", lambda: torch.zeros(self.num_classes))  # [K, N]
        self.add_state("client_known", lambda: torch.zeros(clients(), dtype=torch.bool))
        self._phase = "supervised"
        self._round, self._round_slots = 0, {}  # the round's slot -> client
        self._slot_helpers: dict[int, list[int]] = {}

    @classmethod
    @override
    def unused_options(cls) -> dict[str, str]:
        """``ema`` and ``client_teacher``: FedMatch has no EMA teacher (its pseudo-labels are its helpers' and its
        own)."""
        teacher = "FedMatch has no EMA teacher (its pseudo-labels are the agreement of its helpers and its own)"
        return {**super().unused_options(), "ema": teacher, "client_teacher": teacher}

    # ------------------------------------------------------------------ the decomposition
    @staticmethod
    def _psi_vector(module) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for n, p in module.named_parameters() if is_psi(n)])

    def psi_bytes(self) -> int:
        """Bytes of ``ψ`` (an upload, or one helper)."""
        return sum(tensor_bytes(p) for n, p in self.client.net.named_parameters() if is_psi(n))

    @override
    def client_models(self) -> dict[str, nn.Module]:
        """The clients hold the whole decomposed model (no teacher)."""
        return {"client": self.client.net}

    @torch.no_grad()
    @override
    def adjust_gradients(self) -> None:
        """The server learns ``σ`` only, the clients ``ψ`` only: the other part's gradients are dropped (the optimiser
        skips a parameter without one), then ``grad_clip``."""
        if self._phase == "supervised":
            frozen = [p for n, p in self.client.net.named_parameters() if is_psi(n)]
        else:
            frozen = [p for n, p in bank_named_parameters(self.bank) if not is_psi(n)]
        for p in frozen:
            p.grad = None
        super().adjust_gradients()

    # ------------------------------------------------------------------ A. server
    @override
    def supervised_step(self, step: Step) -> None:
        """``λ_s·CE`` into ``σ`` (``ψ`` frozen)."""
        self._phase = "supervised"
        super().supervised_step(step)

    @override
    def supervised_loss_scale(self) -> float:
        return self.supervised_weight

    @override
    def _teacher_pairs(self) -> list:
        return []  # no EMA teacher: the evaluated model is the global σ + ψ

    # ------------------------------------------------------------------ B. download with helpers
    @override
    def download(self) -> None:
        """The round's clients download ``σ + ψ`` and, in helper rounds, the ``ψ`` of their ``H`` nearest clients."""
        super().download()
        helper_round = self.helpers > 0 and (self._round + 1) % self.helper_interval == 0
        self._slot_helpers = {}
        for slot, client in self._round_slots.items():
            known = self.client_known
            chosen = nearest_helpers(self.client_embedding, known, client, self.helpers) if helper_round else []
            self._slot_helpers[slot] = chosen
            if chosen:
                self.ledger.add_slot("down", "helpers", slot, len(chosen) * self.psi_bytes())

    def _helper_probs(self, x: torch.Tensor, step: Step) -> list[torch.Tensor | None]:
        """Each slot's helpers' probabilities on its rows ``[H, b_k, N]`` (``None``: no helpers)."""
        out = []
        sizes = [shape.numel() for _, shape in self._psi_layout]
        net, was_training = self.client.net, self.client.net.training
        net.eval()  # a helper is evaluated, not trained: BatchNorm statistics (σ's) stay as they are
        for chunk, slot in zip(x.split(step.local_sizes.tolist()), step.slots_list()):
            helpers = self._slot_helpers.get(slot, [])
            if not helpers:
                out.append(None)
                continue
            probs = []
            for h in helpers:
                pieces = torch.split(self.client_psi[h], sizes)
                psi = {n: v.view(shape).to(chunk.dtype) for (n, shape), v in zip(self._psi_layout, pieces)}
                logits = torch.func.functional_call(net, psi, (chunk,))  # σ (the round's) + ψ_h
                probs.append(logits.softmax(dim=1))
            out.append(torch.stack(probs))
        net.train(was_training)
        return out

    # ------------------------------------------------------------------ C. clients
    @override
    def unlabelled_step(self, step: Step) -> dict[str, torch.Tensor]:
        """One step of the round's clients on ``L_u(ψ)`` (module docstring), the FL step
        (:func:`~lightning_sfl.runtime.iteration.full_model_iteration`): the strong view's logits, the rows of
        ``λ_ICC·Φ`` (:meth:`consistency`), the regulariser as the clients' whole term (:meth:`client_regulariser`)."""
        self._phase = "unlabelled"
        if not self._slots_ready:
            self._round, self._round_slots = step.round, dict(zip(step.slots_list(), step.clients.tolist()))
            self.download()
            self._slots_ready = True
        seen: dict[str, torch.Tensor] = {}

        def forward(step: Step) -> tuple[None, torch.Tensor]:
            strong = strong_view(step.x, self.shift, self._generator(step))
            seen["logits"] = self.bank(step.x, step.local_sizes, step.slots)  # p_θ(u) of each client's own model
            return None, self.bank(strong, step.local_sizes, step.slots)

        def rows(strong_logits: torch.Tensor, step: Step) -> torch.Tensor:
            seen.update(self.consistency(step, seen["logits"], strong_logits))
            return seen["rows"]

        loss = full_model_iteration(self, step, forward, rows)
        labels, mask, kl = seen["labels"], seen["mask"], seen["kl"]
        batch = len(mask)
        self.log("train/client_loss", loss.detach(), on_step=False, on_epoch=True, batch_size=batch)
        self.log("train/mask_rate", mask.float().mean(), on_step=False, on_epoch=True, batch_size=batch)
        kl_mean = client_means(kl.detach(), step.owner, len(step.clients)).mean()
        self.log("train/helper_kl", kl_mean, on_step=False, on_epoch=True, batch_size=batch)
        return {"pseudo_labels": labels, "mask": mask}  # for PseudoLabelQuality

    def consistency(self, step: Step, logits: torch.Tensor, strong_logits: torch.Tensor) -> dict[str, torch.Tensor]:
        """From each client's logits on its rows ``u`` and on their strong view (``[B, N]`` each): the agreement
        pseudo-labels with its helpers', the confident ``mask``, the rows' KL to the helpers and the ``rows`` ``[B]``
        whose per-client means sum to ``λ_ICC·Φ`` (:func:`per_row_consistency`)."""
        log_probs = logits.log_softmax(dim=1)
        confidence, local = log_probs.detach().exp().max(dim=1)
        mask = confidence >= self.threshold
        with torch.no_grad():
            per_slot = self._helper_probs(step.x, step)
        labels, ce, kl = [], [], []
        starts = torch.cumsum(step.local_sizes, 0) - step.local_sizes
        for i, helper in enumerate(per_slot):
            rows = slice(int(starts[i]), int(starts[i] + step.local_sizes[i]))
            votes = local[rows][None] if helper is None else torch.cat([local[rows][None], helper.argmax(dim=2)])
            labels.append(agreement_labels(votes, self.num_classes))
            c, k = consistency_rows(strong_logits[rows], log_probs[rows], helper, labels[-1], mask[rows])
            ce.append(c)
            kl.append(k)
        labels, ce, kl = torch.cat(labels), torch.cat(ce), torch.cat(kl)
        rows = per_row_consistency(ce, kl, step.owner, mask, step.local_sizes, self.mask_kl)
        return {"labels": labels, "mask": mask, "kl": kl, "rows": self.consistency_weight * rows}

    @override
    def client_regulariser(self, step: Step, outputs: torch.Tensor, features=None) -> torch.Tensor:
        """``Σ_k λ_L2·‖σ − ψ_k‖² + λ_L1·‖ψ_k‖₁`` (``_regulariser``)."""
        return self._regulariser(step)

    def _regulariser(self, step: Step) -> torch.Tensor:
        """``Σ_k λ_L2·‖σ − ψ_k‖² + λ_L1·‖ψ_k‖₁`` over the step's slots and the decomposed weights."""
        total = None
        for slot in step.slots_list():
            params = dict(self.bank.slots[slot].named_parameters())
            for name, psi in params.items():
                if not is_psi(name):
                    continue
                sigma = params[name[: -len(PSI)] + "weight"].detach()
                term = self.l2_weight * (sigma - psi).pow(2).sum() + self.l1_weight * psi.abs().sum()
                total = term if total is None else total + term
        return total

    # ------------------------------------------------------------------ D. aggregation
    @torch.no_grad()
    @override
    def aggregate(self, step: Step) -> None:
        """The server keeps each client's ``ψ_k`` and embedding, then ``ψ`` ← the unweighted mean of the ``ψ_k``
        (``σ`` is the same in every slot: the mean leaves it as it is); only ``ψ_k`` travels up."""
        was_training = self.bank.training
        self.bank.eval()  # the embedding evaluates each client's model: its BatchNorm statistics stay
        for slot, client in zip(step.slots_list(), step.clients.tolist()):
            model = self.bank.slots[slot]
            psi = self._psi_vector(model)
            self.client_psi[client] = psi.to(self.client_psi.dtype)
            probe = self.probe.to(psi.dtype)
            self.client_embedding[client] = model(probe).softmax(dim=1)[0].to(self.client_embedding.dtype)
            self.client_known[client] = True
        self.bank.train(was_training)
        weights = torch.ones(len(step.clients), dtype=torch.float64)
        self.bank.aggregate_into(self.client.net, weights, step.slots)
        self.ledger.add("up", "psi", self.psi_bytes(), step.slots)

    # ------------------------------------------------------------------ evaluation: the global σ + ψ
    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.server(self.client(x))
