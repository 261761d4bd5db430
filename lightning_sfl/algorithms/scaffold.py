"""SCAFFOLD (Karimireddy et al., ICML 2020, Algorithm 1 with option II): FedAvg with control variates.

Client ``i`` starts from the global ``x`` and takes ``K`` local steps ``y ← y − η_l·(g_i(y) − c_i + c)`` (eq. 3), then
updates its control variate ``c_i⁺ = c_i − c + (x − y_i)/(K·η_l)`` (option II). The server sets
``x ← x + η_g·mean_{i∈S}(y_i − x)`` and ``c ← c + (1/N)·Σ_{i∈S}(c_i⁺ − c_i)`` (``N``: all clients). ``η_g = 1``, as in
the paper's experiments, so the model update is the average of the clients' models.

The correction ``c − c_i`` enters as the linear term ``⟨c − c_i, y⟩`` of each client's loss (its gradient), so it
goes through the same optimiser as the data gradient (with momentum or weight decay too, as in common
implementations). ``K`` is the client's local step count of the round and ``η_l`` the client learning rate.

State: ``c`` (``scaffold_c``, ``[P]``) and every client's ``c_i`` (``scaffold_client_c``, ``[N, P]``) over the flattened
parameters (order of ``client.net.parameters()``), checkpointed. Traffic: each round a client downloads ``c``
and uploads ``Δc_i``, each the size of the model's parameters, on top of FedAvg's model transfers.

>>> c_i, c, x, y = torch.tensor([0.5]), torch.tensor([0.25]), torch.tensor([1.0]), torch.tensor([0.8])
>>> control_variate_update(c_i, c, x, y, local_steps=2, lr=0.1).tolist()  # 0.5 - 0.25 + 0.2 / 0.2
[1.25]
"""

from __future__ import annotations

import torch
from typing_extensions import override

from lightning_sfl.algorithms.fedavg import FedAvg
from lightning_sfl.algorithms.registry import register
from lightning_sfl.loop import Step
from lightning_sfl.runtime.aggregate import (
    AVERAGES,
    averaging_weights,
    check_average,
    flat_parameters,
    parameter_zeros,
    slot_flat_parameters,
)
from lightning_sfl.system.comm import tensor_bytes

__all__ = ["AVERAGES", "Scaffold", "control_variate_update"]


def control_variate_update(
    c_i: torch.Tensor, c: torch.Tensor, x: torch.Tensor, y: torch.Tensor, local_steps: int | torch.Tensor, lr: float
) -> torch.Tensor:
    """Option II of SCAFFOLD: ``c_i⁺ = c_i − c + (x − y)/(K·η_l)`` (``[..., P]``; ``K`` a number or ``[..., 1]``)."""
    return c_i - c + (x - y) / (local_steps * lr)


@register("scaffold", family="fl")
class Scaffold(FedAvg):
    """SCAFFOLD (Karimireddy et al., ICML 2020), option II, ``η_g = 1``.

    Every client's ``c_k`` (``scaffold_client_c``, ``[K, P]``, 0 until it trains) is a per-client store: rows held
    for the clients that have trained, on disk beyond a memory budget, checkpointed incrementally
    (:mod:`~lightning_sfl.client_store`).

    Args:
        average: ``uniform`` (default: the paper's ``mean_{i∈S}``) or ``size`` (``|D_k|``-weighted, as FedAvg and
            several public implementations).
        **kwargs: see :class:`~lightning_sfl.algorithms.fedavg.FedAvg`.
    """

    def __init__(self, average: str = "uniform", **kwargs) -> None:
        check_average(average)
        super().__init__(**kwargs)
        self.average = average
        self.add_state("scaffold_c", lambda: parameter_zeros(self.client.net))
        self.add_client_state("scaffold_client_c", lambda: parameter_zeros(self.client.net))  # c_k, [K, P]

    @override
    def start_round(self, step: Step) -> None:
        """The clients download the global model and ``c``."""
        super().start_round(step)
        self.ledger.add("down", "control_variates", tensor_bytes(self.scaffold_c), step.slots)

    @override
    def client_regulariser(self, step: Step, logits: torch.Tensor, features: torch.Tensor | None) -> torch.Tensor:
        """``Σ_k ⟨c − c_k, y_k⟩`` over the slots: its gradient is the correction ``c − c_k`` of eq. (3)."""
        corrections = (self.scaffold_c - self.scaffold_client_c[step.clients]).to(logits.dtype)  # [S, P]
        total = logits.new_zeros(())
        for correction, slot in zip(corrections, step.slots_list()):
            total = total + torch.dot(correction, flat_parameters(self.bank.slots[slot]))
        return total

    @override
    def aggregation_weights(self, step: Step) -> torch.Tensor:
        return averaging_weights(self.average, super().aggregation_weights(step))

    @torch.no_grad()
    @override
    def aggregate(self, step: Step) -> None:
        """Control variates (option II), then the average of the clients' models; ``Δc_i`` travel up."""
        x = flat_parameters(self.client.net).detach()
        clients = step.clients
        ys = slot_flat_parameters(self.bank, step.slots_list())  # [S, P]
        steps = self.local_steps(clients).to(ys)[:, None]  # K of each client, [S, 1]
        old = self.scaffold_client_c[clients]
        new = control_variate_update(old, self.scaffold_c, x, ys, steps, self.lr)
        self.scaffold_client_c[clients] = new
        self.scaffold_c += (new - old).sum(dim=0) / self.scaffold_client_c.shape[0]
        super().aggregate(step)
        self.ledger.add("up", "control_variates", tensor_bytes(self.scaffold_c), step.slots)
