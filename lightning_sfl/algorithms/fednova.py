"""FedNova (Wang et al., NeurIPS 2020): normalised averaging for clients that take different numbers of local steps.

Client ``i`` takes ``τ_i`` local SGD steps from ``x``; its normalised update is ``d_i = (x − y_i)/‖a_i‖₁``, where
``‖a_i‖₁ = τ_i`` for plain SGD and ``[τ_i − ρ(1 − ρ^{τ_i})/(1 − ρ)]/(1 − ρ)`` with momentum ``ρ``. The server sets
``x ← x − τ_eff·Σ_i p_i d_i`` with ``τ_eff = Σ_i p_i ‖a_i‖₁`` (``p_i = |D_i| / Σ_j |D_j|`` over the round's
clients; the paper's eq. 7 with ``τ_eff = Σ_i p_i τ_i`` for SGD). With equal ``τ_i`` (and ``ρ``) this is FedAvg.

>>> x, ys = torch.tensor([1.0]), torch.tensor([[0.0], [0.5]])
>>> fednova_average(x, ys, torch.tensor([4, 1]), torch.tensor([0.5, 0.5])).tolist()  # τ_eff = 2.5
[0.0625]
"""

from __future__ import annotations

import torch
from typing_extensions import override

from lightning_sfl.algorithms.fedavg import FedAvg
from lightning_sfl.algorithms.registry import register
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Step
from lightning_sfl.runtime.aggregate import (
    flat_parameters,
    load_flat_parameters,
    normalized_weights,
    slot_flat_parameters,
)

__all__ = ["FedNova", "fednova_average", "momentum_norm"]


def momentum_norm(local_steps: torch.Tensor, rho: float = 0.0) -> torch.Tensor:
    """``‖a_i‖₁`` of ``τ_i`` local steps of SGD with momentum ``ρ`` (``τ_i`` itself without momentum), ``[S]``."""
    tau = local_steps.to(torch.float64)
    if rho == 0:
        return tau
    return (tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho)


def fednova_average(
    x: torch.Tensor, ys: torch.Tensor, local_steps: torch.Tensor, weights: torch.Tensor, rho: float = 0.0
) -> torch.Tensor:
    """FedNova's new global model from ``x`` ``[P]``, the clients' models ``ys`` ``[S, P]``, their ``τ_i`` ``[S]`` and
    weights ``[S]`` (normalised here); computed in float64, returned in ``x``'s dtype."""
    p = normalized_weights(weights)
    norms = momentum_norm(local_steps, rho)
    d = (x.to(torch.float64) - ys.to(torch.float64)) / norms[:, None]
    tau_eff = (p * norms).sum()
    return (x.to(torch.float64) - tau_eff * (p[:, None] * d).sum(0)).to(x.dtype)


@register("fednova", family="fl")
class FedNova(FedAvg):
    """FedNova (Wang et al., NeurIPS 2020, eq. 7): FedAvg whose server step normalises each client's update by its
    number of local steps (:func:`fednova_average`; ``ρ`` = the client optimiser's ``momentum``). Buffers (e.g.
    BatchNorm statistics) take FedAvg's average.

    It differs from FedAvg only when clients take different numbers of steps: train with ``local_epochs`` (each client
    ``E`` epochs over its shard, ``τ_k = ⌈E·|D_k|/b⌉``). With ``T`` local iterations for every client it is FedAvg.

    Args:
        **kwargs: see :class:`~lightning_sfl.algorithms.fedavg.FedAvg` (``local_epochs``, ``local_batch_size``);
            ``nesterov`` is refused: the paper's ``‖a_i‖₁`` is derived for heavy-ball momentum only.
    """

    def __init__(self, **kwargs) -> None:
        if kwargs.get("nesterov"):
            raise ConfigError("nesterov=True: FedNova's ‖a_i‖₁ (eq. 7) is derived for heavy-ball momentum only")
        super().__init__(**kwargs)

    @torch.no_grad()
    @override
    def aggregate(self, step: Step) -> None:
        x = flat_parameters(self.client.net).detach()
        ys = slot_flat_parameters(self.bank, step.slots_list())  # [S, P]
        taus = self.local_steps(step.clients).to(ys.device)
        new_x = fednova_average(x, ys, taus, self.aggregation_weights(step).to(ys.device), self.momentum)
        super().aggregate(step)  # buffers and traffic as FedAvg
        load_flat_parameters(self.client.net, new_x)
