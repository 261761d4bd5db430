"""Client-selection policies: which ``S`` of the ``K`` clients take part in a round.

A policy (a :class:`ClientSelection`) is called once per round by the method's schedule with the clients' label
counts ``[K, N]``, the number ``S`` to select, a generator seeded by ``(seed, round)`` and the round index; it
returns ``S`` distinct client ids. Policies that keep state across rounds expose ``state_dict``/``load_state_dict``
(part of the schedule's state, saved in checkpoints with the federation's). A method takes its policy as
``client_selection`` (an object, a class with its init args on the CLI, or a short name of ``SELECTIONS``), resolved
in one place, :func:`resolve_selection`.

Policies (short names of ``SELECTIONS``):

* ``uniform``: :class:`UniformSelection`, uniformly random clients (FedAvg, SCALA).
* ``fedcbs``: :class:`FedCBSSelection`, Fed-CBS class-balanced sampling (Zhang et al., ICML 2023).
* ``class_balanced``: :class:`ClassBalancedSelection`, a greedy label-balancing selection standing in for the
  client selection of CS-SFL (Xie et al., IEEE TWC 2025); see its docstring for what is our reading.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence

import torch
from typing_extensions import override

from lightning_sfl.errors import ConfigError
from lightning_sfl.known import known_class, register_component_kind


class ClientSelection:
    """Base of every client-selection policy (a configurable object: ``--model.client_selection FedCBSSelection
    --model.client_selection.lam 5`` on the command line).

    A policy is called once per round (by the schedule) and returns ``S`` distinct client ids. Policies that keep
    state across rounds override ``state_dict``/``load_state_dict`` (checkpointed with the schedule). Constructor
    arguments are kept as attributes of the same name, so :meth:`config` can describe the policy.
    """

    def __call__(self, label_counts: torch.Tensor, num_select: int, generator: torch.Generator, round_idx: int):
        """``S = num_select`` client ids given the clients' label counts ``[K, N]`` and the round's generator."""
        raise NotImplementedError

    @override
    def state_dict(self) -> dict:
        return {}

    @override
    def load_state_dict(self, state: dict) -> None:
        pass

    def config(self) -> dict:
        """``{"class_path": ..., "init_args": {...}}``: the policy as a config (what hyperparameters record)."""
        names = [n for n in inspect.signature(type(self)).parameters if n not in ("self", "args", "kwargs")]
        cls = type(self)
        return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": {n: getattr(self, n) for n in names}}


class UniformSelection(ClientSelection):
    """Uniformly random clients without replacement (FedAvg's and the SCALA paper's choice)."""

    def __call__(self, label_counts: torch.Tensor, num_select: int, generator: torch.Generator, round_idx: int):
        return torch.randperm(len(label_counts), generator=generator)[:num_select].sort().values


# ----------------------------------------------------------------------------------------------------- helpers
def qcid(label_counts_of_group) -> float:
    """Quadratic Class-Imbalance Degree of a group of clients (Fed-CBS, Zhang et al. 2023, Def. of QCID).

    ``QCID(M) = Σ_c (Σ_{k∈M} n_{k,c} / Σ_{k∈M} n_k − 1/N)²``: the squared Euclidean distance between the pooled
    label distribution of the clients in ``M`` and the uniform distribution over the ``N`` classes. It is 0 for a
    perfectly balanced group and at most ``1 − 1/N`` (every sample in one class). Equivalently
    ``Σ_c p_c² − 1/N`` with ``p`` the pooled distribution.

    Args:
        label_counts_of_group: ``[M, N]`` samples of each class held by each client of the group (a single
            client's ``[N]`` counts are accepted too).

    Returns:
        The QCID as a Python float.

    Raises:
        ValueError: if the counts are not 1-D/2-D, are negative, or the group holds no sample.

    >>> qcid([[2, 0], [0, 2]])  # pooled [2, 2]: balanced
    0.0
    >>> qcid([[4, 0]])  # one class only: (1 - 1/2)² + (0 - 1/2)²
    0.5
    >>> qcid([[3, 1], [0, 0]])  # a client without data changes nothing: 2·(3/4 - 1/2)²
    0.125
    """
    counts = torch.as_tensor(label_counts_of_group, dtype=torch.float64)
    if counts.ndim == 1:
        counts = counts[None]
    if counts.ndim != 2 or counts.shape[1] < 1:
        raise ConfigError(f"label counts of a group must be [M, N], got shape {tuple(counts.shape)}")
    if (counts < 0).any():
        raise ConfigError("label counts must be >= 0")
    pooled = counts.sum(0)
    if pooled.sum() <= 0:
        raise ConfigError("the group holds no sample: its QCID is undefined")
    return float(_pooled_qcid(pooled))


def _pooled_qcid(pooled: torch.Tensor) -> torch.Tensor:
    """QCID of pooled class counts ``[..., N]`` (float64) → ``[...]``; a group without samples gets the worst
    value ``1 − 1/N``."""
    n = pooled.shape[-1]
    total = pooled.sum(-1, keepdim=True)
    dist = pooled / total.clamp_min(1e-300)
    value = ((dist - 1.0 / n) ** 2).sum(-1)
    return torch.where(total.squeeze(-1) > 0, value, torch.full_like(value, 1.0 - 1.0 / n))


def _pooled_kl_to_uniform(pooled: torch.Tensor) -> torch.Tensor:
    """``KL(p ‖ U) = Σ_c p_c log(N p_c)`` of pooled class counts ``[..., N]`` → ``[...]``; ``inf`` without samples."""
    n = pooled.shape[-1]
    total = pooled.sum(-1, keepdim=True)
    dist = pooled / total.clamp_min(1e-300)
    value = torch.xlogy(dist, dist * n).sum(-1)
    return torch.where(total.squeeze(-1) > 0, value, torch.full_like(value, math.inf))


#: Elements of ``[K, N]`` scored at a time (:func:`_blocked`): a block's temporaries stay in the caches, so the cost
#: of a pick per client does not grow with ``K`` (at 100,000 clients and 10 classes, one ``[K, N]`` temporary is 8 MB).
_BLOCK_ELEMENTS = 1 << 16


def _blocked(
    divergence: Callable[[torch.Tensor], torch.Tensor],
    pooled: torch.Tensor,
    counts: torch.Tensor,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """``divergence(pooled + counts[rows])`` ``[len(rows)]`` (all rows: ``rows=None``), a block of clients at a time:
    the same values as at once, each row's with the same operations."""
    n = len(counts) if rows is None else len(rows)
    block = max(1, _BLOCK_ELEMENTS // max(1, counts.shape[1]))
    out = torch.empty(n, dtype=torch.float64)
    for start in range(0, n, block):
        part = counts[start : start + block] if rows is None else counts[rows[start : start + block]]
        out[start : start + block] = divergence(pooled + part)
    return out


def _check_request(label_counts: torch.Tensor, num_select: int) -> torch.Tensor:
    counts = torch.as_tensor(label_counts)
    if counts.ndim != 2:
        raise ConfigError(f"label_counts must be [K, N], got shape {tuple(counts.shape)}")
    if not 1 <= num_select <= len(counts):
        raise ConfigError(f"num_select={num_select} must be in [1, {len(counts)}] (the number of clients)")
    return counts.to(torch.float64)


# ----------------------------------------------------------------------------------------------------- Fed-CBS
class FedCBSSelection(ClientSelection):
    """Fed-CBS: Federated Class-Balanced Sampling (Zhang et al., "Fed-CBS: A heterogeneity-aware client sampling
    mechanism for federated learning via class-imbalance reduction", ICML 2023, arXiv:2209.15245).

    Fed-CBS wants groups ``M`` drawn with probability ``∝ 1 / QCID(M)^β`` (its probability model of the
    balanced group, QCID as in :func:`qcid`) and gets there by drawing the ``S`` clients of a round one at a
    time with the three sequential sampling rules below (the paper's first-client, second-client and
    m-th-client equations; we could not read the PDF to quote its equation numbers, so the rules are named by
    role; their form was cross-checked against three independent public re-implementations):

    * first client (the rule with the bandit term)::

        P(c_1 = n) ∝ 1 / QCID({n})^{β_1} + λ · sqrt(3 ln t / (2 T_n))

      where ``t`` is the round and ``T_n`` counts how often client ``n`` was selected before (a UCB exploration
      bonus so that rarely drawn clients still get their turn);
    * second client::

        P(c_2 = n | c_1 = n_1) ∝ [1 / QCID({n_1, n})^{β_2}] / [1 / QCID({n_1})^{β_1} + λ · sqrt(3 ln t / (2 T_{n_1}))]

    * ``m``-th client, ``3 ≤ m ≤ S``::

        P(c_m = n | c_1..c_{m-1}) ∝ QCID({n_1..n_{m-1}})^{β_{m-1}} / QCID({n_1..n_{m-1}, n})^{β_m}

    The product of these conditionals telescopes to ``∝ 1 / QCID(M)^{β_S}`` (up to the per-step normalisers),
    which is the point of the construction. The denominators of the second and later rules depend only on the
    clients already drawn, so, normalised over the candidates, they cancel: the ``m ≥ 2`` pick is
    ``∝ QCID(selected ∪ {n})^{-β_m}``. That is what :meth:`next_probabilities` computes (in log space, so large
    ``β_m`` neither overflows nor underflows).

    Defaults: ``β_m = m`` (``beta_start=1, beta_step=1``) and ``λ = 10``, the values of the public
    re-implementations we checked (one code release instead ramps ``β`` linearly from 1 to 10 over the ``S``
    picks; pass ``beta_step=9/(S-1)`` for that). Details left to the code, chosen as those implementations do:
    ``t = round_idx + 1`` (so the bonus is 0 in the first round, ``ln 1 = 0``) and
    ``T_n = 1 + (times n was selected)`` (so a never-drawn client has a finite bonus); a QCID below ``eps``
    (a perfectly balanced group) is floored at ``eps`` so all such groups tie instead of dividing by zero.
    Left out: the homomorphic-encryption protocol by which the server obtains the QCID matrix without seeing the
    label counts (here the data module hands the counts over in the clear), and the re-drawing/best-of-several
    heuristics some code releases add on top of the paper's sampler.

    State: the selection counts ``T`` and the clients drawn for every round so far. A round that was already
    drawn is answered from that record (the data module may ask for a round more than once, e.g. when the
    epoch is re-run after a mid-epoch resume) so the counts are never incremented twice; both are in
    :meth:`state_dict`, so a resumed run draws the same clients as an uninterrupted one.

    Args:
        lam: ``λ``, weight of the exploration bonus of the first pick (``0`` turns it off).
        beta_start: ``β_1``.
        beta_step: ``β_m = beta_start + (m − 1)·beta_step``.
        eps: floor on QCID.
    """

    def __init__(self, lam: float = 10.0, beta_start: float = 1.0, beta_step: float = 1.0, eps: float = 1e-12):
        if lam < 0:
            raise ConfigError(f"lam={lam} must be >= 0")
        if not eps > 0:
            raise ConfigError(f"eps={eps} must be > 0")
        self.lam, self.beta_start, self.beta_step, self.eps = float(lam), float(beta_start), float(beta_step), eps
        self.counts: torch.Tensor | None = None  # [K] int64, times each client was selected
        self.history: dict[int, list[int]] = {}  # round -> clients drawn, in draw order

    def beta(self, m: int) -> float:
        """``β_m`` for the ``m``-th pick (1-based)."""
        return self.beta_start + (m - 1) * self.beta_step

    def exploration(self, round_idx: int, num_clients: int) -> torch.Tensor:
        """``λ · sqrt(3 ln t / (2 T_n))`` for every client, ``[K]`` float64, with ``t = round_idx + 1`` and
        ``T_n = 1 + times selected``."""
        times = self._counts(num_clients).to(torch.float64) + 1.0
        return self.lam * torch.sqrt(3.0 * math.log(round_idx + 1) / (2.0 * times))

    def next_probabilities(self, label_counts: torch.Tensor, selected: Sequence[int], round_idx: int) -> torch.Tensor:
        """Probability of each client being the next pick given the clients ``selected`` so far, ``[K]`` float64
        (0 for the selected ones). The ``m = len(selected) + 1``-th rule of the class docstring, with the current
        selection counts for the exploration bonus."""
        counts = _check_request(label_counts, 1)
        k = len(counts)
        selected = [int(s) for s in selected]
        if len(set(selected)) != len(selected) or any(not 0 <= s < k for s in selected):
            raise ConfigError(f"selected={selected} must be distinct client ids in [0, {k})")
        if len(selected) >= k:
            raise ConfigError("every client is already selected")
        m = len(selected) + 1
        log_q = _blocked(_pooled_qcid, counts[selected].sum(0), counts)  # the group with each candidate added, [K]
        log_q = log_q.clamp_min(self.eps).log()
        log_w = -self.beta(m) * log_q
        if m == 1:
            log_w = torch.logaddexp(log_w, self.exploration(round_idx, k).log())
        log_w[selected] = -math.inf
        return torch.softmax(log_w, dim=0)

    def __call__(self, label_counts: torch.Tensor, num_select: int, generator: torch.Generator, round_idx: int):
        counts = _check_request(label_counts, num_select)
        round_idx = int(round_idx)
        drawn = self.history.pop(round_idx, None)
        if drawn is not None:
            if len(drawn) == num_select and max(drawn) < len(counts):
                self.history[round_idx] = drawn
                return torch.tensor(sorted(drawn), dtype=torch.long)
            self._counts(len(counts))[drawn] -= 1  # asked again with another S: forget that draw, redraw
        selected: list[int] = []
        for _ in range(num_select):
            p = self.next_probabilities(counts, selected, round_idx)
            selected.append(int(torch.multinomial(p, 1, generator=generator)))
        self._counts(len(counts))[selected] += 1
        self.history[round_idx] = selected
        return torch.tensor(sorted(selected), dtype=torch.long)

    def _counts(self, num_clients: int) -> torch.Tensor:
        if self.counts is None:
            self.counts = torch.zeros(num_clients, dtype=torch.long)
        if len(self.counts) != num_clients:
            raise ConfigError(f"the policy has selection counts for {len(self.counts)} clients, not {num_clients}")
        return self.counts

    @override
    def state_dict(self) -> dict:
        return {
            "counts": None if self.counts is None else self.counts.clone(),
            "history": {r: list(c) for r, c in self.history.items()},
        }

    @override
    def load_state_dict(self, state: dict) -> None:
        counts = state.get("counts")
        self.counts = None if counts is None else torch.as_tensor(counts, dtype=torch.long).clone()
        self.history = {int(r): [int(k) for k in c] for r, c in state.get("history", {}).items()}


# ----------------------------------------------------------------------------------------------------- CS-SFL
class ClassBalancedSelection(ClientSelection):
    """Class-balanced client selection for CS-SFL (Xie et al., "Tackling class imbalance and client heterogeneity
    for split federated learning in wireless networks", IEEE TWC 2025) — our reading, not the paper's algorithm.

    We could not obtain the paper's text, so its selection rule is unverified. What is known is its aim: pick
    clients whose pooled label distribution is class balanced. This policy does that greedily:

    1. start from a client drawn uniformly at random (from the round's generator);
    2. repeatedly add the client minimising ``D(p_{M ∪ {k}} ‖ U)``, the divergence between the pooled label
       distribution of the group with ``k`` added (``p_c = Σ_{j∈M∪{k}} n_{j,c} / Σ_{j∈M∪{k}} n_j``) and the
       uniform distribution ``U``, ties (within ``1e-12``) broken uniformly at random with the generator;
       ``D`` is ``KL(p ‖ U) = Σ_c p_c log(N p_c)`` (default) or QCID (``divergence="qcid"``).

    What the paper's full method adds and we leave out: the wireless side (channel- and energy-aware
    scheduling and bandwidth/computation resource allocation that trade balance against latency) and
    any client-heterogeneity terms of its objective. Stateless and deterministic given the generator.

    Args:
        divergence: ``"kl"`` or ``"qcid"``.
    """

    #: ``divergence`` -> ``D`` of pooled class counts ``[..., N]`` (``KL(p ‖ U)``, QCID).
    #:
    #: :meta hide-value:
    DIVERGENCES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "kl": _pooled_kl_to_uniform,
        "qcid": _pooled_qcid,
    }

    def __init__(self, divergence: str = "kl", tie_tol: float = 1e-12):
        if divergence not in self.DIVERGENCES:
            raise ConfigError(f"divergence={divergence!r} is not one of: {', '.join(self.DIVERGENCES)}")
        self.divergence, self.tie_tol = divergence, float(tie_tol)

    def __call__(self, label_counts: torch.Tensor, num_select: int, generator: torch.Generator, round_idx: int):
        counts = _check_request(label_counts, num_select)
        k = len(counts)
        div = self.DIVERGENCES[self.divergence]
        first = int(torch.randint(k, (1,), generator=generator))
        selected, pooled = [first], counts[first].clone()
        available = torch.ones(k, dtype=torch.bool)
        available[first] = False
        while len(selected) < num_select:
            candidates = available.nonzero().squeeze(1)
            scores = _blocked(div, pooled, counts, candidates)
            best = scores.min()
            ties = candidates[scores <= best + self.tie_tol]
            pick = int(ties[torch.randint(len(ties), (1,), generator=generator)])
            selected.append(pick)
            pooled += counts[pick]
            available[pick] = False
        return torch.tensor(sorted(selected), dtype=torch.long)


#: Client-selection policy short name -> class (``--model.client_selection``).
SELECTIONS: dict[str, type[ClientSelection]] = {
    "uniform": UniformSelection,
    "fedcbs": FedCBSSelection,
    "class_balanced": ClassBalancedSelection,
}


#: Where the policies were defined before (checkpoints record a policy's class path).
MOVED = {"lightning_sfl.data.selection": __name__}
register_component_kind("client_selection", ClientSelection, SELECTIONS, MOVED)  # what a checkpoint may name


def resolve_selection(value, default: type[ClientSelection] = UniformSelection) -> ClientSelection:
    """The one place a ``client_selection`` setting becomes a policy object.

    ``value``: a :class:`ClientSelection` (used as is), ``None`` (``default()``: the method's own policy), a short
    name of :data:`SELECTIONS` or a config ``{"class_path": ..., "init_args": {...}}`` (how hyperparameters and
    configs record a policy).
    """
    if value is None:
        return default()
    if isinstance(value, ClientSelection):
        return value
    if isinstance(value, str) and value in SELECTIONS:
        return SELECTIONS[value]()
    if isinstance(value, dict) and "class_path" in value:  # (a checkpoint's: never imported on its word)
        cls = known_class(str(value["class_path"]), ClientSelection, moved=MOVED)
        if cls is not None:
            return cls(**(value.get("init_args") or {}))
    raise ConfigError(
        f"client_selection={value!r} is not one of: {', '.join(SELECTIONS)} (or a ClientSelection class, e.g. "
        "--model.client_selection FedCBSSelection --model.client_selection.lam 5)"
    )
