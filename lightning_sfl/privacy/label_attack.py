"""``lightning-sfl attack --attack labels``: what the server of a split run learns of its clients' labels, at a
checkpoint (the attacks' functions: :mod:`~lightning_sfl.privacy.label_leakage`).

Every client sends, for ``--rows_per_client`` rows of its shard drawn with ``--seed`` (one batch, ``B_k`` rows), what
the first iteration of the next round would send, every client starting from the checkpoint's global model:

* a plain split method: its labels (the server computes the loss). Every attack is exact by construction: the
  reference arm (AUC 1, accuracy 1, histogram error 0), unless the labels were randomised
  (:class:`~lightning_sfl.defences.labels.RandomisedLabels`): then each score is that of the labels received;
* U-shaped (``--model.tail_point``, :mod:`~lightning_sfl.runtime.u_shape`): ``g_i = ∂L_k/∂h_i``, ``L_k`` the
  method's client loss on its ``B_k`` rows (with SCALA's ``log P_k``), ``h = body(head(x))`` (through the clients'
  activation defences).

The attacks on ``g`` (and ``h``), scored against the true labels:

``norm_auc``, ``direction_auc`` (binary tasks, ``--data.binary_class``; Li et al. 2022)
    the AUC of ``‖g_i‖`` and of ``cos(g_i, g_ref)`` (``g_ref``: one positive row the attacker knows, left out of the
    score) at separating the positive class, all rows pooled; ``norm_auc_per_batch``: the authors' per-batch mean
    over the clients' batches that hold both classes.
``cluster_accuracy`` (our extension of the direction attack to ``N`` classes)
    :func:`~lightning_sfl.privacy.label_leakage.cluster_labels` with ``--known_per_class`` known rows per class.
``known_tail_accuracy`` (only where the body's server averages the tails, ``tail_aggregation="server"``)
    the server knows the global tail: per row, ``u_i`` solving ``J_iᵀ·u_i = g_i`` (``J_i``
    the tail's Jacobian at ``h_i``; ``W`` for a linear tail) by least squares, the label its smallest entry: exact when
    the tail is the one the client used and ``N ≤ dim h``.
``completion_accuracy`` (model completion, Fu et al., USENIX Security 2022, passive; supervised here, where the paper
    trains semi-supervised with MixMatch and fine-tunes its bottom model)
    a linear head trained with Adam on the body's outputs ``h`` of the known rows, scored on the other rows.
``histogram_l1``
    each client's label histogram recovered from the clusters (``--model.pooled_label_counts``: the counts the client
    sent, exact), its L1 distance to the true one (both normalised), the mean over clients.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from lightning_sfl.client_store import ClientStore
from lightning_sfl.privacy.label_leakage import (
    cluster_labels,
    direction_scores,
    histogram_l1,
    known_tail_labels,
    norm_scores,
    roc_auc,
)

__all__ = ["client_tails", "label_attacks", "received_gradients", "tail_labels"]


def _client_step(client: int, rows: torch.Tensor, x: torch.Tensor, y: torch.Tensor, num_classes: int):
    from lightning_sfl.loop import Step

    n = len(y)
    size = torch.tensor([n])
    return Step(
        "local", 0, client, False, torch.tensor([client]), size, rows, x=x, y=y,
        owner=torch.zeros(n, dtype=torch.long), local_sizes=size, label_counts=torch.bincount(y, minlength=num_classes),
    )  # fmt: skip


def client_tails(ckpt: dict, ckpt_path: str) -> ClientStore | None:
    """Every client's own tail from a checkpoint of a run with ``tail_aggregation="none"`` (its per-client store, read
    from the files beside the checkpoint); ``None`` for another run."""
    record = ((ckpt.get("lightning_sfl") or {}).get("client_state") or {}).get("client_tails")
    if record is None:
        return None
    store = ClientStore("client_tails", record["num_clients"], record["default"])
    store.load(record, [Path(ckpt_path).parent / "client_state"])
    return store


def received_gradients(model, client: int, rows: torch.Tensor, x: torch.Tensor, y: torch.Tensor, noise=None, tail=None):
    """What U-shaped ``model``'s client ``client`` sends for its training rows ``rows`` (inputs ``x``
    ``[B_k, C, H, W]``, labels ``y``), the global model at every slot: the body's outputs ``h`` ``[B_k, *h]``
    (computed by the server) and ``g = ∂L_k/∂h`` (the method's client loss on the tail's logits, with the labels its
    defences train on) as its label defences send it (step ``client`` of round 0: its own draws), both detached.
    ``tail``: the client's own (default: the global tail)."""
    step = model.defences.training_labels(_client_step(client, rows, x, y, model.num_classes))
    with torch.no_grad():
        h = model.server.net(model.defences.upload(model.client.net(x), noise))
    h = h.detach().requires_grad_(True)
    loss = model.client_loss((model.tail.net if tail is None else tail)(h), step)
    (g,) = torch.autograd.grad(loss, h)
    return h.detach(), model.defences.gradient_upload(g, step).detach()  # as the client's label defences send it


def tail_labels(tail: torch.nn.Module, h: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The known-tail attack: per row, the least-squares ``u_i`` of ``J_iᵀ·u_i = g_i`` (``J_i = ∂tail(h_i)/∂h_i``,
    ``[N, dim h]``), the label its smallest entry. ``[B]`` int64."""
    flat = h.reshape(len(h), -1)
    shape = h.shape[1:]

    def logits(row: torch.Tensor) -> torch.Tensor:
        return tail(row.reshape(1, *shape)).reshape(-1)

    linear = [m for m in tail.modules() if isinstance(m, torch.nn.Linear)]
    if len(linear) == 1 and all(not any(True for _ in m.parameters()) for m in tail if m is not linear[0]):
        return known_tail_labels(g, linear[0].weight)  # logits = W·h + b (after parameterless layers: flatten)
    tail = copy.deepcopy(tail).double()  # the attacker's own copy, in float64
    jac = torch.func.vmap(torch.func.jacrev(logits))(flat.double())  # [B, N, dim h]
    u = torch.linalg.lstsq(jac.transpose(1, 2), g.reshape(len(g), -1, 1).double()).solution.squeeze(-1)  # [B, N]
    return u.argmin(dim=1)


def _completion(h, y, known, num_classes: int, epochs: int, seed: int) -> float:
    """Fu et al.'s passive model completion, supervised: a linear head on ``h`` of the ``known`` rows (Adam, full
    batch, ``epochs`` steps), its accuracy on the other rows."""
    g = torch.Generator().manual_seed(seed)
    x = h.reshape(len(h), -1).double()
    x = (x - x.mean(0)) / x.std(0).clamp_min(1e-8)  # standardised over every row the server holds (no labels needed)
    head = torch.nn.Linear(x.shape[1], num_classes).double()
    with torch.no_grad():
        head.weight.copy_(0.01 * torch.randn(head.weight.shape, generator=g, dtype=torch.float64))
        head.bias.zero_()
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    for _ in range(epochs):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(head(x[known]), y[known]).backward()
        opt.step()
    rest = torch.ones(len(y), dtype=torch.bool)
    rest[known] = False
    with torch.no_grad():
        return float((head(x[rest]).argmax(1) == y[rest]).double().mean())


def _known_rows(y: torch.Tensor, per_class: int, seed: int) -> torch.Tensor:
    """``per_class`` rows of each present class, drawn with ``seed``: the labels the attacker knows."""
    g = torch.Generator().manual_seed(seed)
    picks = []
    for c in y.unique().tolist():
        rows = (y == c).nonzero().flatten()
        picks.append(rows[torch.randperm(len(rows), generator=g)[:per_class]])
    return torch.cat(picks).sort().values


def label_attacks(
    model,
    stats,
    splits,
    *,
    rows_per_client: int,
    known_per_class: int,
    completion_epochs: int,
    seed: int,
    tails: ClientStore | None = None,
) -> dict:
    """Every attack of the module docstring on ``model`` (a split method with its checkpoint's global model, in eval
    mode) for the clients of ``stats`` (:class:`~lightning_sfl.loop.ClientStats`) on ``splits``; a dict of metrics.
    ``tails``: every client's own tail (``tail_aggregation="none"``, :func:`client_tails`)."""
    g = torch.Generator().manual_seed(seed)
    num_classes = stats.num_classes
    out = {"clients": stats.num_clients, "classes": num_classes}
    rows = [shard[torch.randperm(len(shard), generator=g)[:rows_per_client]] for shard in stats.shards]
    y = torch.cat([splits.train_y[r] for r in rows])
    out["rows"] = len(y)
    binary = num_classes == 2
    every_row = torch.cat(list(stats.shards))
    trained_on = y  # the labels the clients train on: their own, or randomised once (as in the fit: its data seed)
    for defence in model.defences.values():  # the gradients' draws from the attack's seed
        if hasattr(defence, "seed_draws"):
            defence.seed_draws(seed)
        if hasattr(defence, "randomise"):
            defence.randomise(splits.train_y[every_row], every_row, num_classes, int(stats.seed))
            trained_on = defence.noisy[torch.cat(rows)]
    if not getattr(model, "u_shaped", False):  # the server receives the labels the clients train on
        return {**out, "sent": "labels", **_labels_sent(trained_on, y, [len(r) for r in rows], num_classes)}
    noise = torch.Generator().manual_seed(seed)
    model.register_buffer("label_dist", model.defences.label_distribution(stats).float(), persistent=False)
    model.register_buffer("client_sizes", stats.sizes.clone(), persistent=False)
    known_tail = model.tail_aggregation == "server"  # the body's server averages the tails: it knows the tail
    hs, gs, predicted = [], [], []
    for k, r in enumerate(rows):
        x = splits.to_float(splits.train_x[r])
        own = None
        if tails is not None:  # the client's own tail, as it trained it
            own = copy.deepcopy(model.tail.net)
            torch.nn.utils.vector_to_parameters(tails[k].to(next(own.parameters())), own.parameters())
        h, grad = received_gradients(model, k, r, x, splits.train_y[r], noise, own)
        hs.append(h)
        gs.append(grad)
        if known_tail:
            predicted.append(tail_labels(model.tail.net, h, grad))
    h, grad = torch.cat(hs), torch.cat(gs)
    sizes = [len(r) for r in rows]
    known = _known_rows(y, known_per_class, seed)
    out["sent"] = "body_gradients"
    out["known_rows"] = len(known)
    if binary:
        positives = y == 1
        out["positive_share"] = float(positives.double().mean())
        out["norm_auc"] = roc_auc(norm_scores(grad), positives)
        out["norm_auc_per_batch"] = _per_batch(norm_scores(grad), positives, sizes)
        reference = int(known[y[known] == 1][0]) if bool((y[known] == 1).any()) else int(positives.nonzero()[0])
        others = torch.arange(len(y)) != reference
        out["direction_auc"] = roc_auc(direction_scores(grad, grad[reference])[others], positives[others])
    clusters = cluster_labels(grad, known, y[known], num_classes, seed=seed)
    out["cluster_accuracy"] = float((clusters == y).double().mean())
    out["tail_aggregation"] = model.tail_aggregation
    if known_tail:  # else the server has no tail to solve with
        out["known_tail_accuracy"] = float((torch.cat(predicted) == y).double().mean())
    out["completion_accuracy"] = _completion(h, y, known, num_classes, completion_epochs, seed)
    pooled = bool(getattr(model, "pooled_label_counts", False))
    errors = []
    for part, truth in zip(clusters.split(sizes), y.split(sizes)):
        recovered = truth if pooled else part[part >= 0]  # a cluster no known row names counts for no class
        counts = torch.bincount(recovered, minlength=num_classes) if len(recovered) else torch.ones(num_classes)
        errors.append(histogram_l1(counts, torch.bincount(truth, minlength=num_classes)))
    out["histogram_l1"] = sum(errors) / len(errors)
    out["histogram_from"] = "label_counts" if pooled else "clusters"
    return out


def _labels_sent(sent: torch.Tensor, y: torch.Tensor, sizes: list[int], num_classes: int) -> dict:
    """The scores of a server that receives labels ``sent`` ``[n]`` for true labels ``y``: every attack reads them
    (exact without label randomisation)."""
    agree = float((sent == y).double().mean())
    out = {"cluster_accuracy": agree, "known_tail_accuracy": agree, "completion_accuracy": agree}
    if num_classes == 2:
        out["norm_auc"] = out["direction_auc"] = roc_auc(sent.double(), y == 1)
    errors = [
        histogram_l1(torch.bincount(s, minlength=num_classes), torch.bincount(t, minlength=num_classes))
        for s, t in zip(sent.split(sizes), y.split(sizes))
    ]
    out["histogram_l1"] = sum(errors) / len(errors)
    return out


def _per_batch(scores: torch.Tensor, positives: torch.Tensor, sizes: list[int]) -> float:
    """:func:`~lightning_sfl.privacy.label_leakage.roc_auc` of each client's batch, averaged over those that hold both
    classes (the authors' protocol, :func:`~lightning_sfl.privacy.label_leakage.mean_batch_auc`, for batches of
    unequal sizes)."""
    aucs = [roc_auc(s, p) for s, p in zip(scores.split(sizes), positives.split(sizes))]
    aucs = [a for a in aucs if a == a]
    return sum(aucs) / len(aucs) if aucs else float("nan")
