"""U-shaped split learning (Vepakomma et al. 2018, "Split learning for health", §"U-shaped configurations"; Poirot et
al. 2019): the client keeps the first layers (the head) *and* the last (the tail), the server holds the middle (the
body), and the labels never leave the client. An option of the synchronous split methods, ``--model.tail_point``
(:class:`~lightning_sfl.algorithms.split_method.SplitMethod`); the shape
:class:`~lightning_sfl.runtime.shape.UShaped` runs it.

A network ``f = tail ∘ body ∘ head`` cut at ``split_point`` and ``tail_point``
(:func:`~lightning_sfl.models.split.cut_tail`). One iteration (:func:`u_shaped_iteration`), each client on its own rows,
the server on the concatenation:

1. client: ``A_k = head(X_k)`` ``[B_k, *act]``, uploaded (as in every split method; no labels with it);
2. server: ``H = body(A)`` ``[B, *h]`` (one body, or each client's copy of it), sent down (a new crossing);
3. client: its loss ``L_k = mean_{i∈k} ℓ(tail(H_k)_i, y_i)`` (the method's client loss, eq. 8 or SCALA's eq. 15 with
   ``log P_k``), and ``g_k = ∂L_k/∂H_k`` ``[B_k, *h]``, uploaded (a new crossing; through the label defences'
   ``gradient_upload``, :mod:`~lightning_sfl.defences.gradients`: the server receives, and trains on, what they send);
4. server: the body's weights step on the gradient of its objective (:func:`body_row_weights`): with one body
   ``Σ_k (B_k/B)·L_k``, the mean over the concatenated batch that eq. 7 trains a server half on; with a copy per
   client (SplitFedV1) each copy its own ``L_k``. The gradient of ``Σ_k L_k`` w.r.t. ``A``, ``G_k``, is sent down
   (as in every split method);
5. client: ``G_k`` back through the head; head and tail step.

The tails are averaged with the heads (their ``|D_k|`` weights) after each round: as in the plain split methods, one
server aggregates the client models, and so it knows the tail (the threat model of ``docs/guide/label-privacy.md``).

SCALA's server-side adjustment (eq. 14) needs ``P_s``, the label distribution of the concatenated batch: without
labels the server cannot form it. ``pooled_label_counts`` (SCALA's option) has every client send its label counts each
iteration; the server returns ``P_s``, and each client also sends ``∂/∂H_k`` of ``mean CE(tail(H_k) + log P_s)``
weighted ``B_k/B``, which the body trains on (eq. 14 as the server would compute it, at the cost of the counts and a
second gradient); without it (the default) the body trains on the clients' own losses as above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from lightning_sfl.runtime.guards import check_finite
from lightning_sfl.runtime.iteration import client_side_terms

if TYPE_CHECKING:
    from lightning_sfl.loop import Step

__all__ = [
    "TAIL_AGGREGATIONS",
    "body_row_weights",
    "keep_tails",
    "load_tails",
    "server_view",
    "u_shaped_iteration",
]

#: Who averages the clients' tails (``tail_aggregation``): the body's server, an aggregator of their own, nobody.
TAIL_AGGREGATIONS = ("server", "separate", "none")


def load_tails(method, step: Step) -> None:
    """Round start with tails kept per client: each slot of the tail takes its client's own (``client_tails``) and a
    fresh optimiser state."""
    tails = method.client_banks["tail"]
    opt = method.optimizers()
    tails.reset_optimizer_state(getattr(opt, "optimizer", opt))
    for slot, k in zip(tails.slots, step.clients.tolist()):
        torch.nn.utils.vector_to_parameters(method.client_tails[k].clone(), slot.parameters())


@torch.no_grad()
def keep_tails(method, step: Step) -> None:
    """Round end with tails kept per client: each client's tail back into ``client_tails``; the evaluated tail is the
    ``|D_k|``-weighted mean of all ``K`` clients' (theirs since they last trained, the initial one for the others)."""
    for slot, k in zip(method.client_banks["tail"].slots, step.clients.tolist()):
        method.client_tails[k] = torch.nn.utils.parameters_to_vector(slot.parameters())
    w = method.client_sizes.to(method.client_tails.dtype)
    torch.nn.utils.vector_to_parameters(method.client_tails.weighted_sum(w) / w.sum(), method.tail.net.parameters())


def server_view(step: Step) -> Step:
    """What the server of a U-shaped iteration gets of ``step``: its clients, slots and row counts, not the labels
    (``y`` and ``label_counts`` are ``None``: a server hook that reads them fails)."""
    return step.replace(y=None, label_counts=None)


def body_row_weights(method, step: Step) -> torch.Tensor | None:
    """The weight of each row's ``g_k`` in the body's objective, ``[B_local]``: ``B_k / B`` of its client with one
    body (``Σ_k (B_k/B)·L_k``, the mean over the concatenated batch), ``None`` (weight 1: ``Σ_k L_k``, each copy its
    own client's loss) with a copy of the body per client. Built from the step's row counts only."""
    if method.server_bank is not None:
        return None
    sizes = step.sizes.to(torch.float64)
    return (sizes / sizes.sum()).index_select(0, step.owner)


def u_shaped_iteration(method, step: Step, count_step: bool = True):
    """One U-shaped iteration of ``step``'s clients (see the module docstring); returns ``(body_loss, client_loss)``:
    the body's objective (its value, for the logs) and ``Σ_k L_k`` with the clients' extra terms."""
    opt = method.optimizers()
    opt.zero_grad()
    acts, a = method.send_activations(step)  # head, through the defences; uploaded without labels
    view = server_view(step)
    h = method.server_forward(a, view)  # the body (or each client's copy): [B, *h]
    check_finite(step, ("activations", acts), ("body outputs", h))
    seed = method.step_seed(step)
    h, encoded = method.compression.compress("body_outputs", h, seed, step.local_sizes)  # what the tails decode
    method.ledger.add_rows("down", "body_outputs", h, step.sizes, step.slots, encoded)

    # --- the clients: each one's tail on its rows of H, its loss, g_k = ∂L_k/∂H_k
    h_client = h.detach().requires_grad_(True)
    logits = method.client_banks["tail"](h_client, step.local_sizes, step.slots)
    check_finite(step, ("logits", logits))
    client_loss = method.client_loss(logits, step)
    body_loss, body_grad = _body_objective(method, step, logits, h_client, client_loss)
    (g,) = torch.autograd.grad(client_loss, h_client, retain_graph=True)  # the tails keep their graph
    g = method.defences.gradient_upload(g, step)  # what the clients send (the label defences' noise), then encoded
    g, encoded = method.compression.compress("body_gradients", g, seed, step.local_sizes)
    method.ledger.add_rows("up", "body_gradients", g, step.sizes, step.slots, encoded)

    # --- the server: G_k = ∂(Σ_k L_k)/∂A sent down, the body's weights on its objective
    if body_grad is None:
        weights = body_row_weights(method, view)
        body_grad = g if weights is None else g * weights.to(g.dtype).view(-1, *([1] * (g.dim() - 1)))
        body_loss = client_loss.detach() if weights is None else _weighted_mean_loss(method, logits, step, weights)
    (grad,) = torch.autograd.grad(h, a, g, retain_graph=True)
    grad, encoded = method.compression.compress("gradients", grad, seed, step.local_sizes)  # what the heads decode
    method.ledger.add_rows("down", "gradients", grad, step.sizes, step.slots, encoded)
    body_params = [p for p in _server_parameters(method) if p.requires_grad]
    if body_params:
        method.manual_backward(h, body_grad, inputs=body_params)

    # --- the clients: the tails on their own losses, G_k back through the heads, the extra terms
    tail_params = [p for p in method.client_banks["tail"].parameters() if p.requires_grad]
    method.manual_backward(client_loss, inputs=tail_params)
    method.manual_backward(acts, grad, retain_graph=method.defences.goes_back_through_activations)
    extra = client_side_terms(method, step, acts)
    if extra is not None:
        method.manual_backward(extra)
        client_loss = client_loss + extra
    method.take_step(opt, count_step, step.slots)
    return body_loss, client_loss


def _server_parameters(method):
    return method.server_bank.parameters() if method.server_bank is not None else method.server.parameters()


@torch.no_grad()
def _weighted_mean_loss(method, logits: torch.Tensor, step: Step, weights: torch.Tensor) -> torch.Tensor:
    """``Σ_k (B_k/B)·L_k`` (for the logs): the clients' row losses weighted like their gradients."""
    rows = method.cross_entropy(logits, step.y, method.client_prior(step))
    sizes = step.sizes.to(rows.dtype).index_select(0, step.owner)
    return (rows / sizes * weights.to(rows.dtype)).sum()


def _body_objective(method, step: Step, logits, h_client, client_loss):
    """``(body_loss, ∂body_loss/∂H)`` where the body's objective is not the clients' losses reweighted: SCALA's eq. 14
    with the clients' pooled label counts (``pooled_label_counts``: the counts go up, ``P_s`` comes down, and a second
    gradient goes up); ``(None, None)`` otherwise."""
    prior = method.body_prior(step)
    if prior is None:
        return None, None
    once, n = torch.ones_like(step.sizes), method.num_classes  # a row a client: N counts up, P_s down (bytes only)
    method.ledger.add_rows("up", "label_counts", torch.zeros(len(once), n, dtype=torch.long), once, step.slots)
    method.ledger.add_rows("down", "label_prior", torch.zeros(len(once), n, dtype=prior.dtype), once, step.slots)
    rows = method.cross_entropy(logits, step.y, prior)
    if method.server_bank is None:  # one body: the mean over the concatenated batch (eq. 7 / 14)
        loss = rows.sum() / int(step.sizes.sum())
    else:
        sizes = step.sizes.to(rows.dtype).index_select(0, step.owner)
        loss = (rows / sizes).sum()
    (grad,) = torch.autograd.grad(loss, h_client, retain_graph=True)
    grad = method.defences.gradient_upload(grad, step)
    grad, encoded = method.compression.compress("body_gradients", grad, method.step_seed(step) + 1, step.local_sizes)
    method.ledger.add_rows("up", "body_gradients", grad, step.sizes, step.slots, encoded)
    return loss.detach(), grad
