"""Loss terms that compose: a method adds a term to its parent's loss without re-deriving it.

A :class:`ClientTerm` is a term of the clients' objective over their parameters, computed in full by every process
(hook 5's whole terms, as FedProx's proximal term): it is handed what it needs — the round's global client half and
the copies the step's clients train (:class:`ClientTermInputs`) — never the method. A method adds terms in its
constructor (:meth:`~lightning_sfl.algorithms.base.SplitFedAlgorithm.add_client_term`); the client iteration adds
their sum to the method's own :meth:`~lightning_sfl.algorithms.base.SplitFedAlgorithm.client_regulariser`, for the
split methods and the FL methods alike. FedProx is FedAvg plus :class:`ProximalTerm`; so is the tutorial's
ProxSCALA SCALA plus the same term (:doc:`/tutorials/add-a-method`).

>>> import copy, torch
>>> from torch import nn
>>> global_half = nn.Linear(2, 1)
>>> trained = copy.deepcopy(global_half)
>>> with torch.no_grad():
...     _ = trained.weight.add_(1.0)  # both weights moved by 1, the bias not
>>> inputs = ClientTermInputs(list(global_half.parameters()), [trained], torch.zeros(()))
>>> round(float(ProximalTerm(mu=0.5)(inputs).detach()), 6)  # (μ/2)·‖w_k − w_g‖² = 0.25 · (1² + 1²)
0.5
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from lightning_sfl.errors import ConfigError

__all__ = ["ClientTerm", "ClientTermInputs", "ProximalTerm"]


@dataclass(frozen=True)
class ClientTermInputs:
    """What a :class:`ClientTerm` is handed for one step.

    Attributes:
        global_half: the parameters of the round's global client-side model ``w_g`` (unchanged during the round), in
            ``parameters()`` order.
        slots: the copy each of the step's clients trains, ``w_k`` (one module per client, the same layout).
        like: a tensor of the step (the outputs): the term's dtype and device.
    """

    global_half: Sequence[torch.Tensor]
    slots: Sequence[nn.Module]
    like: torch.Tensor


class ClientTerm:
    """A term added to the clients' objective (see the module docstring): ``__call__(inputs) -> scalar``."""

    def __call__(self, inputs: ClientTermInputs) -> torch.Tensor:
        raise NotImplementedError


class ProximalTerm(ClientTerm):
    """FedProx's proximal term (Li et al., MLSys 2020, eq. 2): ``Σ_k (μ/2)‖w_k − w_g‖²`` over the step's clients;
    its gradient adds ``μ(w_k − w_g)`` to each client's.

    Args:
        mu: ``μ >= 0``.
    """

    def __init__(self, mu: float) -> None:
        if mu < 0:
            raise ConfigError(f"mu={mu} must be >= 0")
        self.mu = float(mu)

    def __call__(self, inputs: ClientTermInputs) -> torch.Tensor:
        global_params = [p.detach() for p in inputs.global_half]
        total = inputs.like.new_zeros(())
        for slot in inputs.slots:
            total = total + sum((p - g).pow(2).sum() for p, g in zip(slot.parameters(), global_params, strict=True))
        return 0.5 * self.mu * total
