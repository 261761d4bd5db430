"""Checkpointed method state declared once (in the spirit of torchmetrics' ``add_state``), and the checkpoint
hooks that keep what must survive a resume and drop what is rebuilt every round.

>>> import lightning as L
>>> class Method(MethodState, L.LightningModule):
...     def __init__(self):
...         super().__init__()
...         self.add_state("h", lambda: torch.zeros(3))
>>> m = Method()
>>> m.build_states()
>>> "h" in m.state_dict()
True
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from typing_extensions import override

from lightning_sfl import trainer_view
from lightning_sfl.algorithms.client_bank import ClientBank
from lightning_sfl.defences import renamed_legacy_state

__all__ = ["MethodState", "algorithm_path"]


def algorithm_path(cls: type) -> str:
    """The name a checkpoint records for a method's class: ``lightning_sfl.algorithms.<Name>`` for the library's
    methods (however they were imported or spelled in a config), ``module.Name`` for methods defined elsewhere."""
    import lightning_sfl.algorithms as library

    if getattr(library, cls.__name__, None) is cls:
        return f"lightning_sfl.algorithms.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


class MethodState:
    """Mixin for the coordinating ``LightningModule``: :meth:`add_state` declares a tensor that must survive a
    resume (FedDyn's ``h``, SplitFedV3's client halves; server-optimiser moments, control variates, buffers,
    activation statistics, queues). Its shape may depend on the federation (``K``, the model size), so ``init`` runs
    when a fit starts (:meth:`build_states`, after the client statistics are bound); the tensor is then a
    persistent buffer of the module, saved in every checkpoint and restored on resume or
    ``load_from_checkpoint`` (outside ``fit`` it is created from the checkpoint's shape).

    Client banks (:class:`~lightning_sfl.algorithms.client_bank.ClientBank`) are left out of checkpoints unless
    ``bank.checkpointed`` (slots that outlive a round). Every checkpoint records the algorithm's class.
    """

    def add_state(self, name: str, init: Callable[[], torch.Tensor]) -> None:
        """Declare the checkpointed tensor ``self.<name>``, made by ``init()`` when a fit starts. A module that
        already holds ``name`` with the same shape (a second ``fit``, or restored) keeps it."""
        if "_state_inits" not in self.__dict__:
            self.__dict__["_state_inits"] = {}
        self._state_inits[name] = init

    def state_names(self) -> tuple[str, ...]:
        return tuple(self.__dict__.get("_state_inits", {}))

    def build_states(self) -> None:
        """Create every declared state that does not exist yet with the right shape (``setup("fit")``)."""
        for name, init in self.__dict__.get("_state_inits", {}).items():
            value = init()
            existing = self._buffers.get(name)
            if existing is None or existing.shape != value.shape:
                self.register_buffer(name, value)

    def _banks_left_out(self) -> tuple[str, ...]:
        return tuple(f"{n}." for n, m in self.named_modules() if isinstance(m, ClientBank) and not m.checkpointed)

    @override
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Banks rebuilt every round are not saved; the checkpoint records the algorithm's class (its own keys of the
        ``lightning_sfl`` entry: the other parts' stay, whatever the order of the bases)."""
        super().on_save_checkpoint(checkpoint)
        drop = self._banks_left_out()
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if not k.startswith(drop)}
        checkpoint.setdefault("lightning_sfl", {})["algorithm"] = algorithm_path(type(self))
        run = trainer_view.wandb_run_id(getattr(self, "_trainer", None))
        if run is not None:  # the W&B run a resumed run continues
            checkpoint["lightning_sfl"]["wandb_id"] = run

    @override
    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Fill the banks that were left out with their current values (strict loading), and create declared states
        that a fit's setup did not (``validate``/``test``/``load_from_checkpoint``) from the checkpoint's tensors."""
        super().on_load_checkpoint(checkpoint)
        checkpoint["state_dict"] = renamed_legacy_state(checkpoint["state_dict"])  # written before defences were parts
        state = checkpoint["state_dict"]
        for prefix in self._banks_left_out():
            bank = self.get_submodule(prefix[:-1])
            state.update({f"{prefix}{k}": v for k, v in bank.state_dict().items()})
        for name in self.state_names():
            saved = state.get(name)
            existing = self._buffers.get(name)
            if saved is not None and (existing is None or existing.shape != saved.shape):
                self.register_buffer(name, torch.empty_like(saved))
