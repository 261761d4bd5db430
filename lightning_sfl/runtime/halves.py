"""The two halves of a split model as modules, and the cut (:func:`split_halves`): the client half ``h(w_c; X)`` and
the server half ``l(w_s; A)`` of :class:`~lightning_sfl.algorithms.base.SplitFedAlgorithm`."""

from __future__ import annotations

import lightning as L
import torch
from torch import nn
from typing_extensions import override

from lightning_sfl.errors import ConfigError
from lightning_sfl.models import SplittableModel, split_model

__all__ = ["DEFAULT_SPLIT_POINT", "ClientModule", "ServerModule", "split_halves"]


class ClientModule(L.LightningModule):
    """Client-side half ``h(w_c; X) -> A``: ``[B, C, H, W] -> [B, *activation_shape]``."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ServerModule(L.LightningModule):
    """Server-side half ``l(w_s; A) -> s``: ``[B, *activation_shape] -> [B, N]`` logits."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    @override
    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return self.net(a)


#: The cut point when none is given (methods without a server half take the whole model and ignore it).
DEFAULT_SPLIT_POINT = "s2"


def split_halves(
    model: SplittableModel, split_point: str, has_server_half: bool
) -> tuple[nn.Sequential, nn.Sequential]:
    """The client half ``[B, *input_shape] -> [B, *act]`` and the server half ``[B, *act] -> [B, N]`` of ``model`` cut
    at ``split_point``; without a server half (plain FL) the whole model and an empty server."""
    if not has_server_half:
        if split_point != DEFAULT_SPLIT_POINT:  # (unused, but a cut point the model lacks is a mistake: one line)
            split_model(model, split_point)
        return model[:], nn.Sequential()
    client, server = split_model(model, split_point)
    if not any(True for _ in client.parameters()):  # nothing for the clients to train: no split method can run
        raise ConfigError(
            f"split_point={split_point!r} of model {model.name!r} leaves the clients no parameters to train; a split "
            f"method needs a client half with weights (another cut or model), or use an FL method (--model fedavg)"
        )
    return client, server
