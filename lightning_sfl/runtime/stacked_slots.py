"""Per-slot views of a :class:`~lightning_sfl.runtime.stacked_bank.StackedBank` (``bank.slots``; typed ``nn.Module``
here, which it is: the bank's module imports this one, not the other way round): each slot as a module-like object
over row ``k`` of the stacked tensors.

A read-only sequence of :class:`StackedSlot` views with ``parameters()``, ``named_parameters()``, ``buffers()``,
``state_dict()``, ``load_state_dict()`` and ``__call__`` (run slot ``k`` alone). Parameters are differentiable aliases
of row ``k`` of the stacked parameters (gradients of any expression in them flow into the stacked tensors), and
assigning their ``.data`` (what ``vector_to_parameters`` does) copies INTO the stacked storage in place
(:class:`SlotTensor`). ``state_dict()`` holds detached views that share memory with the bank.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import torch
from torch import nn
from torch.func import functional_call
from typing_extensions import override

__all__ = ["SlotTensor", "StackedSlot", "StackedSlots"]

Tensors = dict[str, torch.Tensor]


class SlotTensor(torch.Tensor):
    """Alias of row ``k`` of a stacked tensor, returned by :meth:`StackedSlot.parameters`.

    It is an ordinary tensor in every operation (the results are plain tensors and stay in the autograd graph
    of the stacked parameter), except that **assigning** ``.data`` copies into the shared storage instead of
    rebinding the alias, so ``torch.nn.utils.vector_to_parameters(v, slot.parameters())`` writes slot ``k`` of
    the bank in place. Its ``.grad`` is always ``None``: gradients accumulate on the stacked parameters.
    """

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    @override
    def data(self) -> torch.Tensor:
        return torch._C.TensorBase.data.__get__(self)

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        bank = getattr(self, "_bank", None)
        if bank is not None:
            bank._fresh = False  # this slot now differs from the others: it must stay in its row
        with torch.no_grad():
            torch._C.TensorBase.data.__get__(self).copy_(value)


class StackedSlot:
    """Read-only-structure view of slot ``index`` of a
    :class:`~lightning_sfl.runtime.stacked_bank.StackedBank` (see the module docstring)."""

    def __init__(self, bank: nn.Module, index: int) -> None:
        self.bank, self.index = bank, index

    @property
    def row(self) -> int:
        """Row of the stacked tensors that holds this slot (the bank's
        :attr:`~lightning_sfl.runtime.stacked_bank.StackedBank.rows`)."""
        return self.bank.rows[self.index]

    @override
    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, SlotTensor]]:
        """``(name, alias of row k)`` in the template's parameter order; differentiable, writable via ``.data``."""
        for name, p in zip(self.bank.param_names, self.bank.stacked_params):
            alias = p[self.row].as_subclass(SlotTensor)
            alias._bank = self.bank
            yield prefix + name, alias

    @override
    def parameters(self, recurse: bool = True) -> Iterator[SlotTensor]:
        for _, p in self.named_parameters():
            yield p

    @override
    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
        """``(name, view of row k)``: in-place changes (BatchNorm running statistics) write into the bank."""
        for name, b in zip(self.bank.buffer_names, self.bank.stacked_buffers()):
            yield prefix + name, b[self.row]

    @override
    def buffers(self, recurse: bool = True) -> Iterator[torch.Tensor]:
        for _, b in self.named_buffers():
            yield b

    @override
    def state_dict(self, keep_vars: bool = False) -> Tensors:
        """The template's state-dict keys mapped to DETACHED VIEWS of slot ``k`` (shared memory, like
        ``nn.Module.state_dict``: clone to keep a snapshot); ``keep_vars=True`` keeps the autograd aliases."""
        if keep_vars:
            tensors = {**dict(self.named_parameters()), **dict(self.named_buffers())}
        else:
            tensors = {name: t.detach()[self.row] for name, t in self.bank.named_stacked().items()}
        return {key: tensors[key] for key in self.bank.state_keys}

    @torch.no_grad()
    @override
    def load_state_dict(self, state: Mapping[str, torch.Tensor], strict: bool = True) -> None:
        """Copy ``state`` into slot ``k`` in place (the bank's Parameter objects are kept)."""
        targets = {**dict(zip(self.bank.param_names, self.bank.stacked_params)), **self.bank.named_stacked_buffers()}
        if strict and set(state) != set(self.bank.state_keys):
            raise KeyError(f"state keys {sorted(state)} do not match the slot's {list(self.bank.state_keys)}")
        self.bank._fresh = False
        for key, value in state.items():
            if key in targets:
                targets[key][self.row].copy_(value)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Slot ``k`` alone on ``[B_k, ...]`` (updates its running statistics in train mode, like the module)."""
        return self.forward(x)

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.bank._sync_mode()
        params = {n: p[self.row] for n, p in zip(self.bank.param_names, self.bank.stacked_params)}
        buffers = {n: b[self.row] for n, b in zip(self.bank.buffer_names, self.bank.stacked_buffers())}
        return functional_call(self.bank.template, (params, buffers), (x,))

    def __repr__(self) -> str:
        return f"StackedSlot(index={self.index}, of {len(self.bank)})"


class StackedSlots(Sequence):
    """``bank.slots``: ``len``, indexing (negative too) and iteration over :class:`StackedSlot` views."""

    def __init__(self, bank: nn.Module) -> None:
        self.bank = bank

    def __len__(self) -> int:
        return len(self.bank)

    def __getitem__(self, index: int | slice) -> StackedSlot | list[StackedSlot]:
        if isinstance(index, slice):
            return [StackedSlot(self.bank, k) for k in range(len(self))[index]]
        k = range(len(self))[index]  # IndexError and negative indices as for a list
        return StackedSlot(self.bank, k)
