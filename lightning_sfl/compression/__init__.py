"""Compressors of what crosses the network, as components a method is given (``--model.compression``, a list, like
the defences: ``--model.compression+=TopK --model.compression.ratio 0.1``). Each compresses one crossing
(``crossing``, :data:`~lightning_sfl.compression.base.CROSSINGS`): the clients' activations up (``activations``),
the server's gradients down (``gradients``), U-shaped runs' body outputs down and the tails' gradients up
(``body_outputs``, ``body_gradients``), and the clients' uploaded models (``model``: each client's update from the
round's global model, for the FL methods too). The receiver trains on what it decodes, the clients backpropagate
what they decode, the server averages the updates it decodes, and the ledger counts the encoded bytes
(:mod:`~lightning_sfl.system.comm`). Order: the defences first, then the compression (what leaves a client is
defended, then encoded).

==============================  ======================================================================================
compressor                      what a row sends
==============================  ======================================================================================
:class:`TopK`                   the ``k = ⌈r·d⌉`` entries of largest magnitude and their indices (``uint16``
                                up to 65,536 entries a row, else ``int32``); gradient through the mask
:class:`RandomTopK`             ``k`` entries drawn preferring the top-k (Zheng et al., IJCAI 2023), at
                                top-k's bytes; plain top-k at evaluation
:class:`Quantise`               ``b``-bit codes of ``(a − m)/s`` packed, and the row's ``m`` and ``s``
                                (uniform quantisation, optional stochastic rounding); straight-through
:class:`QSGD`                   the row's norm, and a sign bit and a ``⌈log2(s+1)⌉``-bit level an entry
                                (unbiased; Alistarh et al., NeurIPS 2017), meant for the model updates
:class:`CircularConvolution`    ``R`` rows of a client bound to fixed random keys by circular convolution
                                into one (C3-SL, Hsieh et al., MLSP 2022); gradients travel back so
==============================  ======================================================================================

The pure encode/decode functions are in :mod:`lightning_sfl.compression.functional`. Identity settings (``ratio=1``,
``bits=32``) send the dense rows and give runs bitwise equal to uncompressed ones.
"""

from __future__ import annotations

from lightning_sfl.compression.base import CROSSINGS, Compression, Compressor
from lightning_sfl.compression.base import resolve_compression as _resolve
from lightning_sfl.compression.quantise import QSGD, Quantise
from lightning_sfl.compression.sparse import RandomTopK, TopK
from lightning_sfl.compression.structured import CircularConvolution
from lightning_sfl.known import register_component_kind

__all__ = [
    "COMPRESSORS", "CROSSINGS", "QSGD", "CircularConvolution", "Compression", "Compressor", "Quantise", "RandomTopK",
    "TopK", "resolve_compression",
]  # fmt: skip

#: Short name -> class of every compressor of the library.
#:
#: :meta hide-value:
COMPRESSORS: dict[str, type[Compressor]] = {
    cls.__name__: cls for cls in (TopK, RandomTopK, Quantise, QSGD, CircularConvolution)
}
register_component_kind("compression", Compressor, COMPRESSORS)  # what a checkpoint may name


def resolve_compression(value) -> list[Compressor]:
    """The one place a ``compression`` setting becomes compressors
    (:func:`~lightning_sfl.compression.base.resolve_compression` against :data:`COMPRESSORS`)."""
    return _resolve(value, COMPRESSORS)
