"""A bottleneck at the cut (SCALA journal §5.7; ResSFL): fewer channels cross the cut."""

from __future__ import annotations

from typing_extensions import override

from lightning_sfl.defences.base import Defence
from lightning_sfl.errors import whole_number
from lightning_sfl.models import add_bottleneck

__all__ = ["Bottleneck"]


class Bottleneck(Defence):
    """The client half ends with ``Conv2d(C → b)`` and the server half starts with ``Conv2d(b → C)``
    (:func:`~lightning_sfl.models.add_bottleneck`; SCALA-PE uses 8), so ``b`` channels cross the cut: activations
    ``[B, C, H, W]`` become ``[B, b, H, W]``, and the traffic shrinks with them. Needs a convolutional cut.

    Args:
        channels: ``b >= 1``.
    """

    key = "bottleneck"

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.channels = whole_number("Bottleneck: channels", channels)

    @override
    def build_halves(self, client, server, input_shape):
        return add_bottleneck(client, server, self.channels, input_shape)
