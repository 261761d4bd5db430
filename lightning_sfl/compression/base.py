"""The compressor's contract (:class:`Compressor`), a method's compressors by crossing (:class:`Compression`) and the
one place a ``compression`` setting becomes compressors (:func:`resolve_compression`)."""

from __future__ import annotations

import copy
from typing import ClassVar

import torch
from torch import nn

from lightning_sfl.errors import ConfigError
from lightning_sfl.known import component_config, known_class

__all__ = ["CROSSINGS", "Compression", "Compressor", "resolve_compression"]

#: The crossings a compressor may take, each with what crosses it: a split run's activations up and gradients down,
#: a U-shaped run's body outputs down and the tails' gradients up, and the clients' uploaded models (the client
#: half's or, in plain FL, the whole model's update).
CROSSINGS: dict[str, str] = {
    "activations": "the clients' activations, up",
    "gradients": "the server's gradients of the activations, down",
    "body_outputs": "U-shaped: the body's outputs, down to the tails",
    "body_gradients": "U-shaped: the tails' gradients of the body's outputs, up",
    "model": "each client's uploaded model, as its update from the round's global model",
}


class Compressor(nn.Module):
    """A compressor of one crossing (:data:`CROSSINGS`): :meth:`compress` gives what the receiver decodes (``[B, ...]``,
    with the gradient the scheme defines) and the bytes one row sends. A row is one sample's activation or gradient,
    or (``model``) one client's update, flattened.

    Args:
        crossing: one of :data:`CROSSINGS`.
        error_feedback: ``model`` crossing only: each client adds to its update what its previous uploads' encodings
            left out (``e ← Δ + e − decode(encode(Δ + e))``, Seide et al. 2014; Karimireddy et al. 2019), kept per
            client (a per-client store: memory grows with the clients that uploaded). Refused on the other crossings:
            their rows are other samples at every step, so no error has a row to go back to.
    """

    def __init__(self, crossing: str = "activations", error_feedback: bool = False) -> None:
        super().__init__()
        if crossing not in CROSSINGS:
            raise ConfigError(f"{type(self).__name__}: crossing={crossing!r} must be one of: {', '.join(CROSSINGS)}")
        if error_feedback and crossing != "model":
            raise ConfigError(
                f"{type(self).__name__}: error_feedback=True is kept per client for crossing='model' only (the rows "
                f"of the {crossing} crossing are other samples at every step)"
            )
        self.crossing, self.error_feedback = crossing, bool(error_feedback)

    @property
    def draws(self) -> bool:
        """Whether :meth:`compress` draws random numbers (it is then given the step's generator)."""
        return False

    def identity(self, width: int) -> bool:
        """Whether rows of ``width`` entries are sent dense and unchanged (the scheme's identity setting)."""
        return False

    def config(self) -> dict:
        """``{"class_path": ..., "init_args": {...}}``: this compressor as a config (what checkpoints record)."""
        return component_config(self, "lightning_sfl.compression")

    @property
    def carries_gradients(self) -> bool:
        """Whether the gradients back travel in this scheme's encoding too (C3-SL): counted at its bytes, and no
        compressor of their own."""
        return False

    def block_bytes(self, sizes: list[int], width: int, value_bytes: int) -> torch.Tensor | None:
        """``[S]`` bytes of each client block of ``sizes`` rows, for a scheme whose bytes are not a row's
        (:attr:`carries_gradients`: the gradients back are counted so); ``None``: a row's."""
        return None

    def compress(
        self, rows: torch.Tensor, generator: torch.Generator | None = None, sizes: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, int | torch.Tensor]:
        """``(decoded [B, ...], bytes sent)`` for ``rows`` ``[B, ...]``: the bytes a row sends (an int), or, for a
        scheme that encodes a client's rows together, ``[S]`` bytes of each client block (``sizes``: the rows of each
        block, ``[S]``; ``None``: one block); ``generator``: the step's draws."""
        raise NotImplementedError

    def evaluate(self, rows: torch.Tensor) -> torch.Tensor:
        """What the receiver decodes of ``rows`` when the global model is evaluated (deterministic: stochastic
        rounding rounds to nearest); by default :meth:`compress` without draws."""
        return self.compress(rows)[0]


def resolve_compression(value, names: dict[str, type[Compressor]]) -> list[Compressor]:
    """The one place a ``compression`` setting becomes compressors: a list of :class:`Compressor` objects (copied) or
    configs ``{"class_path": ..., "init_args": {...}}`` (how checkpoints record them; never imported on a file's
    word: a class path is resolved against ``names`` and the library's modules)."""
    if not isinstance(value, list | tuple):
        raise ConfigError(f"compression={value!r} must be a list of compressors (e.g. --model.compression+=TopK)")
    out = []
    for item in value:
        if isinstance(item, Compressor):
            out.append(copy.deepcopy(item))
            continue
        cls = known_class(str(item["class_path"]), Compressor, names=names) if isinstance(item, dict) else None
        if cls is None:
            raise ConfigError(f"compression: {item!r} is not a compressor; one of: {', '.join(names)}")
        out.append(cls(**(item.get("init_args") or {})))
    return out


class Compression(nn.ModuleDict):
    """A method's compressors, one per crossing at most (``method.compression``); a crossing without one sends its
    rows dense."""

    def __init__(self, compressors: list[Compressor] = ()) -> None:
        super().__init__()
        for compressor in compressors:
            if compressor.crossing in self:
                raise ConfigError(f"compression: two compressors of the {compressor.crossing} crossing")
            self[compressor.crossing] = compressor

    def configs(self) -> list[dict]:
        """The compressors as configs (the hyperparameters)."""
        return [c.config() for c in self.values()]

    def compress(
        self, crossing: str, rows: torch.Tensor, seed: int = 0, sizes: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, int | torch.Tensor | None]:
        """``(what the receiver decodes, bytes sent)`` on ``crossing`` (a row's, or ``[S]`` per client block of
        ``sizes`` rows: :meth:`Compressor.compress`); ``(rows, None)`` without a compressor there (the ledger then
        counts the dense rows), the gradients of a scheme that carries them counted at its bytes. ``seed``: the
        step's, for a compressor that draws, each crossing its own stream."""
        if crossing not in self:
            carried = self._carrier(crossing)
            if carried is None:
                return rows, None
            blocks = [len(rows)] if sizes is None else sizes.tolist()
            return rows, carried.block_bytes(blocks, rows[0].numel() if len(rows) else 0, rows.element_size())
        compressor = self[crossing]
        generator = None
        if compressor.draws:
            generator = torch.Generator().manual_seed(seed * len(CROSSINGS) + list(CROSSINGS).index(crossing))
        return compressor.compress(rows, generator, sizes)

    #: The crossing whose compressor may carry each crossing's gradients back.
    GRADIENTS_OF: ClassVar[dict[str, str]] = {"gradients": "activations", "body_gradients": "body_outputs"}

    def _carrier(self, crossing: str) -> Compressor | None:
        forward = self.GRADIENTS_OF.get(crossing)
        compressor = self[forward] if forward in self else None
        return compressor if compressor is not None and compressor.carries_gradients else None

    def check(self) -> None:
        """A gradients' compressor beside a scheme that carries them is refused (one line)."""
        for crossing in self.GRADIENTS_OF:
            if crossing in self and self._carrier(crossing) is not None:
                name = type(self._carrier(crossing)).__name__
                raise ConfigError(f"compression: {name} carries the {crossing} back in its encoding: drop theirs")

    def one_process_only(self) -> str | None:
        """What of the compression runs on one process only: draws or groups over the rows of a row crossing (each
        process holds a shard of every client's rows); the model exchange's draws are the same on every process."""
        for name, compressor in self.items():
            if name != "model" and (compressor.draws or compressor.carries_gradients):
                what = type(compressor).__name__
                return f"{what} on the {name} crossing (its draws or groups follow one process's rows)"
        return None

    def evaluate(self, crossing: str, rows: torch.Tensor) -> torch.Tensor:
        """What the receiver decodes of ``rows`` on ``crossing`` when the global model is evaluated."""
        return self[crossing].evaluate(rows) if crossing in self else rows

    def drawing(self) -> list[str]:
        """The crossings whose compressor draws random numbers."""
        return [name for name, compressor in self.items() if compressor.draws]
