"""Plain FL baselines (FedAvg, FedProx, FedDyn, FedLC, FedLogit, FedDecorr): losses and regularisers by hand,
identities between methods, and FedAvg/FedProx/FedDyn rounds against independent computations."""

from __future__ import annotations

import copy
import math

import lightning as L
import pytest
import torch
from _helpers import make_step, round_steps
from torch.func import functional_call

from lightning_sfl.algorithms.fedavg import (
    FedAvg,
    FedDecorr,
    FedDyn,
    FedLC,
    FedLogit,
    FedProx,
    feddecorr_loss,
    fedlc_cross_entropy,
)
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.losses import logit_adjusted_cross_entropy
from lightning_sfl.runtime.banks import traffic_kind

METHODS = (FedAvg, FedProx, FedDyn, FedLC, FedLogit, FedDecorr)
LR = 0.1


def _dm() -> FederatedDataModule:
    return FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)


def _trainer(max_epochs: int, callbacks=None, validate: bool = True, precision: str = "32-true") -> L.Trainer:
    return L.Trainer(
        max_epochs=max_epochs,
        precision=precision,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=None if validate else 0,
        callbacks=callbacks,
    )


def _flat(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


_RUNS: dict = {}


def _run(cls, **kwargs):
    """Train ``cls`` for 2 rounds of 2 local iterations from seed 0; cached: (initial model, trained model)."""
    key = (cls, tuple(sorted(kwargs.items())))
    if key not in _RUNS:
        torch.manual_seed(0)
        model = cls(local_iters=2, lr=LR, **kwargs)
        model0 = copy.deepcopy(model)
        _trainer(2).fit(model, _dm())
        _RUNS[key] = (model0, model)
    return _RUNS[key]


def _global_state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in model.client.net.state_dict().items()}


# ----------------------------------------------------------------------------------------------- all methods train
@pytest.mark.parametrize("cls", METHODS, ids=lambda c: c.__name__)
def test_every_method_trains_two_rounds(cls):
    model0, model = _run(cls)
    assert cls.has_server_half is False and traffic_kind(model) == "full_model"
    assert len(model.server.net) == 0 and len(model.client.net) == len(model0.client.net)
    moved = 0.0
    for (n, p), q in zip(model.client.net.named_parameters(), model0.client.net.parameters()):
        assert torch.isfinite(p).all(), n
        moved = max(moved, (p.detach() - q.detach()).abs().max().item())
    assert moved > 1e-3
    full = sum(v.numel() * v.element_size() for v in model.client.net.state_dict().values())
    totals = model.ledger.totals()  # last round: full models went down and up, nothing else (2·D(w) per client)
    assert totals["up/full_model"] == totals["down/full_model"] == full * 4 and totals["total"] == 2 * full * 4


# ----------------------------------------------------------------------------------------------- identities
@pytest.mark.parametrize(
    "cls,neutral,active",
    [(FedProx, {"mu": 0.0}, {"mu": 1.0}), (FedLC, {"tau": 0.0}, {"tau": 1.0}), (FedDecorr, {"decorr_coef": 0.0}, {})],
    ids=["FedProx", "FedLC", "FedDecorr"],
)
def test_neutral_setting_equals_fedavg_and_active_one_differs(cls, neutral, active):
    ref = _global_state(_run(FedAvg)[1])
    same = _global_state(_run(cls, **neutral)[1])
    other = _global_state(_run(cls, **active)[1])
    for k in ref:
        torch.testing.assert_close(same[k], ref[k], rtol=0, atol=1e-7)
    assert max((other[k] - ref[k]).abs().max().item() for k in ref) > 1e-5


# ----------------------------------------------------------------------------------------------- rounds by hand
def _reference_round(model0, dm, batches, lr, mu=0.0):
    """Per client: full model, T plain SGD steps on its own rows of CE (+ FedProx's μ(w − w_g)) by hand;
    then the |D_k|-weighted average. Returns (clients' weights, global weights)."""
    net = model0.client.net
    w_g = {n: p.detach().clone() for n, p in net.named_parameters()}
    sizes = batches[0].sizes.tolist()
    new_clients = []
    for k in range(len(sizes)):
        w = {n: v.clone() for n, v in w_g.items()}
        for b in batches:
            xk = dm.splits.to_float(b.x).to(next(net.parameters()).dtype).split(sizes)[k]
            yk = b.y.split(sizes)[k]
            wr = {n: v.clone().requires_grad_(True) for n, v in w.items()}
            z = functional_call(net, wr, (xk,))
            loss = -(z.gather(1, yk[:, None]).squeeze(1) - torch.logsumexp(z, dim=1)).mean()
            grads = torch.autograd.grad(loss, list(wr.values()))
            w = {n: w[n] - lr * (g + mu * (w[n] - w_g[n])) for n, g in zip(wr, grads)}
        new_clients.append(w)
    weights = dm.client_sizes[batches[0].clients].double()
    weights = weights / weights.sum()
    new_global = {n: sum(weights[k] * new_clients[k][n].double() for k in range(len(sizes))) for n in w_g}
    return new_clients, new_global


@pytest.mark.parametrize(
    "cls,local_iters,kwargs", [(FedAvg, 1, {}), (FedProx, 2, {"mu": 2.0})], ids=["FedAvg", "FedProx"]
)
def test_one_round_matches_independent_computation(cls, local_iters, kwargs):
    """In float64 on both sides: in float32 the batched and the per-client sums round differently (seen: 2.7e-6
    apart after FedProx's two steps at lr 0.5), which a tolerance can only hide."""
    dm = _dm()
    torch.manual_seed(0)
    lr = 0.5
    model = cls(local_iters=local_iters, lr=lr, **kwargs)
    model0 = copy.deepcopy(model).double()
    batches = round_steps(dm, 0, local_iters)
    assert len(batches) == local_iters and len(batches[0].clients) == 4
    ref_clients, ref_global = _reference_round(model0, dm, batches, lr, **kwargs)
    _trainer(1, validate=False, precision="64-true").fit(model, dm)

    tol = {"rtol": 1e-9, "atol": 1e-11}
    for k, slot in enumerate(model.bank.slots):
        for n, p in slot.named_parameters():
            torch.testing.assert_close(p.detach(), ref_clients[k][n], **tol)
    for n, p in model.client.net.named_parameters():
        torch.testing.assert_close(p.detach(), ref_global[n], **tol)
    moved = (_flat(model.client.net) - _flat(model0.client.net)).abs().max()
    assert moved > 1e-3
    if kwargs:  # the proximal term matters: plain SGD (μ = 0) gives clearly different client weights
        plain_clients, _ = _reference_round(model0, dm, batches, lr)
        diff = max((ref_clients[0][n] - plain_clients[0][n]).abs().max().item() for n in plain_clients[0])
        assert diff > 1e-3


def _regularizer_grads(model):
    """Gradient of ``model.client_regulariser`` and the terms it added (``client_terms``) for the current slots, per
    slot as a flat vector."""
    step = make_step(model._last_clients, torch.ones(len(model.bank), dtype=torch.long))
    outputs = torch.zeros(1, model.num_classes)
    terms = [model.client_regulariser(step, outputs, None), model.client_terms(step, outputs)]  # (FedProx: a term)
    reg = sum(t for t in terms if t is not None)
    grads = []
    for slot in model.bank.slots:
        params = list(slot.parameters())
        gs = torch.autograd.grad(reg, params, retain_graph=True)
        grads.append(torch.cat([g.reshape(-1) for g in gs]))
    return reg, grads


class _Record(L.Callback):
    """Snapshots FedDyn's states at the start of each round and right after its aggregation."""

    def __init__(self) -> None:
        self.rounds: list[dict] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.rounds.append(
            {
                "theta_prev": _flat(pl_module.client.net).clone(),
                "g_prev": pl_module.feddyn_client_grads.dense(),
                "h_prev": pl_module.feddyn_h.clone(),
            }
        )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch.round_end:
            self.rounds[-1].update(
                slots=torch.stack([_flat(s) for s in pl_module.bank.slots]),
                theta=_flat(pl_module.client.net).clone(),
                g=pl_module.feddyn_client_grads.dense(),
                h=pl_module.feddyn_h.clone(),
                clients=batch.clients.clone(),
            )
            pl_module._last_clients = batch.clients.clone()


def test_fedprox_regularizer_value_and_gradient():
    _, model = _run(FedProx, mu=1.0)
    model._last_clients = torch.arange(len(model.bank))
    mu = 0.37
    model.mu = mu
    w_g = _flat(model.client.net)
    reg, grads = _regularizer_grads(model)
    slots = [_flat(s) for s in model.bank.slots]
    assert reg.item() == pytest.approx(sum(0.5 * mu * (w - w_g).pow(2).sum().item() for w in slots), rel=1e-5)
    for w, g in zip(slots, grads):
        assert (w - w_g).abs().max() > 1e-4  # the slots really differ from the global model
        torch.testing.assert_close(g, mu * (w - w_g), rtol=1e-5, atol=1e-7)


def test_feddyn_states_and_server_model_by_hand(tmp_path):
    torch.manual_seed(0)
    alpha = 0.1
    model = FedDyn(penalty=alpha, local_iters=2, lr=LR)
    record = _Record()
    dm = _dm()
    _trainer(2, callbacks=[record], validate=False).fit(model, dm)
    num_clients = dm.num_clients
    assert model.feddyn_client_grads.shape == (num_clients, _flat(model.client.net).numel())

    for i, r in enumerate(record.rounds):
        delta = r["slots"] - r["theta_prev"]  # θ_k^t − θ^{t−1}, [S, P]
        g = r["g_prev"].clone()
        g[r["clients"]] -= alpha * delta  # ∇L_k(θ_k^t) = ∇L_k(θ_k^{t−1}) − α(θ_k^t − θ^{t−1})
        h = r["h_prev"] - alpha * delta.sum(0) / num_clients  # h^t
        theta = r["slots"].mean(0) - h / alpha  # θ^t, uniform average over participants
        torch.testing.assert_close(r["g"], g, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(r["h"], h, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(r["theta"], theta, rtol=1e-5, atol=1e-6)
        others = torch.ones(num_clients, dtype=torch.bool)
        others[r["clients"]] = False
        assert torch.equal(r["g"][others], r["g_prev"][others])  # non-participants keep their state
        if i == 0:  # states start at zero
            assert not r["g_prev"].any() and not r["h_prev"].any()
    assert record.rounds[1]["h_prev"].abs().max() > 0  # round 2 ran with a non-trivial state
    # the correction matters: θ^t is not the plain (uniform) average
    assert (record.rounds[1]["theta"] - record.rounds[1]["slots"].mean(0)).abs().max() > 1e-5

    # regulariser gradient: −∇L_k(θ_k^{t−1}) + α(θ_k − θ^{t−1}) (state read now: after the round's update)
    reg, grads = _regularizer_grads(model)
    theta_g = _flat(model.client.net)
    for k, (slot, grad) in enumerate(zip(model.bank.slots, grads)):
        expected = -model.feddyn_client_grads[model._last_clients[k]] + alpha * (_flat(slot) - theta_g)
        torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-7)

    # the states are checkpointed and restored
    state = model.state_dict()
    assert "feddyn_h" in state and "feddyn_client_grads" not in state  # a per-client store: its record, not [K, P]
    checkpoint = {"state_dict": dict(state)}
    model.feddyn_client_grads.bind_folder(tmp_path)  # (the fit's trainer had no checkpoint folder: the working one)
    model.on_save_checkpoint(checkpoint)
    assert "feddyn_client_grads" in checkpoint["lightning_sfl"]["client_state"]
    assert "feddyn_h" in checkpoint["state_dict"]
    restored = FedDyn(penalty=alpha, local_iters=2, lr=LR)
    restored.on_load_checkpoint(checkpoint)
    restored.load_state_dict(checkpoint["state_dict"])
    assert torch.equal(restored.feddyn_client_grads.dense(), model.feddyn_client_grads.dense())
    assert torch.equal(restored.feddyn_h, model.feddyn_h)


# ----------------------------------------------------------------------------------------------- losses by hand
def test_fedlc_calibrated_loss_by_hand_with_absent_class():
    logits = torch.tensor([[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]], requires_grad=True)
    counts = torch.tensor([16.0, 0.0, 81.0])  # n^{-1/4}: 1/2, +inf (absent), 1/3
    y = torch.tensor([0, 2])
    tau = 2.0
    rows = fedlc_cross_entropy(logits, y, counts, tau, reduction="none")
    for i, target in enumerate(y.tolist()):
        a0, a2 = logits[i, 0].item() - tau / 2, logits[i, 2].item() - tau / 3  # class 1 is out of the softmax
        a = {0: a0, 2: a2}[target]
        assert rows[i].item() == pytest.approx(-(a - math.log(math.exp(a0) + math.exp(a2))), rel=1e-6)
    rows.sum().backward()
    assert torch.isfinite(logits.grad).all() and (logits.grad[:, 1] == 0).all()
    # τ = 0 is plain cross-entropy (no 0·inf)
    plain = torch.nn.functional.cross_entropy(logits, y, reduction="none")
    torch.testing.assert_close(fedlc_cross_entropy(logits, y, counts, 0.0, reduction="none"), plain)


def test_fedlc_and_fedlogit_row_losses_use_each_rows_client():
    logits = torch.tensor([[1.0, 2.0, 0.5], [0.3, -1.0, 2.0], [0.0, 0.5, -0.5]])
    batch = make_step([2, 0], [2, 1], y=torch.tensor([0, 2, 2]), owner=torch.tensor([0, 0, 1]))
    counts = torch.tensor([[16.0, 0.0, 81.0], [5.0, 5.0, 5.0], [3.0, 0.0, 2.0]])  # clients 0, 1, 2
    row_counts = counts[[2, 2, 0]]  # rows 0, 1 belong to client 2 (slot 0), row 2 to client 0 (slot 1)
    tau = 1.5
    for cls, kwargs in ((FedLC, {"tau": tau}), (FedLogit, {})):
        model = cls(num_classes=3, **kwargs)
        model.register_buffer("client_sizes", counts.sum(1).long(), persistent=False)
        model.register_buffer("label_dist", counts / counts.sum(1, keepdim=True), persistent=False)
        rows = model.row_loss(logits, batch)
        for i in range(3):
            present = row_counts[i] > 0  # class 1 is absent for both clients: out of the softmax
            if cls is FedLC:
                adj = logits[i][present] - tau * row_counts[i][present] ** -0.25
            else:
                adj = logits[i][present] + (row_counts[i][present] / row_counts[i].sum()).log()
            target = int(present[: batch.y[i]].sum())  # index of y among the present classes
            assert rows[i].item() == pytest.approx(-(adj[target] - adj.logsumexp(0)).item(), rel=1e-6)
        if cls is FedLogit:
            prior = row_counts / row_counts.sum(1, keepdim=True)
            expected = logit_adjusted_cross_entropy(logits, batch.y, prior, "none")
            torch.testing.assert_close(rows, expected)


def test_feddecorr_loss_by_hand():
    z = torch.tensor([[1.0, 2.0], [2.0, 4.0], [3.0, 0.0]], requires_grad=True)
    # standardised columns: (-1, 0, 1)/sqrt(2/3) and (0, 2, -2)/sqrt(8/3); correlation -1/2
    # K = [[1, -1/2], [-1/2, 1]]: ||K||_F^2 / d^2 = 2.5 / 4
    loss = feddecorr_loss(z)
    assert loss.item() == pytest.approx(0.625, rel=1e-6)
    loss.backward()
    assert torch.isfinite(z.grad).all() and z.grad.abs().max() > 0
    # uncorrelated columns reach the minimum 1/d
    assert feddecorr_loss(torch.tensor([[1.0, 1.0], [-1.0, 1.0], [1.0, -1.0], [-1.0, -1.0]])).item() == pytest.approx(
        0.5, rel=1e-6
    )
    # degenerate inputs: a single row contributes 0; a constant column gives no NaN
    one = torch.tensor([[1.0, 2.0]], requires_grad=True)
    assert feddecorr_loss(one).item() == 0.0
    const = torch.tensor([[1.0, 5.0], [2.0, 5.0], [4.0, 5.0]], requires_grad=True)
    value = feddecorr_loss(const)
    value.backward()
    assert value.item() == pytest.approx(0.25, rel=1e-5) and torch.isfinite(const.grad).all()


def test_feddecorr_regularizer_sums_each_clients_own_term():
    model = FedDecorr(decorr_coef=0.3)
    feats = torch.tensor([[1.0, 2.0], [2.0, 4.0], [3.0, 0.0], [7.0, 1.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    batch = make_step([0, 1, 2], [3, 1, 3])  # single-row client: 0
    got = model.client_regulariser(batch, torch.zeros(7, 10), feats)
    expected = 0.3 * (0.625 + 0.0 + feddecorr_loss(feats[4:]).item())
    assert got.item() == pytest.approx(expected, rel=1e-6)
    assert got.item() != pytest.approx(0.3 * feddecorr_loss(feats).item(), rel=1e-3)  # not the pooled batch


@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")
def test_feddyn_resumes_from_a_checkpoint_exactly(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    kw = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    torch.manual_seed(0)
    full = FedDyn(penalty=0.1, local_iters=2, lr=LR)
    L.Trainer(max_epochs=3, enable_checkpointing=False, **kw).fit(full, _dm())
    torch.manual_seed(0)
    first = FedDyn(penalty=0.1, local_iters=2, lr=LR)
    L.Trainer(max_epochs=2, callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)], **kw).fit(first, _dm())
    torch.manual_seed(1)  # other initial weights: everything must come from the checkpoint
    resumed = FedDyn(penalty=0.1, local_iters=2, lr=LR)
    L.Trainer(max_epochs=3, enable_checkpointing=False, **kw).fit(resumed, _dm(), ckpt_path=tmp_path / "last.ckpt")
    assert resumed.feddyn_h.abs().max() > 0
    assert torch.equal(resumed.feddyn_h, full.feddyn_h)
    assert torch.equal(resumed.feddyn_client_grads.dense(), full.feddyn_client_grads.dense())
    assert torch.equal(_flat(resumed.client.net), _flat(full.client.net))
    loaded = FedDyn.load_from_checkpoint(tmp_path / "last.ckpt")  # outside fit: no setup ran
    assert torch.equal(loaded.feddyn_client_grads.dense(), first.feddyn_client_grads.dense())
