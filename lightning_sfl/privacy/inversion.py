"""Inversion models (decoders from activations back to images) and the pieces that train many of them.

:func:`inversion_decoder` is ResSFL's ``conv_normN_AE`` with ``N = 0`` (``architectures_torch.py``): for activations
``[B, c, h, w]`` and images ``[B, C, H, W]`` with ``u = log2(H / h)`` upsamplings,

=======================================================  ==============================
``Conv2d(c → m, 3, p 1)`` + BN + ReLU                    ``[B, m, h, w]``
``max(2, u)`` blocks: the first ``u`` are
``ConvTranspose2d(m → m, 3, s 2, p 1, out_p 1)``,
the others ``Conv2d(m → m, 3, p 1)``; each + BN + ReLU   ``[B, m, h·2^u, w·2^u]``
(``Upsample(size=(H, W))`` if ``H/h`` is no power of 2)  ``[B, m, H, W]``
``Conv2d(m → C, 3, p 1)`` + BN + Sigmoid                 ``[B, C, H, W]`` in ``[0, 1]``
=======================================================  ==============================

``m = 16`` is SCALA-PE's simulated inversion model (journal §5.7, "a channel size of 16"), ``m = 64`` the attacker's.

SCALA-PE keeps one simulated inversion model per client, ``K`` of them, as rows of flat tensors (``[K, P]``
parameters, ``[K, Q]`` BatchNorm statistics, Adam's ``[K, P]`` moments): :class:`FlatModule` runs the template module
with one client's row (``torch.func.functional_call``) and :func:`adam_update` is ``torch.optim.Adam``'s update on
such a row (no ``amsgrad``, no weight decay).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from lightning_sfl.errors import ConfigError, whole_number

__all__ = ["FlatModule", "adam_update", "inversion_decoder"]


def inversion_decoder(activation_shape: tuple[int, ...], image_shape: tuple[int, ...], width: int) -> nn.Sequential:
    """A decoder ``[B, *activation_shape] -> [B, *image_shape]`` (see the module docstring). ``activation_shape``
    must be ``(c, h, w)`` with ``h <= H`` and ``w <= W``."""
    if len(activation_shape) != 3:
        raise ConfigError(
            f"an inversion model needs a convolutional cut ([C, H, W] activations), got shape {list(activation_shape)}"
        )
    m = whole_number("decoder width", width)
    (c, h, w), (out_c, out_h, out_w) = activation_shape, image_shape
    if h > out_h or w > out_w:
        raise ConfigError(f"activations {list(activation_shape)} are larger than the images {list(image_shape)}")
    ups = max(0, int(math.floor(math.log2(min(out_h / h, out_w / w)))))
    layers: list[nn.Module] = [nn.Conv2d(c, m, 3, padding=1), nn.BatchNorm2d(m), nn.ReLU()]
    for i in range(max(2, ups)):
        if i < ups:
            layers.append(nn.ConvTranspose2d(m, m, 3, stride=2, padding=1, output_padding=1))
        else:
            layers.append(nn.Conv2d(m, m, 3, padding=1))
        layers += [nn.BatchNorm2d(m), nn.ReLU()]
    if (h * 2**ups, w * 2**ups) != (out_h, out_w):
        layers.append(nn.Upsample(size=(out_h, out_w), mode="bilinear", align_corners=False))
    layers += [nn.Conv2d(m, out_c, 3, padding=1), nn.BatchNorm2d(out_c), nn.Sigmoid()]
    return nn.Sequential(*layers)


class FlatModule:
    """Runs ``template`` with parameters and floating-point buffers taken from flat vectors ``[P]`` and ``[Q]`` (one
    client's row of the stores), in the order of ``named_parameters()``/``named_buffers()``. Integer buffers
    (BatchNorm's ``num_batches_tracked``, unused when ``momentum`` is set) stay the template's."""

    def __init__(self, template: nn.Module) -> None:
        self.template = template
        self.params = [(n, p.shape, p.numel()) for n, p in template.named_parameters()]
        self.buffers = [(n, b.shape, b.numel()) for n, b in template.named_buffers() if b.is_floating_point()]

    def flat_parameters(self) -> Tensor:
        """The template's parameters as one vector ``[P]`` (detached)."""
        return torch.cat([p.detach().reshape(-1) for p in self.template.parameters()])

    def flat_buffers(self) -> Tensor:
        """The template's floating-point buffers as one vector ``[Q]``."""
        named = dict(self.template.named_buffers())
        return torch.cat([named[n].detach().reshape(-1) for n, _, _ in self.buffers])

    @staticmethod
    def _unflatten(vector: Tensor, layout) -> dict[str, Tensor]:
        chunks = vector.split([n for _, _, n in layout])
        return {name: chunk.view(shape) for (name, shape, _), chunk in zip(layout, chunks)}

    def __call__(self, params: Tensor, buffers: Tensor, x: Tensor, train: bool) -> Tensor:
        """The template on ``x`` with weights ``params`` ``[P]`` (gradients flow to it) and statistics ``buffers``
        ``[Q]`` (a view into a store: in ``train`` mode BatchNorm updates it in place; else it uses them)."""
        was = self.template.training
        self.template.train(train)
        try:
            state = {**self._unflatten(params, self.params), **self._unflatten(buffers, self.buffers)}
            return torch.func.functional_call(self.template, state, (x,))
        finally:
            self.template.train(was)


@torch.no_grad()
def adam_update(
    param: Tensor,
    grad: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    step: int,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> None:
    """One Adam step (Kingma & Ba, Algorithm 1; ``torch.optim.Adam``'s arithmetic), in place on ``param``,
    ``exp_avg`` and ``exp_avg_sq``; ``step`` is the step's number ``t >= 1``:
    ``m ← β1·m + (1−β1)·g``, ``v ← β2·v + (1−β2)·g²``, ``θ ← θ − lr/(1−β1^t) · m / (√v/√(1−β2^t) + ε)``."""
    beta1, beta2 = betas
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1**step))
