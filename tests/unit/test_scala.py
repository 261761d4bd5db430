"""SCALA's loss (eqs. 14-15) and one local iteration against an independent computation."""

from __future__ import annotations

import math

import pytest
import torch
from _helpers import quiet_trainer, round_steps
from torch.func import functional_call

from lightning_sfl.algorithms import SCALA
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.losses import logit_adjusted_cross_entropy, sum_of_client_means
from lightning_sfl.runtime.aggregate import weighted_average


# ----------------------------------------------------------------------------- the loss, by hand
def test_logit_adjusted_loss_by_hand():
    s = torch.tensor([[2.0, 0.0, -1.0]])
    prior = torch.tensor([0.5, 0.3, 0.2])
    adj = [2.0 + math.log(0.5), 0.0 + math.log(0.3), -1.0 + math.log(0.2)]
    expected = -(adj[1] - math.log(sum(math.exp(v) for v in adj)))  # label 1
    got = logit_adjusted_cross_entropy(s, torch.tensor([1]), prior)
    assert got.item() == pytest.approx(expected, rel=1e-6)
    plain = -(0.0 - math.log(math.exp(2.0) + 1.0 + math.exp(-1.0)))
    assert logit_adjusted_cross_entropy(s, torch.tensor([1]), None).item() == pytest.approx(plain, rel=1e-6)


def test_logit_adjustment_with_absent_class_drops_it_from_the_softmax():
    s = torch.tensor([[1.0, 5.0, 0.5]], requires_grad=True)
    prior = torch.tensor([0.6, 0.0, 0.4])  # class 1 absent: its logit gets log 0 = -inf
    loss = logit_adjusted_cross_entropy(s, torch.tensor([0]), prior)
    a0, a2 = 1.0 + math.log(0.6), 0.5 + math.log(0.4)
    assert loss.item() == pytest.approx(-(a0 - math.log(math.exp(a0) + math.exp(a2))), rel=1e-6)
    loss.backward()
    assert torch.isfinite(s.grad).all() and s.grad[0, 1] == 0


def test_row_priors_and_sum_of_client_means():
    s = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    y = torch.tensor([0, 1, 1])
    priors = torch.tensor([[0.9, 0.1], [0.9, 0.1], [0.2, 0.8]])
    rows = logit_adjusted_cross_entropy(s, y, priors, reduction="none")
    for i in range(3):
        adj = s[i] + priors[i].log()
        assert rows[i].item() == pytest.approx(-(adj[y[i]] - adj.logsumexp(0)).item(), rel=1e-6)
    slot, sizes = torch.tensor([0, 0, 1]), torch.tensor([2, 1])
    assert sum_of_client_means(rows, slot, sizes).item() == pytest.approx(((rows[0] + rows[1]) / 2 + rows[2]).item())


# ----------------------------------------------------------------------------- one local iteration
def _reference_iteration(model0: SCALA, dm: FederatedDataModule, batch, lr, concat, server_la, client_la):
    """Algorithm 2, one local iteration, written out per client without the library's loop."""
    client_half, server_half = model0.client.net, model0.server.net
    wc0 = {n: p.detach().clone() for n, p in client_half.named_parameters()}
    ws0 = {n: p.detach().clone() for n, p in server_half.named_parameters()}
    x, y = dm.splits.to_float(batch.x), batch.y
    sizes = batch.sizes.tolist()
    xs, ys = x.split(sizes), y.split(sizes)
    n_cls = dm.num_classes
    p_local = []
    for k in batch.clients.tolist():  # P_k(y) from the client's whole shard
        counts = torch.bincount(dm.splits.train_y[dm.client_indices[k]], minlength=n_cls).float()
        p_local.append(counts / counts.sum())

    def ce(logits, labels, prior):
        z = logits if prior is None else logits + torch.log(prior)
        return -(z.gather(1, labels[:, None]).squeeze(1) - torch.logsumexp(z, dim=1)).mean()

    wck = [{n: v.clone().requires_grad_(True) for n, v in wc0.items()} for _ in sizes]
    acts = [functional_call(client_half, w, (xk,)) for w, xk in zip(wck, xs)]
    new_clients, new_servers = [], []
    if concat:
        ws = {n: v.clone().requires_grad_(True) for n, v in ws0.items()}
        logits = functional_call(server_half, ws, (torch.cat(acts),))
        p_s = torch.bincount(y, minlength=n_cls).float() / len(y)
        server_loss = ce(logits, y, p_s if server_la else None)
        gs = torch.autograd.grad(server_loss, list(ws.values()), retain_graph=True)
        new_server = {n: ws0[n] - lr * g for n, g in zip(ws, gs)}
        per_client_logits = logits.split(sizes)
    else:
        wsk = [{n: v.clone().requires_grad_(True) for n, v in ws0.items()} for _ in sizes]
        per_client_logits = [functional_call(server_half, w, (a,)) for w, a in zip(wsk, acts)]
    for k, logits_k in enumerate(per_client_logits):
        loss_k = ce(logits_k, ys[k], p_local[k] if client_la else None)
        g = torch.autograd.grad(loss_k, list(wck[k].values()), retain_graph=True)  # chain rule through w_s fixed
        new_clients.append({n: wc0[n] - lr * gi for n, gi in zip(wck[k], g)})
        if not concat:
            srv_loss_k = ce(logits_k, ys[k], p_local[k] if server_la else None)
            gsk = torch.autograd.grad(srv_loss_k, list(wsk[k].values()), retain_graph=True)
            new_servers.append({n: ws0[n] - lr * gi for n, gi in zip(wsk[k], gsk)})
    weights = dm.client_sizes[batch.clients].double()
    if not concat:
        new_server = weighted_average(new_servers, weights)
    return new_clients, new_server, weighted_average(new_clients, weights)


@pytest.mark.parametrize(
    "concat,server_la,client_la",
    [(True, True, True), (True, False, False), (True, True, False), (False, True, True), (False, False, False)],
)
def test_one_local_iteration_matches_independent_computation(concat, server_la, client_la):
    dm = FederatedDataModule(
        dataset="digits", num_clients=8, partition="quantity", alpha=2, participation=0.5, batch_size=24, seed=1
    )
    torch.manual_seed(0)
    lr = 0.5
    model = SCALA(
        arch="cnn_small",
        split_point="s2",
        local_iters=1,
        lr=lr,
        num_classes=10,
        input_shape=(1, 8, 8),
        concat_activations=concat,
        server_logit_adjustment=server_la,
        client_logit_adjustment=client_la,
    )
    import copy

    model0 = copy.deepcopy(model)
    batch = round_steps(dm, 0)[0]
    assert len(batch.clients) == 4 and int(batch.sizes.sum()) == 24
    ref_clients, ref_server, ref_global = _reference_iteration(model0, dm, batch, lr, concat, server_la, client_la)

    quiet_trainer(1, limit_val_batches=0).fit(model, dm)

    tol = {"rtol": 1e-4, "atol": 1e-6}
    for k, slot in enumerate(model.bank.slots):  # every client's weights after the step
        for n, p in slot.named_parameters():
            torch.testing.assert_close(p.detach(), ref_clients[k][n], **tol)
    for n, p in model.server.net.named_parameters():  # server weights after the step
        torch.testing.assert_close(p.detach(), ref_server[n], **tol)
    for n, p in model.client.net.named_parameters():  # FL phase, eq. (10)
        torch.testing.assert_close(p.detach(), ref_global[n].float(), **tol)
    # the step really moved the weights (the comparison above is not trivially true)
    moved = max(
        (p.detach() - q).abs().max() for p, q in zip(model.client.net.parameters(), model0.client.net.parameters())
    )
    assert moved > 1e-4


def test_logit_adjustment_changes_the_client_gradient():
    """Guard against a reference and implementation that both ignore the switches."""
    dm = FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)
    results = []
    for client_la in (True, False):
        torch.manual_seed(0)
        model = SCALA(local_iters=1, lr=0.5, client_logit_adjustment=client_la)
        quiet_trainer(1, limit_val_batches=0).fit(model, dm)
        results.append(torch.cat([p.detach().flatten() for p in model.client.parameters()]))
    assert not torch.allclose(results[0], results[1])
