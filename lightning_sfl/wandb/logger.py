"""``WandbLogger``: Lightning's W&B logger with W&B in a process of its own (the ``lightning-sfl`` default).

A drop-in for ``lightning.pytorch.loggers.WandbLogger`` (the same arguments, the same calls to W&B in the same order,
so the same run), except that the calls are made by a worker process (:mod:`lightning_sfl.wandb.process`): the
training process neither imports W&B nor waits for it: W&B's per-round cost in the training process is the
pickling of a few lists, and its start-up (import and ``wandb.init``) overlaps the import of Lightning (the
framework benchmark measures both).

Differences a user can see:

* ``offline=None`` (the CLI's default): W&B's own switches decide (``WANDB_MODE``, a sweep agent's environment,
  ``wandb online|offline``), and without any the run is offline; ``True``/``False`` as in Lightning.
* the run id is chosen at construction (or taken from ``id``/``version``/``WANDB_RUN_ID``), so ``version`` never
  waits for W&B;
* the run ends when the process exits (as with Lightning's logger), on ``logger.experiment.finish()`` or
  :meth:`WandbLogger.finish`; a failed fit (``finalize("failed")``) ends it with exit code 1;
* ``experiment`` is a :class:`~lightning_sfl.wandb.process.RemoteRun` (calls are forwarded); ``watch`` is not
  available (it needs the model in W&B's process: use Lightning's logger for it);
* each logger has its own run, even when another run is active in the process (Lightning's attaches to
  ``wandb.run``).

Example (offline; W&B's files under ``runs/wandb/``)::

    trainer = L.Trainer(logger=WandbLogger(project="lightning-sfl", save_dir="runs", offline=True))
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Literal

from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from typing_extensions import override

from lightning_sfl.wandb import process as wandb_process
from lightning_sfl.wandb.process import (
    WATCH_REFUSED,
    RemoteRun,
    WandbProcess,
    WandbProcessError,
    generate_run_id,
    take,
)

__all__ = ["WandbLogger"]


class WandbLogger(LightningWandbLogger):
    """Lightning's ``WandbLogger`` with W&B in a worker process (see the module docstring). Arguments as Lightning's;
    ``offline=None``: W&B's own switches decide, else offline; ``tags``, ``group`` and ``job_type`` go to
    ``wandb.init`` (the command line sets them: method, dataset, partition, seed; the configuration; the subcommand)."""

    def __init__(
        self,
        name: str | None = None,
        save_dir: str | os.PathLike = ".",
        version: str | None = None,
        offline: bool | None = None,
        dir: str | os.PathLike | None = None,
        id: str | None = None,
        anonymous: bool | None = None,
        project: str | None = None,
        log_model: Literal["all"] | bool = False,
        experiment: Any = None,
        prefix: str = "",
        checkpoint_name: str | None = None,
        add_file_policy: Literal["mutable", "immutable"] = "mutable",
        tags: list[str] | None = None,
        group: str | None = None,
        job_type: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            name=name, save_dir=save_dir, version=version, offline=bool(offline), dir=dir, id=id, anonymous=anonymous,
            project=project, log_model=log_model, experiment=experiment, prefix=prefix,
            checkpoint_name=checkpoint_name, add_file_policy=add_file_policy,
        )  # fmt: skip
        # wandb.init's other arguments, as Lightning's logger keeps them (not passed through its __init__: the CLI's
        # parser would then read Lightning's module for its signature and import W&B for its type hints)
        self._wandb_init.update(kwargs)
        given = {"tags": tags, "group": group, "job_type": job_type}
        self._wandb_init.update({k: v for k, v in given.items() if v is not None})
        if self._wandb_init.get("anonymous") is None:  # W&B warns that the setting has no effect whenever it is given
            self._wandb_init.pop("anonymous", None)
        self._offline_choice = offline
        if not self._id:
            self._id = os.environ.get("WANDB_RUN_ID") or generate_run_id()
            self._wandb_init["id"] = self._id
        self._process: WandbProcess | None = None
        if rank_zero_only.rank == 0 and self._experiment is None:
            self._process = take()  # the worker imports W&B now, while this process goes on

    @property
    @rank_zero_experiment
    @override
    def experiment(self) -> RemoteRun:
        """The W&B run, started in the worker at the first access (as Lightning's logger starts its run)."""
        if self._experiment is None:
            if self._process is None or self._process.closed:
                self._process = WandbProcess()
            self._process.init(dict(self._wandb_init), self._offline_choice)
            self._experiment = RemoteRun(self._process, self._id)
            if self._wandb_init.get("sync_tensorboard"):
                self._experiment.define_metric("*", step_metric="global_step")
            else:  # Lightning's default x axis, declared as its logger does
                self._experiment.define_metric("trainer/global_step")
                self._experiment.define_metric("*", step_metric="trainer/global_step", step_sync=True)
        return self._experiment

    @property
    @override
    def version(self) -> str | None:
        return self._id

    @rank_zero_only
    def log_built(self, build: Callable[..., dict[str, Any]], args: tuple, step: int | None = None) -> None:
        """``log_metrics(build(*args), step)`` with ``build(*args)`` evaluated in the worker (see
        :func:`lightning_sfl.wandb.payloads.log_built`); ``prefix`` applies to its keys there as here."""
        run = self.experiment
        if not isinstance(run, RemoteRun):  # a run given as ``experiment=``: built here
            self.log_metrics(build(*args), step=step)
            return
        extra = {"trainer/global_step": step} if step is not None else {}
        prefix = f"{self._prefix}{self.LOGGER_JOIN_CHAR}" if self._prefix else ""
        run._process.log_built(build, args, extra, prefix)

    @override
    def watch(self, model: Any, log: str | None = "gradients", log_freq: int = 100, log_graph: bool = True) -> None:
        raise WandbProcessError(WATCH_REFUSED)

    @rank_zero_only
    @override
    def finalize(self, status: str) -> None:
        """Lightning's ``finalize``; a failed fit marks the run failed (exit code 1) when it ends."""
        if status == "failed" and self._process is not None:
            self._process.exit_code = 1
        super().finalize(status)

    def finish(self) -> None:
        """End the run now (its files are complete when this returns)."""
        if self._process is not None:
            self._process.close()

    def end_console_log(self) -> None:
        """Stop recording this process's output in the run's console log (the run itself ends when the process
        does): the command line's last lines stay out of it, as out of the log of a run that has finished."""
        if self._process is not None:
            self._process.end_console_log()

    def __getstate__(self) -> dict[str, Any]:
        """A copy for another process (``ddp_spawn``): without this process's worker or run; the other process
        starts its own worker for the same run id (``resume="allow"``), its W&B messages where this one's go."""
        state = self.__dict__.copy()
        state["_process"] = None
        state["_experiment"] = None
        state["_messages_to_file"] = wandb_process.messages_to_file
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        wandb_process.messages_to_file = wandb_process.messages_to_file or state.pop("_messages_to_file", False)
        self.__dict__.update(state)
