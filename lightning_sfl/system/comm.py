"""Exact communication accounting from tensor sizes and dtypes (pure functions + a per-round ledger).

>>> tensor_bytes(torch.zeros(4, 3, dtype=torch.float32))
48
>>> ledger = CommLedger()
>>> ledger.start(num_slots=2)
>>> ledger.add_rows("up", "activations", torch.zeros(3, 4), sizes=torch.tensor([1, 2]))  # 16 B a row
>>> ledger.add("down", "client_half", 100)  # to every client
>>> ledger.per_client("up").tolist(), ledger.per_client("down").tolist()
([16, 32], [100, 100])
>>> ledger.totals()["total"]
248
"""

from __future__ import annotations

import math

import torch
from torch import nn

DIRECTIONS: tuple[str, ...] = ("up", "down")
KINDS: tuple[str, ...] = (
    "activations",
    "labels",
    "gradients",
    "client_half",
    "server_half",
    "full_model",
    "control_variates",  # SCAFFOLD
    "psi",  # FedMatch: a client's unsupervised parameters ψ
    "helpers",  # FedMatch: other clients' ψ, sent as helpers
    "body_outputs",  # U-shaped split learning: the body's outputs H, down to the clients' tails
    "body_gradients",  # U-shaped: ∂L_k/∂H_k, up to the body
    "label_counts",  # U-shaped SCALA with pooled label counts: each client's counts, up
    "label_prior",  # U-shaped SCALA with pooled label counts: P_s, down
)


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of one tensor as sent: ``numel × element_size``."""
    return t.numel() * t.element_size()


def row_bytes(t: torch.Tensor) -> int:
    """Bytes of one row of ``t`` (``[B, ...]``), from its shape and dtype (also when ``B = 0``)."""
    return math.prod(t.shape[1:]) * t.element_size()


def module_bytes(module: nn.Module) -> int:
    """Bytes of a model half as sent: every entry of its state dict (parameters and buffers)."""
    return sum(tensor_bytes(v) for v in module.state_dict().values())


class CommLedger:
    """Bytes of the current round by ``(direction, kind)`` and client slot (``[S]`` int64 each).

    :meth:`add_rows` runs in every local iteration (three times in SCALA's), so it does no tensor work: it keeps its
    ``sizes`` and ``slots`` and the ledger sums them when read (:attr:`bytes`, :meth:`per_client`, :meth:`totals`).
    Callers must not modify those tensors in place afterwards (a step's ``sizes`` never are).
    """

    def __init__(self) -> None:
        self.num_slots = 0
        self._bytes: dict[tuple[str, str], torch.Tensor] = {}
        self._rows: dict[tuple[str, str, int], list[tuple[torch.Tensor, object]]] = {}
        self._dense: dict[tuple[str, str], list[tuple[torch.Tensor, int]]] = {}  # what compressed traffic stood for

    def start(self, num_slots: int) -> None:
        """Begin a round with ``num_slots`` participating clients."""
        self.num_slots = num_slots
        self._bytes, self._rows, self._dense = {}, {}, {}

    @property
    def bytes(self) -> dict[tuple[str, str], torch.Tensor]:
        """``(direction, kind) -> [S]`` bytes of each slot so far this round (rows recorded by :meth:`add_rows`
        included)."""
        rows, self._rows = self._rows, {}
        for (direction, kind, nbytes), entries in rows.items():  # one gather per kind and row size
            sizes = torch.cat([s.detach().reshape(-1) for s, _ in entries]).cpu().long()
            index = torch.cat([_slot_index(slots, len(s)) for s, slots in entries])
            self._entry(direction, kind).index_add_(0, index, sizes * nbytes)
        return self._bytes

    def _entry(self, direction: str, kind: str) -> torch.Tensor:
        _check_traffic(direction, kind)
        return self._bytes.setdefault((direction, kind), torch.zeros(self.num_slots, dtype=torch.long))

    def add(self, direction: str, kind: str, nbytes: int | torch.Tensor, slots=None, dense: int | None = None) -> None:
        """Record ``nbytes`` for every slot of ``slots`` (default all): an int (the same to each client) or one
        value per slot (``[len(slots)]``); ``dense``: what each slot would have sent uncompressed (for
        :meth:`compression_ratios`)."""
        entry = self._entry(direction, kind)
        if dense is not None:
            count = self.num_slots if slots is None else len(torch.as_tensor(slots).reshape(-1))
            self._dense.setdefault((direction, kind), []).append((torch.tensor([count]), int(dense)))
        value = torch.as_tensor(nbytes, dtype=torch.long).cpu()
        if slots is None:
            entry += value
        else:
            index = torch.as_tensor(slots, dtype=torch.long).cpu()
            entry.index_add_(0, index, value.expand(len(index)))

    def add_slot(self, direction: str, kind: str, slot: int, nbytes: int) -> None:
        """Record ``nbytes`` for one slot only."""
        self._entry(direction, kind)[slot] += int(nbytes)

    def add_rows(
        self,
        direction: str,
        kind: str,
        rows: torch.Tensor,
        sizes: torch.Tensor,
        slots=None,
        encoded: int | torch.Tensor | None = None,
    ) -> None:
        """Record a row-concatenated tensor (``[B, ...]``, ``sizes[i]`` rows of slot ``slots[i]``, default ``i``):
        ``sizes[i]`` times :func:`row_bytes` for each slot, summed when the ledger is read. ``encoded``: what the
        rows send compressed instead (:mod:`lightning_sfl.compression`): the bytes a row sends, or ``[len(sizes)]``
        the bytes of each slot's block (a scheme that encodes a client's rows together)."""
        _check_traffic(direction, kind)
        if encoded is not None:
            self._dense.setdefault((direction, kind), []).append((sizes, row_bytes(rows)))
        if isinstance(encoded, torch.Tensor):
            self._entry(direction, kind).index_add_(0, _slot_index(slots, len(sizes)), encoded.cpu().long())
            return
        per_row = row_bytes(rows) if encoded is None else int(encoded)
        self._rows.setdefault((direction, kind, per_row), []).append((sizes, slots))

    def compression_ratios(self) -> dict[str, float]:
        """``{"<direction>/<kind>": uncompressed bytes / bytes sent}`` of this round's compressed traffic (a kind
        sent through a compressor; :mod:`lightning_sfl.compression`).

        >>> ledger = CommLedger()
        >>> ledger.start(num_slots=1)
        >>> ledger.add_rows("up", "activations", torch.zeros(3, 100), sizes=torch.tensor([3]), encoded=100)
        >>> ledger.compression_ratios()  # 400 B a row sent as 100
        {'up/activations': 4.0}
        """
        sent = self.bytes
        out = {}
        for (direction, kind), entries in sorted(self._dense.items()):
            dense = sum(int(sizes.detach().sum()) * per_row for sizes, per_row in entries)
            encoded = int(sent[(direction, kind)].sum()) if (direction, kind) in sent else 0
            if encoded > 0:
                out[f"{direction}/{kind}"] = dense / encoded
        return out

    def per_client(self, direction: str) -> torch.Tensor:
        """Bytes each slot sent (``up``) or received (``down``) this round, ``[S]``."""
        out = torch.zeros(self.num_slots, dtype=torch.long)
        for (d, _), v in self.bytes.items():
            if d == direction:
                out += v
        return out

    def totals(self) -> dict[str, int]:
        """``{"up/<kind>": …, "down/<kind>": …, "up": …, "down": …, "total": …}`` summed over slots."""
        out = {f"{d}/{k}": int(v.sum()) for (d, k), v in sorted(self.bytes.items())}
        for d in DIRECTIONS:
            out[d] = int(self.per_client(d).sum())
        out["total"] = out["up"] + out["down"]
        return out


def _check_traffic(direction: str, kind: str) -> None:
    if direction not in DIRECTIONS or kind not in KINDS:
        raise ValueError(f"unknown traffic {direction}/{kind}; directions {DIRECTIONS}, kinds {KINDS}")


def _slot_index(slots, count: int) -> torch.Tensor:
    """Slots of ``count`` row blocks as a CPU index (``None``: ``0..count-1``)."""
    return torch.arange(count) if slots is None else torch.as_tensor(slots, dtype=torch.long).reshape(-1).cpu()
