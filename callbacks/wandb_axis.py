"""``WandbRoundAxis``: W&B charts plotted against the global round instead of Lightning's ``global_step``.

When a ``WandbLogger`` creates its run it declares (Lightning 2.6, ``WandbLogger.experiment``)::

    define_metric("trainer/global_step")
    define_metric("*", step_metric="trainer/global_step", step_sync=True)

so every chart's x axis is the optimiser step (here one local iteration). In ``setup`` (before anything is
logged) this callback touches ``logger.experiment`` of every ``WandbLogger`` on global rank zero — which runs
Lightning's two declarations first — and then declares::

    define_metric("round")
    define_metric("*", step_metric="round", step_sync=True)

W&B keeps one definition per glob and merges a later one into it (wandb-core ``runmetric.MetricHandler``,
unless ``overwrite``), so ``round`` wins for every key first logged afterwards: ``test/*``, ``train/*``,
``comm/*``, ``per_class/*``, ``partition/*``. ``step_sync`` makes W&B add the latest ``round`` to rows that
do not carry it (for instance the epoch-end ``train/*`` row, written after the round's evaluation: it gets
that round). ``round`` itself and ``trainer/global_step`` stay explicitly defined (their own axis is
``_step``), so charts against the optimiser step remain one click away. ``round`` is what
:class:`~lightning_sfl.algorithms.SplitFedAlgorithm` logs with each evaluation: the number of rounds
completed.

The callback logs nothing itself, holds no state and does nothing without a ``WandbLogger``.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.loggers import WandbLogger
from typing_extensions import override

ROUND_KEY = "round"


class WandbRoundAxis(L.Callback):
    """Makes ``round`` the default x axis of every W&B chart of the run (see the module docstring)."""

    def __init__(self) -> None:
        self._done: set[int] = set()  # id() of the W&B runs already configured (setup runs once per stage)

    @override
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            if not isinstance(logger, WandbLogger):
                continue
            run = logger.experiment  # creates the run: Lightning's own define_metric calls happen here, first
            if id(run) in self._done or not callable(getattr(run, "define_metric", None)):
                continue
            run.define_metric(ROUND_KEY)
            run.define_metric("*", step_metric=ROUND_KEY, step_sync=True)
            self._done.add(id(run))
