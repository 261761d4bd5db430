"""Per-client state that grows with the clients that have it, not with ``K``: FedDyn's ``∇L_k``, SCAFFOLD's ``c_k``,
FedBuff's ``h_i``, FedMatch's ``ψ_k``, SplitFedV3's client halves, SCALA-PE's decoders and their Adam moments.

A :class:`ClientStore` reads like a ``[K, *row]`` tensor (``store[clients]``, ``store[clients] = rows``,
``store.shape``) but holds a row only for a client that has been written; every other client's row is the store's
``default`` (zeros, or the common initial value). Rows live in memory up to a budget (``memory_budget`` bytes) and on
disk beyond it, memory-mapped from the files the store writes.

**Checkpoints are incremental.** :meth:`ClientStore.save` appends the rows written since the previous save to a new
file of the store's folder (``<checkpoint dirpath>/client_state/<name>/<uuid>.pt``: the rows and their clients) and
returns a small record, which the method puts in the checkpoint: the chain of files that rebuild the store, in order
(a later file's row wins). Files are never rewritten, so the record of any kept checkpoint still rebuilds exactly the
state it was saved with — after later rounds, after a run that resumed from an earlier checkpoint (its files are new
ones) and after a kill mid-round (files written since the record are not in its chain). When the chain grows past
:data:`CHAIN_LIMIT` files, a save writes every row once to one file and starts the chain anew. Each process of a DDP
run keeps its own files (``client_state/rank<r>/``): the state is the same on every process; rank 0's record is the
one a checkpoint keeps, and every process reads its files on resume (a shared file system, as for the checkpoint).

>>> store = ClientStore("c", num_clients=10_000, default=torch.zeros(3))
>>> store[torch.tensor([4, 7])] = torch.ones(2, 3)
>>> store[7], store[5]
(tensor([1., 1., 1.]), tensor([0., 0., 0.]))
>>> store.shape, store.rows_held()
(torch.Size([10000, 3]), 2)
>>> store.dense_limit = 0  # the sum over the held rows only (above DENSE_LIMIT numbers)
>>> store.weighted_sum(torch.ones(10_000))
tensor([2., 2., 2.])
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterable, Sized
from pathlib import Path

import torch
from torch import nn

from lightning_sfl.errors import ConfigError

__all__ = [
    "CHAIN_LIMIT", "DEFAULT_MEMORY_BUDGET", "DENSE_LIMIT", "ClientStore", "client_stores", "make_store",
    "set_memory_budget",
]  # fmt: skip

#: Bytes of rows a store keeps in memory before it writes them to its folder and reads them memory-mapped (1 GiB;
#: ``lightning-sfl fit --client_state_memory MiB`` sets it for a run: :func:`set_memory_budget`).
DEFAULT_MEMORY_BUDGET = 1 << 30
#: Numbers (``K`` times a row's) up to which a sum over all clients is one dense product: the arithmetic of a
#: ``[K, *row]`` tensor, bitwise, for the federations that fit in memory (64 MiB of float32).
DENSE_LIMIT = 1 << 24
#: Files in a record's chain before a save writes the whole state to one file.
CHAIN_LIMIT = 32

_budget = {"bytes": DEFAULT_MEMORY_BUDGET}


def set_memory_budget(num_bytes: int) -> None:
    """The memory budget of the stores created from now on (bytes, > 0)."""
    if not num_bytes > 0:
        raise ConfigError(f"client_state_memory={num_bytes / 2**20:g} MiB must be > 0")
    _budget["bytes"] = int(num_bytes)


class ClientStore(Sized):
    """Rows ``[K, *row_shape]`` of per-client state, held for the clients written (module docstring); ``len`` is
    ``K``.

    Args:
        name: the state's name (its folder, and its key in checkpoints).
        num_clients: ``K``.
        default: the row of a client never written, ``[*row_shape]`` (its dtype and device are the store's).
        memory_budget: bytes of rows held in memory; ``None``: the process's budget (:func:`set_memory_budget`).
    """

    def __init__(self, name: str, num_clients: int, default: torch.Tensor, memory_budget: int | None = None) -> None:
        self.name, self.num_clients = name, int(num_clients)
        self.default = default.detach().clone()
        self.memory_budget = _budget["bytes"] if memory_budget is None else int(memory_budget)
        self.dense_limit = DENSE_LIMIT  # sums over all clients: dense up to this many numbers (weighted_sum)
        self.folder: Path | None = None  # where its files go (bind_folder); a temporary one if it must spill first
        self._slot: dict[int, int] = {}  # client -> row of the in-memory slab
        self._slab = self.default.new_empty(0, *self.default.shape)  # [capacity, *row]
        self._clients_of_slot: list[int] = []
        self._dirty: set[int] = set()  # clients written since the last file
        self._on_disk: dict[int, tuple[int, int]] = {}  # client -> (file of the chain, its row there)
        self._files: list[tuple[str, torch.Tensor]] = []  # the chain: (path relative to the folder, rows mmapped)
        self._pending: tuple[dict, list[Path]] | None = None  # a record to read on first use (load)

    # ------------------------------------------------------------------ a [K, *row] tensor, for the methods
    @property
    def shape(self) -> torch.Size:
        return torch.Size([self.num_clients, *self.default.shape])

    @property
    def dtype(self) -> torch.dtype:
        return self.default.dtype

    @property
    def device(self) -> torch.device:
        return self.default.device

    def __len__(self) -> int:
        return self.num_clients

    def __getitem__(self, clients) -> torch.Tensor:
        """The rows of ``clients`` (an int: ``[*row]``; a list or a 1-D tensor of ``S`` ids: ``[S, *row]``)."""
        ids, single = self._ids(clients)
        rows = self.default.expand(len(ids), *self.default.shape).clone()
        held, where = [], []
        for i, client in enumerate(ids):
            if client in self._slot:
                held.append(i)
                where.append(self._slot[client])
            elif client in self._on_disk:
                file, row = self._on_disk[client]
                rows[i] = self._files[file][1][row].to(rows)
        if held:
            rows[torch.tensor(held, device=rows.device)] = self._slab[torch.tensor(where, device=rows.device)]
        return rows[0] if single else rows

    def __setitem__(self, clients, values) -> None:
        """Write the rows of ``clients`` (``values``: ``[S, *row]``, one row, or a number, broadcast)."""
        ids, _ = self._ids(clients)
        values = torch.as_tensor(values, dtype=self.dtype, device=self.device).detach()
        values = values.expand(len(ids), *self.default.shape)
        new = [c for c in dict.fromkeys(ids) if c not in self._slot]
        self._grow(len(new))
        for client in new:
            self._slot[client] = len(self._clients_of_slot)
            self._clients_of_slot.append(client)
        where = torch.tensor([self._slot[c] for c in ids], device=self.device)
        self._slab[where] = values
        self._dirty.update(ids)
        if self._slab_bytes(len(self._clients_of_slot)) > self.memory_budget:
            self._spill()

    def clients_held(self) -> torch.Tensor:
        """The clients with a row of their own, ascending, ``[T]`` int64."""
        self._read_pending()
        return torch.tensor(sorted({*self._slot, *self._on_disk}), dtype=torch.long)

    def rows_held(self) -> int:
        """``T``, the number of clients with a row of their own."""
        return len(self.clients_held())

    def weighted_sum(self, weights: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
        """``Σ_k w_k·row_k`` over all ``K`` clients, ``[*row]`` (``weights``: ``[K]``). Up to :data:`DENSE_LIMIT`
        numbers (``K`` times the row's), as one ``[K] @ [K, row]`` product over every row; beyond it, the held rows'
        sum, ``chunk`` clients at a time in ascending order, plus ``(Σ_{k not held} w_k)·default``: the same sum,
        rounded otherwise."""
        weights = weights.to(self.dtype).to(self.device)
        if self.num_clients * self.default.numel() <= self.dense_limit:
            return (weights @ self.dense().reshape(self.num_clients, -1)).reshape(self.default.shape)
        held = self.clients_held().to(self.device)
        total = (weights.sum() - weights[held].sum()) * self.default
        for start in range(0, len(held), chunk):
            part = held[start : start + chunk]
            total = total + torch.tensordot(weights[part], self[part], dims=1)
        return total

    def mean(self) -> torch.Tensor:
        """The mean row over all ``K`` clients, ``[*row]`` (as :meth:`weighted_sum`: one ``mean`` over every row up
        to :data:`DENSE_LIMIT` numbers)."""
        if self.num_clients * self.default.numel() <= self.dense_limit:
            return self.dense().mean(0)
        return self.weighted_sum(torch.ones(self.num_clients)) / self.num_clients

    def dense(self) -> torch.Tensor:
        """All ``K`` rows, ``[K, *row]`` (tests, small federations, old checkpoints' layout)."""
        return self[torch.arange(self.num_clients)]

    def apply(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """``fn`` on the held tensors (``Module._apply``: a device move or a dtype cast of the method)."""
        self.default = fn(self.default)
        self._slab = fn(self._slab)

    # ------------------------------------------------------------------ files and checkpoints
    def bind_folder(self, folder: Path | str, rank: int = 0) -> None:
        """Write files under ``<folder>/client_state/[rank<r>/]<name>/`` from now on."""
        base = Path(folder) / "client_state"
        self.folder = base if rank == 0 else base / f"rank{rank}"

    def save(self) -> dict:
        """Write the rows changed since the last file (nothing if none) and return the record a checkpoint keeps:
        ``{"num_clients", "default", "folder", "chain"}`` (the chain's paths relative to ``client_state/``)."""
        self._read_pending()
        if len(self._files) >= CHAIN_LIMIT:
            self._write(torch.arange(self.num_clients)[self._held_mask()], compact=True)
        elif self._dirty:
            self._write(torch.tensor(sorted(self._dirty)))
        base = self._base()
        return {
            "num_clients": self.num_clients,
            "default": self.default.cpu().clone(),
            "folder": str(base.resolve()),
            "chain": [path for path, _ in self._files],
        }

    def load(self, record: dict, folders: Iterable[Path | str] = ()) -> None:
        """Take the state a checkpoint's ``record`` names, read on first use from the first of ``folders`` (each a
        ``client_state/`` folder; the record's own comes last) that holds every file of its chain."""
        if int(record["num_clients"]) != self.num_clients:
            raise ConfigError(
                f"the checkpoint's {self.name} has {record['num_clients']} clients; this run has {self.num_clients}"
            )
        self.default = record["default"].to(self.default)
        self._slot, self._clients_of_slot, self._dirty, self._on_disk, self._files = {}, [], set(), {}, []
        self._slab = self.default.new_empty(0, *self.default.shape)
        self._pending = (record, [*map(Path, folders), Path(record["folder"])])

    @classmethod
    def from_dense(cls, name: str, rows: torch.Tensor, default: torch.Tensor) -> ClientStore:
        """A store holding ``rows`` ``[K, *row]`` (a checkpoint written before stores: every row that is not
        ``default``)."""
        store = cls(name, len(rows), default.to(rows))
        differs = (rows != store.default).reshape(len(rows), -1).any(dim=1)
        ids = differs.nonzero().flatten()
        if len(ids):
            store[ids] = rows[ids]
        return store

    # ------------------------------------------------------------------ inside
    def _ids(self, clients) -> tuple[list[int], bool]:
        self._read_pending()
        if isinstance(clients, int) or (torch.is_tensor(clients) and clients.dim() == 0):
            ids, single = [int(clients)], True
        else:
            ids, single = [int(c) for c in (clients.tolist() if torch.is_tensor(clients) else clients)], False
        bad = [c for c in ids if not 0 <= c < self.num_clients]
        if bad:
            raise IndexError(f"{self.name}: client {bad[0]} is not one of 0..{self.num_clients - 1}")
        return ids, single

    def _slab_bytes(self, rows: int) -> int:
        return rows * self.default.numel() * self.default.element_size()

    def _grow(self, more: int) -> None:
        need = len(self._clients_of_slot) + more
        if need <= len(self._slab):
            return
        capacity = max(need, 2 * len(self._slab), 8)
        slab = self._slab.new_empty(capacity, *self.default.shape)
        slab[: len(self._clients_of_slot)] = self._slab[: len(self._clients_of_slot)]
        self._slab = slab

    def _held_mask(self) -> torch.Tensor:
        mask = torch.zeros(self.num_clients, dtype=torch.bool)
        mask[list({*self._slot, *self._on_disk})] = True
        return mask

    def _base(self) -> Path:
        if self.folder is None:  # spilling or saving before a run bound a folder (the Python API without a trainer)
            self.folder = Path(tempfile.mkdtemp(prefix="client_state-"))
        return self.folder

    def _write(self, ids: torch.Tensor, compact: bool = False) -> None:
        """Append one file with the rows of ``ids`` (ascending) to the chain (``compact``: the chain is that file)."""
        rows = self[ids].cpu()
        relative = f"{self.name}/{uuid.uuid4().hex}.pt"
        path = self._base() / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        torch.save({"clients": ids.clone(), "rows": rows}, temporary)
        os.replace(temporary, path)  # a file of the chain is whole or absent
        if compact:
            self._files, self._on_disk = [], {}
        self._add_file(relative, path)
        self._dirty.clear()  # the slab keeps its rows (the latest): reads prefer it to the files

    def _add_file(self, relative: str, path: Path) -> None:
        content = torch.load(path, mmap=True, weights_only=True)
        index = len(self._files)
        self._files.append((relative, content["rows"]))
        for row, client in enumerate(content["clients"].tolist()):
            self._on_disk[client] = (index, row)

    def _spill(self) -> None:
        """Over budget: write the unsaved rows and read every row from the files from now on."""
        if self._dirty:
            self._write(torch.tensor(sorted(self._dirty)))
        self._slot, self._clients_of_slot = {}, []
        self._slab = self.default.new_empty(0, *self.default.shape)

    def _read_pending(self) -> None:
        if self._pending is None:
            return
        record, folders = self._pending
        self._pending = None
        chain = record["chain"]
        for folder in folders:
            if all((folder / relative).is_file() for relative in chain):
                break
        else:
            missing = next(r for r in chain if not (folders[-1] / r).is_file())
            raise ConfigError(
                f"the checkpoint's {self.name} is in files of its run's client_state/ folder, and "
                f"{folders[-1] / missing} is missing: keep client_state/ next to checkpoints/"
            )
        for relative in chain:
            self._add_file(relative, folder / relative)


def make_store(module: nn.Module, name: str, num_clients: int, default: torch.Tensor) -> ClientStore:
    """``module.<name>``, a :class:`ClientStore` of ``num_clients`` rows like ``default``: the one it holds if it has
    that shape (a second fit, a restored run), else a new one."""
    existing = getattr(module, name, None)
    if isinstance(existing, ClientStore) and existing.shape == (num_clients, *default.shape):
        return existing
    module._buffers.pop(name, None)
    store = ClientStore(name, num_clients, default)
    setattr(module, name, store)
    return store


def client_stores(module: nn.Module) -> dict[str, ClientStore]:
    """Every per-client store of ``module`` and its submodules, by ``<submodule path>.<name>``."""
    return {
        f"{path}.{name}" if path else name: value
        for path, sub in module.named_modules()
        for name, value in vars(sub).items()
        if isinstance(value, ClientStore)
    }
