"""FedMatch (labels at the server): the decomposition θ = σ + ψ, agreement pseudo-labels, helpers by embedding distance,
the loss terms against direct computations, who learns what (σ on the server, ψ on the clients) and what travels."""

from __future__ import annotations

import copy
import doctest
from types import SimpleNamespace

import pytest
import torch
from test_semi_baselines import _fit
from torch import nn
from torch.nn import functional as F

import lightning_sfl.algorithms.fedmatch as fedmatch_module
from lightning_sfl.algorithms import FedMatch
from lightning_sfl.algorithms.fedmatch import (
    agreement_labels,
    consistency_rows,
    decompose_,
    is_psi,
    nearest_helpers,
    per_client_consistency,
    per_row_consistency,
)
from lightning_sfl.errors import ConfigError
from lightning_sfl.losses import sum_of_client_means

TINY = dict(psi_factor=0.2, supervised_weight=1.0)


def test_doctests_pass():
    result = doctest.testmod(fedmatch_module)
    assert result.attempted > 0 and result.failed == 0


def test_decomposed_layers_compute_with_sigma_plus_psi():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8, 3))
    sigma = [model[0].weight.detach().clone(), model[3].weight.detach().clone()]
    assert decompose_(model, 0.2) == 2
    with torch.no_grad():
        model[0].psi.normal_()
        model[3].psi.normal_()
    x = torch.randn(4, 1, 4, 4)
    expected = F.linear(
        F.conv2d(x, sigma[0] + model[0].psi, model[0].bias).relu().flatten(1), sigma[1] + model[3].psi, model[3].bias
    )
    torch.testing.assert_close(model(x), expected)
    fresh = nn.Linear(3, 2)
    decompose_(fresh, 0.2)
    torch.testing.assert_close(fresh.psi, 0.2 * fresh.weight)  # ψ starts at psi_factor·σ


def test_agreement_labels_count_votes_ties_to_the_lowest_class():
    g = torch.Generator().manual_seed(0)
    votes = torch.randint(0, 4, (3, 200), generator=g)
    got = agreement_labels(votes, 4)
    for i in range(200):
        counts = [int((votes[:, i] == c).sum()) for c in range(4)]
        assert int(got[i]) == counts.index(max(counts))


def test_nearest_helpers_against_a_loop():
    g = torch.Generator().manual_seed(1)
    embeddings = torch.rand(12, 5, generator=g)
    known = torch.rand(12, generator=g) > 0.3
    for client in range(12):
        got = nearest_helpers(embeddings, known, client, 2)
        if not known[client]:
            assert got == []
            continue
        others = sorted(
            (float((embeddings[j] - embeddings[client]).norm()), j) for j in range(12) if known[j] and j != client
        )
        assert got == [j for _, j in others[:2]]


def test_consistency_rows_against_torch():
    g = torch.Generator().manual_seed(2)
    strong, local = torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g)
    helpers = torch.randn(2, 6, 4, generator=g).softmax(dim=2)
    labels, mask = torch.tensor([0, 1, 2, 3, 0, 1]), torch.tensor([True, False, True, True, False, True])
    ce, kl = consistency_rows(strong, local.log_softmax(1), helpers, labels, mask)
    torch.testing.assert_close(ce, F.cross_entropy(strong, labels, reduction="none") * mask)
    reference = sum(F.kl_div(local.log_softmax(1), h, reduction="none").sum(1) for h in helpers) / 2
    torch.testing.assert_close(kl, reference)
    _, none = consistency_rows(strong, local.log_softmax(1), None, labels, mask)
    assert torch.equal(none, torch.zeros(6))


def test_per_client_consistency_against_a_loop():
    g = torch.Generator().manual_seed(3)
    owner = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2])
    sizes = torch.tensor([3, 2, 3])
    mask = torch.tensor([True, False, True, False, False, True, True, False])  # client 1: no confident row
    ce, kl = torch.rand(8, generator=g) * mask, torch.rand(8, generator=g)
    for mask_kl in (False, True):
        expected = 0.0
        for k in range(3):
            rows = owner == k
            confident = rows & mask
            if confident.any():
                expected += float(ce[confident].mean())
            chosen = confident if mask_kl else rows
            if chosen.any():
                expected += float(kl[chosen].mean())
        got = per_client_consistency(ce, kl, owner, mask, sizes, mask_kl)
        assert float(got) == pytest.approx(expected, rel=1e-6)
        # the same as rows whose per-client means the FL step (full_model_iteration) sums
        ce64, kl64 = ce.double(), kl.double()
        rows = per_row_consistency(ce64, kl64, owner, mask, sizes, mask_kl)
        want = float(per_client_consistency(ce64, kl64, owner, mask, sizes, mask_kl))
        assert float(sum_of_client_means(rows, owner, sizes)) == pytest.approx(want, rel=1e-12)


def test_helpers_are_the_rounds_sigma_with_the_helpers_psi_and_the_regulariser_is_direct():
    model, _ = _fit(FedMatch, rounds=2, **TINY)
    helper = int(torch.nonzero(model.client_known)[0])
    model._slot_helpers = {0: [helper]}
    x = torch.randn(4, *model.hparams.input_shape)
    (probs,) = model._helper_probs(x, SimpleNamespace(local_sizes=torch.tensor([4]), slots_list=lambda: [0]))
    reference = copy.deepcopy(model.client.net)
    pieces = iter(
        torch.split(model.client_psi[helper], [p.numel() for n, p in reference.named_parameters() if is_psi(n)])
    )
    with torch.no_grad():
        for name, p in reference.named_parameters():
            if is_psi(name):
                p.copy_(next(pieces).view_as(p))  # σ stays the global one
    torch.testing.assert_close(probs[0], reference(x).softmax(dim=1))
    step = SimpleNamespace(slots_list=lambda: [0, 1])
    expected = 0.0
    for k in (0, 1):
        params = dict(model.bank.slots[k].named_parameters())
        for name, psi in params.items():
            if is_psi(name):
                sigma = params[name.removesuffix("psi") + "weight"]
                sigma, psi = sigma.detach(), psi.detach()
                expected += 10.0 * float(((sigma - psi) ** 2).sum()) + 1e-5 * float(psi.abs().sum())
    assert float(model._regulariser(step).detach()) == pytest.approx(expected, rel=1e-5)


class Trace(FedMatch):
    """Records ψ of the global model around the supervised phase and the slots around aggregation."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.trace = {"psi_before_phase": [], "psi_after_phase": [], "slots": [], "sigma": []}

    def _psi(self, module):
        return torch.cat([p.detach().reshape(-1).clone() for n, p in module.named_parameters() if is_psi(n)])

    def _sigma(self, module):
        return torch.cat([p.detach().reshape(-1).clone() for n, p in module.named_parameters() if not is_psi(n)])

    def supervised_step(self, step):
        if step.index == 0:
            self.trace["psi_before_phase"].append(self._psi(self.client.net))
        super().supervised_step(step)

    def download(self):
        self.trace["psi_after_phase"].append(self._psi(self.client.net))
        self.trace["sigma"].append(self._sigma(self.client.net))
        super().download()

    def aggregate(self, step):
        self.trace["slots"].append(
            [(self._sigma(self.bank.slots[s]), self._psi(self.bank.slots[s])) for s in step.slots_list()]
        )
        super().aggregate(step)


@pytest.mark.parametrize("bank", ["sequential", "stacked"])
def test_sigma_learns_on_the_server_psi_on_the_clients_and_psi_is_averaged(bank):
    model, totals = _fit(Trace, rounds=2, client_bank=bank, **TINY)
    trace = model.trace
    for before, after in zip(trace["psi_before_phase"], trace["psi_after_phase"]):
        assert torch.equal(before, after)  # the server's phase leaves ψ alone
    for sigma, slots in zip(trace["sigma"], trace["slots"]):
        for slot_sigma, _ in slots:
            assert torch.equal(slot_sigma, sigma)  # the clients leave σ alone
    last_psi = torch.stack([psi for _, psi in trace["slots"][-1]]).mean(dim=0)
    torch.testing.assert_close(model._psi(model.client.net), last_psi, rtol=1e-6, atol=1e-7)
    assert not torch.equal(trace["slots"][0][0][1], trace["psi_after_phase"][0])  # the clients moved ψ
    psi_bytes = model.psi_bytes()
    slots = len(trace["slots"][-1])
    assert totals["up/psi"] == slots * psi_bytes and "up/full_model" not in totals  # the last round's traffic
    assert totals["down/full_model"] > 0 and totals["down/helpers"] % (2 * psi_bytes) == 0
    assert totals["down/helpers"] > 0  # round 2: the clients seen in round 1 get helpers


def test_both_banks_train_the_same():
    a, _ = _fit(FedMatch, rounds=2, client_bank="sequential", **TINY)
    b, _ = _fit(FedMatch, rounds=2, client_bank="stacked", **TINY)
    torch.testing.assert_close(
        torch.cat([p.reshape(-1) for p in a.client.net.parameters()]),
        torch.cat([p.reshape(-1) for p in b.client.net.parameters()]),
        rtol=1e-4,
        atol=1e-6,
    )


def test_helpers_only_in_helper_rounds():
    _, every = _fit(FedMatch, rounds=2, **TINY)
    _, never = _fit(FedMatch, rounds=2, helper_interval=10, **TINY)  # the code's: rounds 9, 19, ...
    assert every.get("down/helpers", 0) > 0 and never.get("down/helpers", 0) == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"helpers": -1}, "helpers=-1 must be a whole number >= 0"),
        ({"helper_interval": 0}, "helper_interval=0 must be a whole number >= 1"),
        ({"l2_weight": -1.0}, "l2_weight=-1.0 must be >= 0"),
    ],
)
def test_bad_settings_are_one_line_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        FedMatch(**kwargs)
