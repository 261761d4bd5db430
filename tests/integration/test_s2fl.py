"""S²FL: the label-balanced grouping against brute force, the per-group server loss against a loop, the identity with
MiniBatch-SFL for one group, and the sliding split on the per-iteration barrier clock."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
from _helpers import flat_params, quiet_trainer, small_digits

from lightning_sfl.algorithms import S2FL, MiniBatchSFL
from lightning_sfl.algorithms.s2fl import balanced_groups, group_imbalance, group_mean_loss
from lightning_sfl.callbacks import SimulatedClock
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Federation
from lightning_sfl.system.wireless import WirelessCell


def _imbalance_by_hand(hist, group):
    """Mean over non-empty groups of the L2 distance of the pooled label distribution to uniform (plain Python)."""
    m = len(hist[0])
    costs = []
    for g in sorted(set(group)):
        pooled = [sum(h[c] for h, gi in zip(hist, group) if gi == g) for c in range(m)]
        total = sum(pooled)
        costs.append(sum((p / total - 1 / m) ** 2 for p in pooled) ** 0.5)
    return sum(costs) / len(costs)


def test_group_imbalance_matches_a_plain_python_computation():
    hist = torch.rand(7, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 10
    group = torch.tensor([0, 1, 2, 0, 1, 2, 0])
    assert float(group_imbalance(hist, group, 3)) == pytest.approx(_imbalance_by_hand(hist.tolist(), group.tolist()))


def test_swap_search_pairs_complementary_clients():
    """Clients holding only label 0 or only label 1, dealt so that each group gets one label: the search must
    move to the balanced split (the global optimum, imbalance 0)."""
    hist = torch.tensor([[5.0, 0.0], [0.0, 5.0], [5.0, 0.0], [0.0, 5.0]])  # dealt i mod 2: labels {0, 0} / {1, 1}
    assert float(group_imbalance(hist, torch.arange(4) % 2, 2)) == pytest.approx(0.7071, abs=1e-4)
    group = balanced_groups(hist, 2)
    assert float(group_imbalance(hist, group, 2)) == pytest.approx(0.0, abs=1e-12)
    assert torch.bincount(group).tolist() == [2, 2]


@pytest.mark.parametrize("seed", range(5))
def test_swap_search_ends_where_no_swap_helps_and_never_worse_than_dealing(seed):
    g = torch.Generator().manual_seed(seed)
    hist = (torch.rand(6, 3, generator=g) < 0.4).double() * torch.randint(1, 20, (6, 3), generator=g)
    hist[hist.sum(1) == 0, 0] = 1.0
    group = balanced_groups(hist, 2)
    got = _imbalance_by_hand(hist.tolist(), group.tolist())
    assert got <= _imbalance_by_hand(hist.tolist(), (torch.arange(6) % 2).tolist()) + 1e-12
    for i, j in itertools.combinations(range(6), 2):  # a local optimum of the swap neighbourhood
        if group[i] != group[j]:
            swapped = group.clone()
            swapped[i], swapped[j] = group[j], group[i]
            assert _imbalance_by_hand(hist.tolist(), swapped.tolist()) >= got - 1e-12


def test_group_mean_loss_equals_the_mean_of_group_means():
    g = torch.Generator().manual_seed(1)
    losses = torch.rand(11, generator=g, dtype=torch.float64)
    group = torch.tensor([0, 2, 2, 0, 0, 2, 2, 0, 2, 2, 0])  # group 1 empty
    by_hand = (losses[group == 0].mean() + losses[group == 2].mean()) / 2
    sizes = torch.bincount(group, minlength=3)
    torch.testing.assert_close(group_mean_loss(losses, group, sizes), by_hand, rtol=0, atol=1e-15)


def _fit(cls, rounds=2, **kwargs):
    torch.manual_seed(0)
    model = cls(local_iters=2, lr=0.05, **kwargs)
    quiet_trainer(rounds).fit(model, small_digits())
    return model


def test_one_group_is_minibatch_sfl():
    a, b = _fit(S2FL, num_groups=1), _fit(MiniBatchSFL)
    torch.testing.assert_close(flat_params(a), flat_params(b), rtol=0, atol=0)


def test_two_groups_step_the_server_on_the_mean_of_the_groups_steps():
    """One round, one local iteration, plain SGD: the server half equals the average of one SGD step per group taken
    from the same initial weights on that group's activations (copies written out in the test)."""
    torch.manual_seed(0)
    model = S2FL(local_iters=1, lr=0.1, num_groups=2)
    w0 = {k: v.clone() for k, v in model.server.net.state_dict().items()}
    c0 = {k: v.clone() for k, v in model.client.net.state_dict().items()}
    dm = small_digits()
    captured = {}
    original = model.server_loss

    def spy(logits, step):
        captured["step"], captured["group"] = step, model._slot_group.clone()
        return original(logits, step)

    model.server_loss = spy
    quiet_trainer(1).fit(model, dm)
    step, group = captured["step"], captured["group"]
    assert len(set(group.tolist())) == 2
    copy_client = S2FL(local_iters=1, lr=0.1)
    copy_client.client.net.load_state_dict(c0)
    acts = copy_client.client.net(step.x.cpu()).detach()
    copies = []
    for gid in (0, 1):
        server = S2FL(local_iters=1, lr=0.1).server.net
        server.load_state_dict(w0)
        rows = group[step.owner.cpu()] == gid
        loss = torch.nn.functional.cross_entropy(server(acts[rows]), step.y.cpu()[rows])
        grads = torch.autograd.grad(loss, list(server.parameters()))
        copies.append(torch.cat([(p - 0.1 * gr).detach().flatten() for p, gr in zip(server.parameters(), grads)]))
    torch.testing.assert_close(flat_params(model.server.net), (copies[0] + copies[1]) / 2, rtol=0, atol=1e-6)


def test_bad_num_groups_is_a_one_line_error():
    with pytest.raises(ConfigError, match="num_groups=0 must be a whole number >= 1"):
        S2FL(num_groups=0)


def test_barrier_clock_by_hand_and_the_sliding_split():
    """Two clients, one iteration each of 2 rows, placement and speeds set by hand: the round is
    3·(max(forward + upload) + max(backward)) + max(model upload); the sliding split moves clients to other cuts
    only where that shortens the round."""
    model = S2FL(local_iters=1, arch="cnn_small", split_point="s2")
    clock = WirelessCell(barrier="iteration")
    clock.distances_m = torch.tensor([100.0, 900.0], dtype=torch.float64)
    clock.capacities = torch.tensor([1e9, 4e9], dtype=torch.float64)
    from lightning_sfl.models import build_model
    from lightning_sfl.system.channel import uplink_rates
    from lightning_sfl.system.flops import cut_costs

    net = build_model("cnn_small", 10, (1, 8, 8))
    costs = cut_costs(net)
    rates = uplink_rates(clock.distances_m, 10e6 / 2, 0.2, -174.0)
    clients, samples, iters = torch.tensor([0, 1]), torch.tensor([6, 6]), torch.tensor([3, 3])

    def by_hand(cut):
        c = costs[cut]
        arrive = [2 * c.forward / clock.capacities[k] + 8 * 2 * (c.activation_bytes + 8) / rates[k] for k in (0, 1)]
        backward = [2 * c.backward / clock.capacities[k] for k in (0, 1)]
        model_up = [8 * c.model_bytes / rates[k] for k in (0, 1)]
        return float(3 * (max(arrive) + max(backward)) + max(model_up))

    plain = {"sends_activations": True, "tail_row_bytes": 0, "tail_forward_flops": 0.0, "tail_training_flops": 0.0}
    clock.costs = SimpleNamespace(cuts={"s2": costs["s2"]}, nominal_cut="s2", **plain)
    assert clock.barrier_seconds(clients, samples, iters) == pytest.approx(float(by_hand("s2")), rel=1e-12)
    clock.costs = SimpleNamespace(cuts=costs, nominal_cut="s2", **plain)  # every cut: each its fastest
    sliding = clock.barrier_seconds(clients, samples, iters)
    assert sliding < by_hand("s2")  # the slow, distant client sends smaller activations from a deeper cut
    assert clock.last_cuts != ["s2", "s2"]
    assert set(clock.last_cuts) <= set(costs) and len(clock.last_cuts) == 2
    assert model.split_options() == list(net.cut_points)
    assert S2FL(adaptive_split=False).split_options() is None


def test_barrier_clock_logs_longer_rounds_than_the_straggler_sum_for_split_methods():
    """Through a fit: with a barrier at every iteration a split round takes at least as long as its slowest client's
    own compute and traffic (Σ_t max_k ≥ max_k Σ_t); FL methods are unchanged by the barrier."""
    from lightning_sfl.algorithms import FedAvg

    def elapsed(cls, barrier):
        torch.manual_seed(0)
        model, dm = cls(local_iters=3, lr=0.05), small_digits()
        Federation.build(model, dm, system=WirelessCell(barrier=barrier))
        trainer = quiet_trainer(2, callbacks=[SimulatedClock()])
        trainer.fit(model, dm)
        logged = float(trainer.callback_metrics["clock/elapsed_seconds"])
        assert logged == pytest.approx(model.federation.elapsed_seconds)
        return model.federation.elapsed_seconds

    assert elapsed(MiniBatchSFL, "iteration") > elapsed(MiniBatchSFL, "round")
    assert elapsed(FedAvg, "iteration") == pytest.approx(elapsed(FedAvg, "round"), rel=1e-12)
    with pytest.raises(ValueError, match="barrier='x' must be one of: round, iteration"):
        WirelessCell(barrier="x")
