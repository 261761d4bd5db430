"""Checkpointed method state declared once (in the spirit of torchmetrics' ``add_state``), and the method's entry of
a checkpoint: what must survive a resume is kept, what is rebuilt every round is dropped.

>>> import lightning as L
>>> class Method(L.LightningModule):
...     def __init__(self):
...         super().__init__()
...         self._states = DeclaredStates()
...         self._states.add("h", lambda: torch.zeros(3))
>>> m = Method()
>>> m._states.build(m)
>>> "h" in m.state_dict()
True
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from lightning_sfl.client_store import ClientStore, client_stores, make_store  # noqa: F401 (client_stores: re-export)
from lightning_sfl.defences import renamed_legacy_state
from lightning_sfl.runtime.client_bank import ClientBank

__all__ = [
    "DeclaredStates", "banks_left_out", "dense_client_states", "load_client_stores",
    "load_method_entry", "save_method_entry",
]  # fmt: skip


class DeclaredStates:
    """The tensors a method declares that must survive a resume (FedDyn's ``h``, SplitFedV3's client halves;
    server-optimiser moments, control variates, buffers, activation statistics, queues). Their shape may depend on
    the federation (``K``, the model size), so ``init`` runs when a fit starts (:meth:`build`, after the client
    statistics are bound); each is then a persistent buffer of the method, saved in every checkpoint and restored on
    resume or ``load_from_checkpoint`` (outside ``fit`` it is created from the checkpoint's shape)."""

    def __init__(self) -> None:
        self.inits: dict[str, Callable[[], torch.Tensor]] = {}
        self.per_client: dict[str, tuple[Callable[[], int], Callable[[], torch.Tensor]]] = {}

    def add(self, name: str, init: Callable[[], torch.Tensor]) -> None:
        """Declare the checkpointed tensor ``<method>.<name>``, made by ``init()`` when a fit starts."""
        self.inits[name] = init

    def add_per_client(self, name: str, num_clients: Callable[[], int], default: Callable[[], torch.Tensor]) -> None:
        """Declare the per-client state ``<method>.<name>``: a
        :class:`~lightning_sfl.client_store.ClientStore` of ``num_clients()`` rows, each ``default()`` until written,
        made when a fit starts."""
        self.per_client[name] = (num_clients, default)

    def build(self, module: nn.Module) -> None:
        """Create every declared state of ``module`` that does not exist yet with the right shape (``setup("fit")``;
        a second ``fit``, or a restored run, keeps what it holds)."""
        for name, init in self.inits.items():
            value = init()
            existing = module._buffers.get(name)
            if existing is None or existing.shape != value.shape:
                module.register_buffer(name, value)
        for name, (num_clients, default) in self.per_client.items():
            make_store(module, name, num_clients(), default())

    def restore_shapes(self, module: nn.Module, state: dict[str, torch.Tensor]) -> None:
        """Create the declared states a fit's setup did not (``validate``/``test``/``load_from_checkpoint``) with the
        shapes of the checkpoint's tensors ``state``."""
        for name in self.inits:
            saved = state.get(name)
            existing = module._buffers.get(name)
            if saved is not None and (existing is None or existing.shape != saved.shape):
                module.register_buffer(name, torch.empty_like(saved))


def dense_client_states(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every store of ``module`` as the ``[K, *row]`` tensor it stands for (tests; small federations only)."""
    return {key: store.dense() for key, store in client_stores(module).items()}


def banks_left_out(method: nn.Module) -> tuple[str, ...]:
    """Prefixes of the client banks rebuilt every round (``bank.checkpointed`` false): not saved."""
    return tuple(f"{n}." for n, m in method.named_modules() if isinstance(m, ClientBank) and not m.checkpointed)


def save_method_entry(method: nn.Module, checkpoint: dict, algorithm: str, wandb_run: str | None) -> None:
    """The part of ``checkpoint`` of the ``method``'s modules (its banks rebuilt every round left out, its per-client
    stores' records); its own keys of the ``lightning_sfl`` entry (the other parts' stay): the algorithm's class path
    (``algorithm``, as the registry names it: :func:`~lightning_sfl.algorithms.registry.algorithm_path`) and the W&B
    run a resumed run continues (``wandb_run``; ``None``: none)."""
    drop = banks_left_out(method)
    checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if not k.startswith(drop)}
    entry = checkpoint.setdefault("lightning_sfl", {})
    entry["algorithm"] = algorithm
    stores = client_stores(method)
    if stores:  # incremental: each store writes the rows changed since its last save, the checkpoint its record
        entry["client_state"] = {key: store.save() for key, store in stores.items()}
    if wandb_run is not None:
        entry["wandb_id"] = wandb_run


#: What a semi-supervised baseline's checkpoint held of Semi-SFL's before the baselines had a base of their own.
SEMI_SFL_ONLY_STATE = ("projection.", "teacher_projection.", "queue_keys", "queue_labels", "queue_confident",
                       "queue_pointer")  # fmt: skip


def load_method_entry(method: nn.Module, checkpoint: dict, path: str | None) -> None:
    """Read the part of ``checkpoint`` (read from ``path``; ``None``: not from a file) of the ``method``'s modules
    before their state is loaded: keys of earlier versions renamed, the banks that were left out filled with their
    current values (strict loading), the declared states sized, the per-client stores opened."""
    checkpoint["state_dict"] = renamed_legacy_state(checkpoint["state_dict"])  # written before defences were parts
    state = checkpoint["state_dict"]
    if not hasattr(method, "projection"):  # Semi-SFL's head and queue, held unused by its baselines before
        for key in [k for k in state if k.startswith(SEMI_SFL_ONLY_STATE)]:
            del state[key]
    for prefix in banks_left_out(method):
        bank = method.get_submodule(prefix[:-1])
        state.update({f"{prefix}{k}": v for k, v in bank.state_dict().items()})
    method._states.restore_shapes(method, state)
    load_client_stores(method, checkpoint, path)


def load_client_stores(method: nn.Module, checkpoint: dict, path: str | None = None) -> None:
    """The per-client stores of the checkpoint: its records (their files read on first use, from the
    ``client_state/`` folder beside the checkpoint's ``path``, else where they were written), or the ``[K, *row]``
    tensors of a checkpoint written before stores."""
    records = checkpoint.get("lightning_sfl", {}).get("client_state", {})
    state = checkpoint["state_dict"]
    folders = [Path(path).parent / "client_state"] if path else []
    for key, record in records.items():
        owner, _, name = key.rpartition(".")
        module = method.get_submodule(owner) if owner else method
        make_store(module, name, int(record["num_clients"]), record["default"]).load(record, folders)
    for key in [k for k, v in state.items() if k not in records and isinstance(v, torch.Tensor)]:
        owner, _, name = key.rpartition(".")
        try:
            module = method.get_submodule(owner) if owner else method
        except AttributeError:  # not a module of this method: strict loading names it
            continue
        if name in per_client_names(module):
            rows = state.pop(key)
            store = ClientStore.from_dense(name, rows, rows.new_zeros(rows.shape[1:]))
            store.folder = getattr(getattr(module, name, None), "folder", None)  # where a fit's store writes
            setattr(module, name, store)


def per_client_names(module: nn.Module) -> set[str]:
    """The names of ``module``'s per-client stores (declared by a method, or a part's ``per_client_states``)."""
    declared = getattr(module, "_states", None)
    names = set(declared.per_client) if isinstance(declared, DeclaredStates) else set()
    return names | set(getattr(module, "per_client_states", ()))
