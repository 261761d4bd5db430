"""Client-selection policies: QCID, Fed-CBS sampling rules (hand-computed), class-balanced greedy selection,
determinism, checkpoint round-trips and the registry."""

from __future__ import annotations

import copy
import doctest
import math

import pytest
import torch

from lightning_sfl.loop import selection as selection_module
from lightning_sfl.loop.selection import (
    SELECTIONS,
    ClassBalancedSelection,
    ClientSelection,
    FedCBSSelection,
    UniformSelection,
    qcid,
    resolve_selection,
)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _skewed_counts(num_clients: int = 20, num_classes: int = 10, seed: int = 0) -> torch.Tensor:
    """Each client holds 2 random classes with 5..49 samples each (quantity label skew)."""
    g = _gen(seed)
    counts = torch.zeros(num_clients, num_classes, dtype=torch.long)
    for k in range(num_clients):
        classes = torch.randperm(num_classes, generator=g)[:2]
        counts[k, classes] = torch.randint(5, 50, (2,), generator=g)
    return counts


# ----------------------------------------------------------------------------------------------------- qcid
@pytest.mark.parametrize(
    "group, expected",
    [
        ([[2, 0], [0, 2]], 0.0),  # pooled [2, 2]
        ([[4, 0]], 0.5),  # (1 - 1/2)² + (0 - 1/2)²
        ([[4, 0], [0, 0]], 0.5),  # an empty client adds nothing
        ([[3, 1], [1, 1]], 1 / 18),  # pooled [4, 2] -> [2/3, 1/3]: 2·(1/6)²
        ([[1, 3], [6, 0]], 2 * (7 / 10 - 1 / 2) ** 2),  # pooled [7, 3]: weighted by sample counts, not per client
        ([[1, 1, 1]], 0.0),
        ([[3, 0, 0]], 2 / 3),  # worst case 1 - 1/N
        ([[2, 1, 0], [0, 1, 0]], 1 / 6),  # pooled [2, 2, 0] -> [1/2, 1/2, 0]: 2·(1/6)² + (1/3)²
        ([5, 5, 0, 10], (0.25 - 0.25) ** 2 * 2 + 0.25**2 + 0.25**2),  # a single client's [N] counts
    ],
)
def test_qcid_matches_hand_computation(group, expected):
    assert qcid(group) == pytest.approx(expected, abs=1e-15)
    assert qcid(torch.tensor(group)) == pytest.approx(expected, abs=1e-15)


def test_qcid_rejects_empty_or_negative_groups():
    with pytest.raises(ValueError, match="no sample"):
        qcid([[0, 0], [0, 0]])
    with pytest.raises(ValueError, match=">= 0"):
        qcid([[1, -1]])
    with pytest.raises(ValueError, match=r"\[M, N\]"):
        qcid(torch.zeros(2, 2, 2))


def test_module_doctests_pass():
    result = doctest.testmod(selection_module)
    assert result.attempted >= 3 and result.failed == 0


# ----------------------------------------------------------------------------------------------------- Fed-CBS
COUNTS_3 = torch.tensor([[3, 1], [1, 3], [2, 0]])  # single-client QCIDs: 1/8, 1/8, 1/2


def test_fedcbs_first_pick_without_exploration_is_inverse_qcid():
    # round 0: t = 1, ln t = 0, so P(c_1 = n) ∝ 1 / QCID({n})^{β_1}, β_1 = 1  ->  [8, 8, 2] / 18
    p = FedCBSSelection().next_probabilities(COUNTS_3, [], round_idx=0)
    torch.testing.assert_close(p, torch.tensor([4 / 9, 4 / 9, 1 / 9], dtype=torch.float64))


def test_fedcbs_first_pick_with_exploration_bonus():
    # round_idx 1 -> t = 2; client 0 was selected once before -> T = 1 + [1, 0, 0]; λ = 10
    policy = FedCBSSelection()
    policy.load_state_dict({"counts": torch.tensor([1, 0, 0]), "history": {0: [0]}})
    bonus = [10 * math.sqrt(3 * math.log(2) / (2 * t)) for t in (2, 1, 1)]
    w = torch.tensor([8 + bonus[0], 8 + bonus[1], 2 + bonus[2]], dtype=torch.float64)
    torch.testing.assert_close(policy.next_probabilities(COUNTS_3, [], round_idx=1), w / w.sum())
    # λ = 0 switches the bonus off
    policy0 = FedCBSSelection(lam=0.0)
    policy0.load_state_dict(policy.state_dict())
    torch.testing.assert_close(
        policy0.next_probabilities(COUNTS_3, [], round_idx=1), torch.tensor([4 / 9, 4 / 9, 1 / 9], dtype=torch.float64)
    )


COUNTS_4 = torch.tensor([[4, 0], [1, 3], [3, 1], [0, 2]])


def test_fedcbs_second_pick_is_inverse_qcid_squared_of_the_grown_group():
    # selected {0}: {0,1} -> [5,3]: 2·(1/8)² = 1/32; {0,2} -> [7,1]: 2·(3/8)² = 9/32; {0,3} -> [4,2]: 2·(1/6)² = 1/18
    # β_2 = 2, the exploration bonus only enters the first pick (its term in the denominator cancels)
    w = torch.tensor([0.0, 32.0**2, (32 / 9) ** 2, 18.0**2], dtype=torch.float64)
    expected = w / w.sum()
    policy = FedCBSSelection()
    torch.testing.assert_close(policy.next_probabilities(COUNTS_4, [0], round_idx=0), expected)
    policy.load_state_dict({"counts": torch.tensor([5, 0, 3, 1]), "history": {}})
    torch.testing.assert_close(policy.next_probabilities(COUNTS_4, [0], round_idx=7), expected)


def test_fedcbs_third_pick_uses_beta_3():
    # selected {1,2} (pooled [4,4]): + client 0 -> [8,4]: 1/18; + client 3 -> [4,6]: 2·(1/10)² = 1/50; β_3 = 3
    w = torch.tensor([18.0**3, 0.0, 0.0, 50.0**3], dtype=torch.float64)
    torch.testing.assert_close(FedCBSSelection().next_probabilities(COUNTS_4, [1, 2], round_idx=3), w / w.sum())
    # a custom β schedule: β_m = 2 + (m - 1)·0.5 -> β_3 = 3 as well; β_start=1, step=0 -> β_3 = 1
    torch.testing.assert_close(
        FedCBSSelection(beta_start=2.0, beta_step=0.5).next_probabilities(COUNTS_4, [1, 2], 3), w / w.sum()
    )
    w1 = torch.tensor([18.0, 0.0, 0.0, 50.0], dtype=torch.float64)
    torch.testing.assert_close(FedCBSSelection(beta_step=0.0).next_probabilities(COUNTS_4, [1, 2], 3), w1 / w1.sum())


def test_fedcbs_balanced_candidates_tie_and_large_beta_stays_finite():
    counts = torch.tensor([[1, 0], [0, 1], [0, 1], [3, 0]])
    p = FedCBSSelection().next_probabilities(counts, [0], 0)  # {0,1} and {0,2} are both perfectly balanced
    assert p[1] == pytest.approx(0.5) and p[2] == pytest.approx(0.5) and p[0] == 0
    p = FedCBSSelection(beta_start=400.0).next_probabilities(_skewed_counts(), [3, 4], 5)
    assert torch.isfinite(p).all() and p.sum() == pytest.approx(1.0)


def test_fedcbs_returns_distinct_sorted_ids_and_is_deterministic():
    counts = _skewed_counts()
    a, b = FedCBSSelection(), FedCBSSelection()
    for r in range(15):
        x, y = a(counts, 6, _gen(100 + r), r), b(counts, 6, _gen(100 + r), r)
        assert torch.equal(x, y)
        assert x.dtype == torch.long and len(x) == 6 and len(torch.unique(x)) == 6
        assert torch.equal(x, x.sort().values) and 0 <= int(x.min()) and int(x.max()) < 20
    assert torch.equal(a.counts, b.counts) and int(a.counts.sum()) == 15 * 6
    c = FedCBSSelection()
    other = [c(counts, 6, _gen(500 + r), r) for r in range(15)]  # other seeds, other draws
    assert any(not torch.equal(o, torch.tensor(sorted(a.history[r]))) for r, o in enumerate(other))


def test_fedcbs_state_dict_round_trip_gives_identical_draws():
    counts = _skewed_counts()
    policy = FedCBSSelection()
    for r in range(10):
        policy(counts, 5, _gen(r), r)
    saved = copy.deepcopy(policy.state_dict())
    later = [policy(counts, 5, _gen(r), r) for r in range(10, 20)]
    resumed = FedCBSSelection()
    resumed.load_state_dict(saved)
    assert all(torch.equal(x, resumed(counts, 5, _gen(r), r)) for r, x in zip(range(10, 20), later))
    assert torch.equal(resumed.counts, policy.counts)
    # the restored counts matter: without them the first pick's exploration bonus differs
    restored = FedCBSSelection()
    restored.load_state_dict(saved)
    fresh = FedCBSSelection()
    assert not torch.allclose(fresh.next_probabilities(counts, [], 10), restored.next_probabilities(counts, [], 10))
    # the empty state the data module passes when a checkpoint has none resets the policy
    resumed.load_state_dict({})
    assert resumed.counts is None and resumed.history == {}


def test_fedcbs_repeated_round_is_answered_from_the_record():
    counts = _skewed_counts()
    policy = FedCBSSelection()
    first = policy(counts, 5, _gen(1), 3)
    before = policy.counts.clone()
    assert torch.equal(policy(counts, 5, _gen(999), 3), first)  # same round, whatever the generator
    assert torch.equal(policy.counts, before)
    policy(counts, 4, _gen(1), 3)  # asked again with another S: the old draw is replaced, not added
    assert int(policy.counts.sum()) == 4


def test_fedcbs_selects_more_balanced_groups_than_uniform():
    counts = _skewed_counts()
    means = {}
    for name in ("uniform", "fedcbs"):
        policy = resolve_selection(name)
        means[name] = sum(qcid(counts[policy(counts, 5, _gen(1000 + r), r)]) for r in range(100)) / 100
    assert means["fedcbs"] < 0.7 * means["uniform"]


def test_fedcbs_exploration_spreads_participation():
    counts = _skewed_counts()
    policy = FedCBSSelection()
    for r in range(60):
        policy(counts, 5, _gen(r), r)
    assert int((policy.counts > 0).sum()) == 20  # every client gets its turn


def test_fedcbs_argument_checks():
    counts = _skewed_counts()
    with pytest.raises(ValueError, match="num_select"):
        FedCBSSelection()(counts, 21, _gen(0), 0)
    with pytest.raises(ValueError, match="distinct"):
        FedCBSSelection().next_probabilities(counts, [1, 1], 0)
    with pytest.raises(ValueError, match="lam"):
        FedCBSSelection(lam=-1.0)
    policy = FedCBSSelection()
    policy(counts, 3, _gen(0), 0)
    with pytest.raises(ValueError, match="selection counts for 20 clients"):
        policy(counts[:10], 3, _gen(0), 1)


# ----------------------------------------------------------------------------------------------------- class_balanced
# {0,1,2} and {3,4,5} pool to [60,60,60] / [3,3,3]; whatever the random first client, the greedy completes one of
# them (a big one-hot client is best paired with another big one, a small mixed client with a small one)
TRIPLES = torch.tensor([[60, 0, 0], [0, 60, 0], [0, 0, 60], [1, 2, 0], [2, 0, 1], [0, 1, 2]])


@pytest.mark.parametrize("divergence", ["kl", "qcid"])
def test_class_balanced_finds_the_perfectly_balanced_group(divergence):
    policy = ClassBalancedSelection(divergence)
    found = set()
    for seed in range(40):
        sel = policy(TRIPLES, 3, _gen(seed), seed)
        assert qcid(TRIPLES[sel]) == pytest.approx(0.0, abs=1e-12)
        found.add(tuple(sel.tolist()))
    assert found == {(0, 1, 2), (3, 4, 5)}  # the random start reaches both
    uniform = [qcid(TRIPLES[UniformSelection()(TRIPLES, 3, _gen(s), s)]) for s in range(40)]
    assert max(uniform) > 0.1  # the example is not trivially balanced


def test_class_balanced_pairs_each_client_with_its_complement():
    counts = torch.tensor([[3, 1], [1, 3], [4, 0], [0, 4], [2, 2], [5, 5]])
    policy = resolve_selection("class_balanced")
    for seed in range(30):
        sel = policy(counts, 2, _gen(seed), seed).tolist()
        assert sel in ([0, 1], [2, 3], [4, 5])


def test_class_balanced_distinct_deterministic_and_random_ties():
    counts = _skewed_counts()
    policy = ClassBalancedSelection()
    for r in range(10):
        x = policy(counts, 6, _gen(r), r)
        assert torch.equal(x, ClassBalancedSelection()(counts, 6, _gen(r), r))
        assert len(torch.unique(x)) == 6 and torch.equal(x, x.sort().values)
    # identical clients: every choice ties, so the generator decides
    same = torch.full((8, 3), 5)
    draws = {tuple(policy(same, 3, _gen(s), s).tolist()) for s in range(20)}
    assert len(draws) > 3


def test_class_balanced_beats_uniform_on_skewed_clients():
    counts = _skewed_counts()
    cb, uni = ClassBalancedSelection(), UniformSelection()
    mean_cb = sum(qcid(counts[cb(counts, 5, _gen(r), r)]) for r in range(50)) / 50
    mean_uni = sum(qcid(counts[uni(counts, 5, _gen(r), r)]) for r in range(50)) / 50
    assert mean_cb < 0.5 * mean_uni


def test_class_balanced_argument_checks():
    with pytest.raises(ValueError, match="divergence"):
        ClassBalancedSelection("l2")
    with pytest.raises(ValueError, match="num_select"):
        ClassBalancedSelection()(TRIPLES, 0, _gen(0), 0)
    assert ClassBalancedSelection().state_dict() == {}


# ----------------------------------------------------------------------------------------------------- registry
def test_one_resolver_builds_every_policy_and_rejects_unknown_names():
    assert set(SELECTIONS) == {"uniform", "fedcbs", "class_balanced"}
    assert isinstance(resolve_selection("uniform"), UniformSelection)
    assert isinstance(resolve_selection("fedcbs"), FedCBSSelection)
    assert isinstance(resolve_selection("class_balanced"), ClassBalancedSelection)
    assert isinstance(resolve_selection(None, ClassBalancedSelection), ClassBalancedSelection)  # the method's default
    given = FedCBSSelection(lam=3.0)
    assert resolve_selection(given) is given
    for bad in ("nope", 3, {"class_path": "torch.nn.Linear"}, {"class_path": "no_such_module.Policy"}):
        with pytest.raises(ValueError, match=r"client_selection=.* is not one of: uniform, fedcbs, class_balanced"):
            resolve_selection(bad)


@pytest.mark.parametrize(
    "policy", [UniformSelection(), FedCBSSelection(lam=2.5, beta_step=0.5), ClassBalancedSelection(divergence="qcid")]
)
def test_a_policy_round_trips_through_its_config(policy):
    """What hyperparameters and checkpoints record (plain data) rebuilds the same policy."""
    config = policy.config()
    assert config["class_path"] == f"lightning_sfl.loop.selection.{type(policy).__name__}"
    rebuilt = resolve_selection(copy.deepcopy(config))
    assert type(rebuilt) is type(policy) and vars(rebuilt) == vars(policy)
    assert isinstance(rebuilt, ClientSelection)


@pytest.mark.parametrize("name", ["uniform", "fedcbs", "class_balanced"])
def test_policies_plug_into_the_schedule_and_resume_with_it(name):
    from lightning_sfl.data import FederatedDataModule
    from lightning_sfl.loop import SyncRounds

    dm = FederatedDataModule(
        dataset="digits", num_clients=20, partition="quantity", alpha=2, participation=0.25, batch_size=64, seed=0
    )
    stats = dm.client_stats
    schedule = SyncRounds(2, resolve_selection(name))
    a = schedule.select_clients(4, stats)
    assert len(a) == dm.clients_per_round == 5 and len(torch.unique(a)) == 5
    assert torch.equal(a, schedule.select_clients(4, stats))  # same round, same clients (stateful policies included)
    state = copy.deepcopy(schedule.state_dict())
    nxt = schedule.plan_round(5, stats)
    other = SyncRounds(2, resolve_selection(name))
    other.load_state_dict(state)
    again = other.plan_round(5, stats)
    assert torch.equal(again[0].clients, nxt[0].clients) and torch.equal(again[1].rows, nxt[1].rows)


def test_a_policy_recorded_under_its_former_module_still_resolves():
    """Checkpoints written before the policies moved to ``lightning_sfl.loop.selection`` record the old class path."""
    from lightning_sfl.loop.selection import FedCBSSelection, resolve_selection

    old = {"class_path": "lightning_sfl.data.selection.FedCBSSelection", "init_args": {"lam": 5.0}}
    policy = resolve_selection(old)
    assert isinstance(policy, FedCBSSelection) and policy.lam == 5.0


# ------------------------------------------------------------------------------------------------ many clients
# Issue 57: both policies score the K candidates a block of clients at a time (the block's temporaries stay in the
# caches). Checked against the whole [K, N] matrix scored at once, the implementation they replaced, on more clients
# than a block holds: the same probabilities and the same picks, bitwise.
def _many_counts(num_clients: int, num_classes: int, seed: int) -> torch.Tensor:
    g = _gen(seed)
    counts = torch.randint(0, 40, (num_clients, num_classes), generator=g) * (
        torch.rand(num_clients, num_classes, generator=g) < 0.3
    )
    counts[:, int(torch.randint(num_classes, (1,), generator=g))] += 1  # no client without data
    return counts


@pytest.mark.parametrize("num_clients,num_classes", [(20_000, 10), (3_000, 100), (9_000, 3)])
def test_fedcbs_probabilities_of_many_clients_are_those_of_the_whole_matrix(num_clients, num_classes):
    counts = _many_counts(num_clients, num_classes, seed=num_classes)
    policy = FedCBSSelection(lam=10.0)
    policy.counts = torch.randint(0, 3, (num_clients,), generator=_gen(1))  # some clients selected before
    floats = counts.double()
    for selected in ([], [4], [4, 17, 2_999]):
        m = len(selected) + 1
        log_q = selection_module._pooled_qcid(floats[selected].sum(0) + floats).clamp_min(policy.eps).log()
        log_w = -policy.beta(m) * log_q
        if m == 1:
            log_w = torch.logaddexp(log_w, policy.exploration(5, num_clients).log())
        log_w[selected] = -math.inf
        assert torch.equal(policy.next_probabilities(counts, selected, 5), torch.softmax(log_w, dim=0))


@pytest.mark.parametrize("divergence", ["kl", "qcid"])
def test_class_balanced_picks_of_many_clients_are_those_of_the_whole_matrix(divergence):
    counts = _many_counts(20_000, 10, seed=3)
    policy, div = ClassBalancedSelection(divergence), ClassBalancedSelection.DIVERGENCES[divergence]
    for round_idx in (0, 1):
        g, floats = _gen(round_idx), counts.double()
        first = int(torch.randint(len(floats), (1,), generator=g))  # the greedy rule, scoring every candidate at once
        want, pooled = [first], floats[first].clone()
        available = torch.ones(len(floats), dtype=torch.bool)
        available[first] = False
        while len(want) < 30:
            candidates = available.nonzero().squeeze(1)
            scores = div(pooled + floats[candidates])
            ties = candidates[scores <= scores.min() + policy.tie_tol]
            pick = int(ties[torch.randint(len(ties), (1,), generator=g)])
            want.append(pick)
            pooled += floats[pick]
            available[pick] = False
        assert policy(counts, 30, _gen(round_idx), round_idx).tolist() == sorted(want)
