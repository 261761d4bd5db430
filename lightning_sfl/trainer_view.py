"""What a method or the data module may know of its run, read from Lightning's ``Trainer`` in this one place: the
stage (fit, validate, test), the run length, the round the next epoch trains, the device, the process group (rank,
world size, the model DDP wraps), the input precision and the W&B run the run logs to. ``algorithms/`` and ``data/``
read nothing else of a trainer (``tests/unit/test_architecture.py`` holds them to it).

Each function takes the trainer, or ``None`` for a part not attached to one (a module outside ``fit``), where that
has a meaning: one process, rank 0, round 0, the CPU, no precision conversion.

>>> rank_and_world(None), next_round(None), is_fitting(None)
((0, 1), 0, False)
"""

from __future__ import annotations

import torch
from lightning.pytorch.loggers import WandbLogger  # the CLI's logger subclasses it
from lightning.pytorch.trainer.states import TrainerFn

__all__ = [
    "checkpoint_folder",
    "checkpoint_path",
    "ddp_model",
    "device",
    "in_input_precision",
    "is_fitting",
    "next_round",
    "rank_and_world",
    "run_length",
    "wandb_run_id",
]


def is_fitting(trainer) -> bool:
    """Whether the trainer is running ``fit`` (not ``validate``/``test``/``predict``); ``None``: False."""
    return trainer is not None and trainer.state.fn == TrainerFn.FITTING


def run_length(trainer) -> int | None:
    """The rounds the run is asked for (``--trainer.max_epochs``; ``None`` or -1: no limit)."""
    return trainer.max_epochs


def next_round(trainer) -> int:
    """The round the trainer's next training epoch runs: ``fit_loop.epoch_progress.current.processed``, the epoch
    Lightning hands samplers. ``current_epoch`` lags one behind it while a run resumed from a round's end builds its
    first iterator (Lightning prefetches from a stream without a length before it moves the epoch counter)."""
    if trainer is None:
        return 0
    progress = getattr(getattr(trainer, "fit_loop", None), "epoch_progress", None)
    return progress.current.processed if progress is not None else trainer.current_epoch


def device(trainer) -> torch.device:
    """The device this process trains on (the strategy's root device)."""
    return trainer.strategy.root_device


def rank_and_world(trainer) -> tuple[int, int]:
    """This process's global rank and the number of processes (``None``: ``(0, 1)``)."""
    return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)


def ddp_model(trainer) -> torch.nn.Module:
    """The model the strategy runs (under DDP, the ``DistributedDataParallel`` wrapper whose reducer a method that
    sums its own gradients turns off)."""
    return trainer.strategy.model


def in_input_precision(trainer, x: torch.Tensor) -> torch.Tensor:
    """``x`` in the trainer's input precision (``--trainer.precision 64-true``: float64); ``None``: unchanged."""
    return trainer.precision_plugin.convert_input(x) if trainer is not None else x


def checkpoint_folder(trainer) -> str | None:
    """The folder the run's checkpoints go to (the checkpoint callback's ``dirpath``, else ``default_root_dir``);
    ``None``: no trainer."""
    if trainer is None:
        return None
    callback = trainer.checkpoint_callback
    return str(callback.dirpath) if callback is not None and callback.dirpath else str(trainer.default_root_dir)


def checkpoint_path(trainer) -> str | None:
    """The checkpoint the trainer restores (``fit``/``validate``/``test`` with ``ckpt_path``); ``None``: none."""
    return getattr(trainer, "ckpt_path", None) if trainer is not None else None


def wandb_run_id(trainer) -> str | None:
    """The id of the W&B run the trainer's first W&B logger writes (a resumed run continues it); ``None``: none."""
    runs = [lg.version for lg in (trainer.loggers if trainer is not None else []) if isinstance(lg, WandbLogger)]
    return str(runs[0]) if runs and runs[0] else None
