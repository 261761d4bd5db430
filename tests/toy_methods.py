"""Methods written for the tests (importable by the CLI as ``--model toy_methods.<Name>`` when the tests folder is on
``PYTHONPATH``)."""

from __future__ import annotations

import torch

from lightning_sfl.algorithms import MiniBatchSFL
from lightning_sfl.loop import Step


class ProximalSFL(MiniBatchSFL):
    """MiniBatch-SFL whose clients add FedProx's proximal term ``(μ/2)‖w_k − w_c‖²`` on their halves: a regulariser of
    the parameters only, which every process computes in full (hook 5, ``client_regulariser``).

    Args:
        mu: ``μ >= 0``.
        **kwargs: see :class:`~lightning_sfl.algorithms.MiniBatchSFL`.
    """

    def __init__(self, mu: float = 1.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.mu = mu

    def client_regulariser(self, step: Step, outputs: torch.Tensor, features=None) -> torch.Tensor:
        global_params = [p.detach() for p in self.client.net.parameters()]
        total = outputs.new_zeros(())
        for k in step.slots_list():
            slot = self.bank.slots[k]
            total = total + sum((p - g).pow(2).sum() for p, g in zip(slot.parameters(), global_params))
        return 0.5 * self.mu * total


class ExitsItsProcess(MiniBatchSFL):
    """A method whose construction ends the process at once (``os._exit(7)``, as a crash in native code would):
    what a warm trial worker must survive as a pool (the trial fails, the next one runs in a new worker)."""

    def __init__(self, **kwargs) -> None:
        import os

        os._exit(7)
