"""Exact communication accounting from tensor sizes and dtypes (pure functions + a small ledger).

>>> tensor_bytes(torch.zeros(4, 3, dtype=torch.float32))
48
>>> ledger = CommLedger()
>>> ledger.add("up", "activations", 100); ledger.add("down", "gradients", 100); ledger.add("up", "client_half", 8)
>>> ledger.totals()["up"], ledger.totals()["down"], ledger.totals()["total"]
(108, 100, 208)
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch import nn

DIRECTIONS: tuple[str, ...] = ("up", "down")
KINDS: tuple[str, ...] = ("activations", "labels", "gradients", "client_half", "server_half", "full_model")


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of one tensor as sent: ``numel × element_size``."""
    return t.numel() * t.element_size()


def module_bytes(module: nn.Module) -> int:
    """Bytes of a model half as sent: every entry of its state dict (parameters and buffers)."""
    return sum(tensor_bytes(v) for v in module.state_dict().values())


class CommLedger:
    """Bytes by ``(direction, kind)`` for the current round; :meth:`totals` sums them."""

    def __init__(self) -> None:
        self.bytes: dict[tuple[str, str], int] = defaultdict(int)

    def add(self, direction: str, kind: str, nbytes: int) -> None:
        if direction not in DIRECTIONS or kind not in KINDS:
            raise ValueError(f"unknown traffic {direction}/{kind}; directions {DIRECTIONS}, kinds {KINDS}")
        self.bytes[(direction, kind)] += int(nbytes)

    def reset(self) -> None:
        self.bytes.clear()

    def totals(self) -> dict[str, int]:
        """``{"up/<kind>": …, "down/<kind>": …, "up": …, "down": …, "total": …}`` for non-zero entries."""
        out = {f"{d}/{k}": v for (d, k), v in sorted(self.bytes.items())}
        for d in DIRECTIONS:
            out[d] = sum(v for (dd, _), v in self.bytes.items() if dd == d)
        out["total"] = out["up"] + out["down"]
        return out
