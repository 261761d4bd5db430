"""Server optimisers on FedAvg's pseudo-gradient: FedAvgM, FedAdagrad, FedAdam, FedYogi.

Each round the clients train as in FedAvg and the server forms the pseudo-gradient ``Δ_t = Σ_k p_k (x_k − x_t)``
(``p_k = |D_k| / Σ_j |D_j|`` over the round's clients: FedAvg's average minus the global model, as Flower's
strategies form it; ``average="uniform"``: ``p_k = 1/|S|``, Reddi et al.'s Algorithm 2). FedAvg sets
``x_{t+1} = x_t + Δ_t``; these methods feed ``Δ_t`` to a server optimiser instead (Reddi et al., ICLR 2021,
Algorithm 2; Hsu et al., 2019, for FedAvgM). The optimisers act on the parameters; buffers (e.g. BatchNorm
statistics) take FedAvg's average. Their moments ``m`` and ``v`` are checkpointed states (flattened parameters,
order of ``client.net.parameters()``); nothing more travels than in FedAvg.

>>> x, delta = torch.tensor([1.0]), torch.tensor([0.5])
>>> m, v = torch.zeros(1), torch.full((1,), 1e-6)
>>> new_x, m, v = server_step("adam", x, delta, m, v, lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3)
>>> [round(float(t), 6) for t in (m, v, new_x)]  # m = 0.05, v = 0.99e-6 + 0.01 * 0.25
[0.05, 0.002501, 1.09802]
"""

from __future__ import annotations

from typing import ClassVar

import torch
from typing_extensions import override

from lightning_sfl.algorithms.fedavg import FedAvg
from lightning_sfl.algorithms.registry import register
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import Step
from lightning_sfl.runtime.aggregate import (
    averaging_weights,
    check_average,
    flat_parameters,
    load_flat_parameters,
    parameter_zeros,
)

__all__ = [
    "FedAdagrad", "FedAdam", "FedAvgM", "FedOpt", "FedYogi", "SERVER_OPTIMIZERS", "flower_bias_corrected_lr",
    "server_step",
]  # fmt: skip

#: The server optimisers :func:`server_step` knows.
SERVER_OPTIMIZERS = ("momentum", "adagrad", "adam", "yogi")


def server_step(
    kind: str,
    x: torch.Tensor,
    delta: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    lr: float,
    beta1: float,
    beta2: float = 0.0,
    tau: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One server step on the pseudo-gradient ``delta`` (``Δ_t``), all ``[P]``; returns ``(x_{t+1}, m_t, v_t)``.

    * ``momentum`` (FedAvgM, Hsu et al. 2019): ``m_t = β1·m_{t−1} + Δ_t``, ``x_{t+1} = x_t + η·m_t`` (``v`` unused);
    * ``adagrad``: ``v_t = v_{t−1} + Δ_t²``;
    * ``adam``: ``v_t = β2·v_{t−1} + (1 − β2)·Δ_t²``;
    * ``yogi``: ``v_t = v_{t−1} − (1 − β2)·Δ_t²·sign(v_{t−1} − Δ_t²)``;

    and for the three adaptive ones (Reddi et al. 2021, Algorithm 2, no bias correction)
    ``m_t = β1·m_{t−1} + (1 − β1)·Δ_t``, ``x_{t+1} = x_t + η·m_t / (√v_t + τ)``. Flower's ``FedAdam`` passes a
    bias-corrected ``η`` (:func:`flower_bias_corrected_lr`).
    """
    if kind == "momentum":
        m = beta1 * m + delta
        return x + lr * m, m, v
    m = beta1 * m + (1 - beta1) * delta
    square = delta * delta
    if kind == "adagrad":
        v = v + square
    elif kind == "adam":
        v = beta2 * v + (1 - beta2) * square
    elif kind == "yogi":
        v = v - (1 - beta2) * square * torch.sign(v - square)
    else:
        raise ConfigError(f"server optimiser {kind!r} is not one of: {', '.join(SERVER_OPTIMIZERS)}")
    return x + lr * m / (v.sqrt() + tau), m, v


def flower_bias_corrected_lr(lr: float, beta1: float, beta2: float, step: int) -> float:
    """The server learning rate of Flower's ``FedAdam`` at its ``step``-th server round (1, 2, …): Kingma & Ba's
    ``α_t = η·√(1 − β2^τ) / (1 − β1^τ)`` with ``τ = step + 1`` (Flower writes ``server_round + 1.0``, its rounds
    counted from 1). Reddi et al.'s Algorithm 2 has no such correction.

    >>> round(flower_bias_corrected_lr(0.1, 0.9, 0.99, 1), 6)  # 0.1 · √(1 − 0.99²) / (1 − 0.9²)
    0.074246
    """
    return lr * (1 - beta2 ** (step + 1)) ** 0.5 / (1 - beta1 ** (step + 1))


class FedOpt(FedAvg):
    """FedAvg with a server optimiser on the pseudo-gradient (Reddi et al., ICLR 2021, Algorithm 2).

    Subclasses name the optimiser (``server_optimizer``); the aggregation is FedAvg's, then :func:`server_step`.

    Args:
        server_lr: ``η``, the server learning rate.
        beta1: ``β1``, the decay of the first moment ``m`` (FedAvgM: the server momentum).
        beta2: ``β2``, the decay of the second moment ``v`` (Adam, Yogi).
        tau: ``τ``, the adaptivity (added to ``√v``).
        initial_second_moment: ``v_{−1}``; ``None``: ``τ²`` (Algorithm 2 asks ``v_{−1} ≥ τ²``). Flower's strategies
            start at 0. With τ = 10⁻³ the difference, 10⁻⁶, is not negligible where ``(1 − β2)·Δ² ≲ 10⁻⁶``, i.e.
            ``|Δ| ≲ 10⁻²`` for Adam and Yogi, which an independent check found for most coordinates on digits.
        bias_correction: FedAdam only: Flower's bias-corrected server rate (:func:`flower_bias_corrected_lr`);
            ``False`` (default): Algorithm 2's constant ``η``.
        average: how ``Δ_t`` averages the clients: ``size`` (default: ``|D_k|``-weighted, FedAvg's average, as
            Flower and our committed results) or ``uniform`` (Algorithm 2's ``(1/|S|) Σ_{i∈S} Δ_i``). They differ
            where the round's clients hold different amounts of data (quantity skew).
        **kwargs: see :class:`~lightning_sfl.algorithms.fedavg.FedAvg`.

    Where we follow Reddi et al.'s Algorithm 2 and where Flower (``flwr.server.strategy``) differs, per setting:

    * ``v_{−1}``: ours ``τ²``; Flower 0.
    * ``η_t``: ours ``η``; Flower's FedAdam bias-corrected (:func:`flower_bias_corrected_lr`), FedYogi and FedAdagrad
      ``η``.
    * ``τ``: ours 10⁻³; Flower's FedAdam and FedAdagrad 10⁻⁹, FedYogi 10⁻³.
    * ``β1``: ours 0.9; Flower's FedAdam and FedYogi 0.9, FedAdagrad 0 (fixed).
    * ``η``: FedAdam and FedAdagrad 0.1, FedYogi 0.01, in both.
    * ``Δ_t``: ours and Flower's ``|D_k|``-weighted; Algorithm 2's uniform (``average="uniform"``).

    ``FedAdam(tau=1e-9, initial_second_moment=0, bias_correction=True)``, ``FedYogi(initial_second_moment=0)`` and
    ``FedAdagrad(beta1=0, tau=1e-9, initial_second_moment=0)`` take Flower's steps (tested against a reference
    written from Flower's update lines).
    """

    server_optimizer: ClassVar[str] = "adam"

    def __init__(
        self,
        server_lr: float = 0.1,
        beta1: float = 0.9,
        beta2: float = 0.99,
        tau: float = 1e-3,
        initial_second_moment: float | None = None,
        bias_correction: bool = False,
        average: str = "size",
        **kwargs,
    ) -> None:
        if not server_lr > 0:
            raise ConfigError(f"server_lr={server_lr} must be > 0")
        if not 0 <= beta1 < 1:
            raise ConfigError(f"beta1={beta1} must be in [0, 1)")
        if not 0 <= beta2 < 1:
            raise ConfigError(f"beta2={beta2} must be in [0, 1)")
        if tau < 0 or (tau == 0 and self.server_optimizer != "momentum"):
            raise ConfigError(f"tau={tau} must be > 0")
        if initial_second_moment is not None and not initial_second_moment >= 0:
            raise ConfigError(f"initial_second_moment={initial_second_moment} must be >= 0 (or null for tau²)")
        check_average(average)
        if bias_correction and self.server_optimizer != "adam":
            raise ConfigError("bias_correction=True is Flower's FedAdam's: it applies to FedAdam only")
        super().__init__(**kwargs)
        self.server_lr, self.beta1, self.beta2, self.tau = server_lr, beta1, beta2, tau
        self.bias_correction, self.average = bias_correction, average
        self.initial_second_moment = self.tau**2 if initial_second_moment is None else float(initial_second_moment)
        self.add_state("server_m", lambda: parameter_zeros(self.client.net))
        self.add_state("server_v", lambda: parameter_zeros(self.client.net) + self.initial_second_moment)
        self.add_state("server_steps", lambda: torch.zeros((), dtype=torch.long))  # t: server steps taken

    @override
    def aggregation_weights(self, step: Step) -> torch.Tensor:
        return averaging_weights(self.average, super().aggregation_weights(step))

    @torch.no_grad()
    @override
    def aggregate(self, step: Step) -> None:
        """FedAvg's average gives ``Δ_t``; the server optimiser sets the parameters (eq. of :func:`server_step`)."""
        x = flat_parameters(self.client.net).detach()
        super().aggregate(step)  # client.net ← Σ_k p_k x_k (and the traffic)
        delta = flat_parameters(self.client.net).detach() - x
        self.server_steps += 1
        lr = self.server_lr
        if self.bias_correction:
            lr = flower_bias_corrected_lr(lr, self.beta1, self.beta2, int(self.server_steps))
        new_x, m, v = server_step(
            self.server_optimizer, x, delta, self.server_m, self.server_v, lr, self.beta1, self.beta2, self.tau
        )
        self.server_m.copy_(m)
        self.server_v.copy_(v)
        load_flat_parameters(self.client.net, new_x)


@register("fedadam", family="fl")
class FedAdam(FedOpt):
    """FedAdam (Reddi et al., ICLR 2021): Adam on the server. Defaults ``η = 0.1``, ``β1 = 0.9``, ``β2 = 0.99``,
    ``τ = 10⁻³`` (Reddi et al. grid-search ``η`` and ``τ``; Flower's defaults differ in ``τ``, ``v_{−1}`` and the bias
    correction: see :class:`FedOpt`)."""

    server_optimizer: ClassVar[str] = "adam"


@register("fedyogi", family="fl")
class FedYogi(FedOpt):
    """FedYogi (Reddi et al., ICLR 2021): Yogi on the server. Defaults ``η = 0.01``, ``β1 = 0.9``, ``β2 = 0.99``,
    ``τ = 10⁻³`` (Flower's ``FedYogi`` too, but for ``v_{−1}``: see :class:`FedOpt`)."""

    server_optimizer: ClassVar[str] = "yogi"

    def __init__(self, server_lr: float = 0.01, **kwargs) -> None:
        super().__init__(server_lr=server_lr, **kwargs)


@register("fedadagrad", family="fl")
class FedAdagrad(FedOpt):
    """FedAdagrad (Reddi et al., ICLR 2021): Adagrad on the server. Defaults ``η = 0.1``, ``β1 = 0.9``,
    ``τ = 10⁻³`` (``β2`` unused; Flower's ``FedAdagrad`` fixes ``β1 = 0``, uses ``τ = 10⁻⁹``: see :class:`FedOpt`)."""

    server_optimizer: ClassVar[str] = "adagrad"

    @classmethod
    @override
    def unused_options(cls) -> dict[str, str]:
        """``beta2``: Adagrad's second moment is a running sum, without a decay."""
        return {**super().unused_options(), "beta2": "FedAdagrad's second moment is a running sum (no decay β2)"}


@register("fedavgm", family="fl")
class FedAvgM(FedOpt):
    """FedAvgM (Hsu et al., 2019): server momentum ``m_t = β·m_{t−1} + Δ_t``, ``x_{t+1} = x_t + η·m_t``.

    Args:
        server_momentum: ``β`` (default 0.9, Hsu et al.'s value). With ``β = 0`` and ``η = 1`` it is FedAvg.
        server_lr: ``η`` (default 1.0).
        **kwargs: see :class:`~lightning_sfl.algorithms.fedavg.FedAvg`.
    """

    server_optimizer: ClassVar[str] = "momentum"
    #: FedOpt's settings that FedAvgM sets itself (``beta1`` is ``server_momentum``): given, each is refused.
    momentum_settings: ClassVar[dict[str, str]] = {
        "beta1": "FedAvgM's momentum is server_momentum",
        "beta2": "FedAvgM's momentum step has no second moment",
        "tau": "FedAvgM's momentum step has no second moment",
    }

    def __init__(self, server_momentum: float = 0.9, server_lr: float = 1.0, **kwargs) -> None:
        if not 0 <= server_momentum < 1:
            raise ConfigError(f"server_momentum={server_momentum} must be in [0, 1)")
        for name, why in self.momentum_settings.items():  # given, they would be overridden (or clash)
            if name in kwargs:
                raise ConfigError(f"{name}={kwargs[name]!r} changes nothing: {why}")
        super().__init__(server_lr=server_lr, beta1=server_momentum, beta2=0.0, tau=0.0, **kwargs)

    @classmethod
    @override
    def unused_options(cls) -> dict[str, str]:
        """``initial_second_moment``: the momentum step has no second moment (``beta1``, ``beta2`` and ``tau``, which
        it sets itself, are refused by its constructor)."""
        return {**super().unused_options(), "initial_second_moment": "FedAvgM's momentum step has no second moment"}
