"""One split iteration, written once: client forward → server forward → server loss → client gradients → the
clients' extra terms → one step (SCALA Algorithm 2, lines 9-20; the hooks are the method's), and the full-model step of
plain FL, written once too (:func:`full_model_iteration`).

Every split method runs it with its hooks (:class:`~lightning_sfl.algorithms.split_method.SplitMethod`'s
``send_activations`` and ``split_losses``): the synchronous ones for each ``"local"`` step, SplitFedV2 once per client,
FSHA before its server's own training (on the activations that arrived, ``on_arrival``), GAS for each batch of
activation arrivals (its server trains when they fill its buffer, ``on_arrival``); the semi-supervised methods for
each cross-entity step, with their own ``send_activations`` (two views) and ``split_losses`` (pseudo-labels).

Under DDP every process holds a share of every client's rows and the gradients are summed over processes before the
step (:meth:`~SplitFedAlgorithm.take_step`). A loss term is therefore backpropagated as the share that makes that sum
the one-process gradient, decided here and in :func:`process_share` only:

* terms over rows (the server loss, the clients' losses, :meth:`~SplitFedAlgorithm.client_extra_loss`) are sums over
  this process's rows divided by global counts (``B``, ``B_k``): each process backpropagates its part as it is;
* terms every process computes whole (:meth:`~SplitFedAlgorithm.client_regulariser`: a function of the parameters, such
  as FedProx's ``(μ/2)‖w − w_g‖²``, or of this process's rows taken together) are divided by the number of processes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from lightning_sfl.losses import sum_of_client_means
from lightning_sfl.runtime.guards import check_finite
from lightning_sfl.runtime.processes import world_size

if TYPE_CHECKING:
    from lightning_sfl.loop import Step

__all__ = ["activation_gradients", "client_side_terms", "full_model_iteration", "process_share", "split_iteration"]


def activation_gradients(client_loss: torch.Tensor, activations: torch.Tensor, keep_graph: bool = True) -> torch.Tensor:
    """``G_k = ∂ l_k / ∂ A_k`` for every client at once (SCALA eq. 8, GAS eq. 7): the gradient of ``client_loss`` (a
    sum over clients of each client's loss on its own rows) w.r.t. the server's copy of the activations ``[B, *act]``;
    rows of client ``k`` are ``G_k``. ``keep_graph``: the server's graph stays for its own backward pass (the server
    loss)."""
    (grad,) = torch.autograd.grad(client_loss, activations, retain_graph=keep_graph)
    return grad


def process_share(row_terms: torch.Tensor | None, whole_terms: torch.Tensor | None, world_size: int):
    """What this process backpropagates of ``row_terms`` (a sum over its rows normalised by global counts) plus
    ``whole_terms`` (computed in full by every process): ``row_terms + whole_terms / world_size``; ``None`` if both
    are.

    >>> float(process_share(torch.tensor(1.0), torch.tensor(4.0), world_size=2))
    3.0
    >>> process_share(None, None, 2) is None
    True
    """
    if whole_terms is not None and world_size > 1:
        whole_terms = whole_terms / world_size
    if row_terms is None:
        return whole_terms
    return row_terms if whole_terms is None else row_terms + whole_terms


def client_side_terms(
    method, step: Step, outputs: torch.Tensor, features: torch.Tensor | None = None
) -> torch.Tensor | None:
    """Hook 5 as this process backpropagates it: :meth:`~SplitFedAlgorithm.client_extra_loss` and the defences'
    terms over rows (the inversion regulariser's) plus :meth:`~SplitFedAlgorithm.client_regulariser` and the defences'
    whole terms (NoPeek's; shared by the processes). The defences log per round, for the step's rows."""

    def log(name: str, value: torch.Tensor, **options) -> None:
        method.log(name, value, on_step=False, on_epoch=True, batch_size=step.num_rows, **options)

    rows = method.client_extra_loss(step, outputs, features)
    defence_rows, defence_whole = method.defences.client_terms(step, outputs, log)
    if defence_rows is not None:
        rows = defence_rows if rows is None else rows + defence_rows
    whole = method.client_regulariser(step, outputs, features)
    terms = method.client_terms(step, outputs)  # (the terms a method composed its loss with: FedProx's)
    if terms is not None:
        whole = terms if whole is None else whole + terms
    if defence_whole is not None:
        whole = defence_whole if whole is None else whole + defence_whole
    return process_share(rows, whole, world_size())


def split_iteration(method, step: Step, count_step: bool = True, on_arrival=None):
    """One split iteration of ``step``'s clients (see the module docstring); returns ``(server_loss, client_loss)``
    (the clients' extra terms included; ``None`` for a loss the method does not have).

    1. :meth:`~SplitMethod.send_activations`: ``A_k`` of every client, uploaded; the server's copy ``a`` requires a
       gradient; ``on_arrival(a)`` (``a`` detached), what the server does when they arrive (GAS: its buffer, and its
       update when they fill it).
    2. :meth:`~SplitMethod.split_losses`: server forward, NaN/Inf guard, the server's loss (eq. 7 / 14) and the
       clients' (eq. 8 / 15), both from the same (pre-update) forward.
    3. ``G_k`` (:func:`activation_gradients`), sent down.
    4. The server loss into the optimised weights; every client backpropagates ``G_k`` through its half, then its
       extra terms (:func:`client_side_terms`).
    5. :meth:`take_step` (``count_step=False``: not counted as a Lightning ``global_step``).
    """
    opt = method.optimizers()
    opt.zero_grad()
    acts, a = method.send_activations(step)
    if on_arrival is not None:
        on_arrival(a.detach())
    server_loss, client_loss = method.split_losses(acts, a, step)
    grad = None
    if client_loss is not None:
        grad = activation_gradients(client_loss, a, keep_graph=server_loss is not None)
        grad, encoded = method.compression.compress("gradients", grad, method.step_seed(step), step.local_sizes)
        method.shape.count_down(method.ledger, "gradients", grad, step, encoded)
    if server_loss is not None:  # into the optimised weights only (the leaf ``a`` has its gradient: G_k)
        params = [p for g in getattr(opt, "optimizer", opt).param_groups for p in g["params"]]
        method.manual_backward(server_loss, inputs=params)
    if grad is not None:  # keep the clients' graph if a defence's term goes through the activations (NoPeek's)
        method.manual_backward(acts, grad, retain_graph=method.defences.goes_back_through_activations)
    extra = client_side_terms(method, step, acts)
    if extra is not None:
        method.manual_backward(extra)
        client_loss = extra if client_loss is None else client_loss + extra
    method.take_step(opt, count_step, step.slots)
    return server_loss, client_loss


def full_model_iteration(
    method, step: Step, forward=None, row_loss=None, count_step: bool = True
) -> torch.Tensor:
    """One local SGD step of every slot of ``step`` on its whole model (plain FL: no cut), written once for the FL
    methods: ``forward(step)`` gives each slot's features (``None`` unless asked for) and logits ``[B, N]`` on its
    client's rows (default: the bank's logits, no features); ``row_loss`` defaults to the method's
    ``cross_entropy``; the loss ``Σ_k [mean_{i∈k} row_loss(logits, step)_i + R_k]`` (the clients' extra terms,
    :func:`client_side_terms`) is backpropagated and the step's slots take one step (``count_step``: counted as a
    Lightning ``global_step``). FedAvg's family runs it for each ``"local"`` step, the full-model semi-supervised
    methods (FedSwitch, SemiFL, FedMatch) for each cross-entity step, FedBuff and CA²FL for each of a
    client's ``E`` minibatches. Returns the loss."""
    opt = method.optimizers()
    opt.zero_grad()
    features, logits = (None, method.bank(step.x, step.local_sizes, step.slots)) if forward is None else forward(step)
    check_finite(step, ("logits", logits))
    rows = method.cross_entropy(logits, step.y) if row_loss is None else row_loss(logits, step)
    loss = sum_of_client_means(rows, step.owner, step.sizes)
    extra = client_side_terms(method, step, logits, features)
    if extra is not None:
        loss = loss + extra
    method.manual_backward(loss)
    method.take_step(opt, count_step, step.slots)  # a step may leave slots out (local epochs, FedBuff): they stay
    return loss
