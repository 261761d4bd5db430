"""A warm worker: a process that imports torch, Lightning and the package once and then runs trial after trial
(:func:`serve`), each through the command line's own code in a fresh Trainer (:func:`run_here`).

What one trial may change in the process is put back after it (``_ProcessState``): the working folder, the
environment (``PL_GLOBAL_SEED``, W&B's variables, ...), torch's number of threads, its float32 matmul precision and
deterministic-algorithm switch, cuDNN's benchmark switch and Python's warning filters. The random generators need no
restoring: every ``fit`` seeds them (``seed_everything``). The W&B runs a trial opened are told to finish when it
ends (in a process of its own a run is finished at exit); their processes write them while the next trial runs, and
the worker waits for all of them before it ends."""

from __future__ import annotations

import os
import sys
import time
import traceback
import warnings
from multiprocessing.connection import Connection

from lightning_sfl.process.streams import output_to

from .spec import Outcome, Trial, read_error

__all__ = ["run_here", "serve"]


class _ProcessState:
    """What a trial may change in its process, taken before it and put back after it."""

    def __enter__(self) -> _ProcessState:
        import torch

        self.cwd = os.getcwd()
        self.environ = dict(os.environ)
        self.threads = torch.get_num_threads()
        self.matmul = torch.get_float32_matmul_precision()
        self.deterministic = (torch.are_deterministic_algorithms_enabled(),
                              torch.is_deterministic_algorithms_warn_only_enabled())  # fmt: skip
        self.cudnn_benchmark = torch.backends.cudnn.benchmark
        self.filters = list(warnings.filters)
        return self

    def __exit__(self, *exc) -> None:
        import torch

        os.chdir(self.cwd)
        os.environ.clear()
        os.environ.update(self.environ)
        torch.set_num_threads(self.threads)
        torch.set_float32_matmul_precision(self.matmul)
        torch.use_deterministic_algorithms(self.deterministic[0], warn_only=self.deterministic[1])
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        warnings.filters[:] = self.filters
        warnings._filters_mutated()


#: The subcommands a trial runs (``compare`` and ``sweep`` do not nest: a sweep runs those as processes of their own).
TRIAL_COMMANDS = ("fit", "validate", "test", "attack", "cuts")


def run_command(args: list[str]) -> None:
    """``lightning-sfl ARGS`` as the console script runs it, for :data:`TRIAL_COMMANDS` (the same modules
    :mod:`lightning_sfl.cli` dispatches to, without its fast exit); another subcommand is an error (exit 2)."""
    name = args[0] if args else None
    if name in ("fit", "validate", "test"):
        from lightning_sfl.lightning_cli import run
        from lightning_sfl.wandb.process import prestart_for

        prestart_for(args[1:])
        run(args)
    elif name == "attack":
        from lightning_sfl.attack import main

        main(args[1:])
    elif name == "cuts":
        from lightning_sfl.cuts import main

        main(args[1:])
    else:
        print(f"error: a trial runs one of {', '.join(TRIAL_COMMANDS)}, not {name!r}", file=sys.stderr)
        raise SystemExit(2)


def run_here(trial: Trial, wait_for_wandb: bool = True) -> Outcome:
    """Run ``trial`` in this process (see the module docstring) and return how it ended. ``wait_for_wandb=False``:
    return once the trial's W&B runs are told to finish, while their processes write them (a worker's next trial
    overlaps with that; :func:`lightning_sfl.wandb.process.reap` waits for them)."""
    from lightning_sfl.process.fast_exit import exit_code
    from lightning_sfl.wandb import process as wandb_process

    wandb_process.reap(block=False)  # W&B workers of earlier trials that are done: one is this trial's
    wandb_process.output_path = str(trial.log)

    start = time.perf_counter()
    trial.cwd.mkdir(parents=True, exist_ok=True)
    trial.log.parent.mkdir(parents=True, exist_ok=True)
    with _ProcessState(), output_to(trial.log):
        os.chdir(trial.cwd)
        # PYTHONSAFEPATH: a process the trial starts with ``python -m`` (its W&B process) imports this installation's
        # package, not a lightning_sfl/ folder in the trial's folder (as a trial of the isolate launcher does)
        environment = {**trial.environment(dict(os.environ)), "PYTHONSAFEPATH": "1"}
        os.environ.clear()
        os.environ.update(environment)
        code = 0
        try:
            run_command(list(trial.args))
        except SystemExit as exc:
            code = exit_code(exc)
        except BaseException:  # a trial's crash is its outcome; the worker goes on
            traceback.print_exc()
            code = 1
        finally:
            wandb_process.finish_all(code, wait=wait_for_wandb)
            wandb_process.output_path = None
    return Outcome(code, read_error(trial.log, code), time.perf_counter() - start)


def serve(conn: Connection, threads: int | None = None) -> None:
    """The worker's loop: import what every trial needs (and use ``threads`` torch threads, if given), say
    ``ready``, then run each :class:`Trial` received and send its :class:`Outcome`, until ``None`` or the end of
    the pipe."""
    from lightning_sfl.process.memory import retain_freed_memory
    from lightning_sfl.process.quiet import quiet_dependencies

    retain_freed_memory()
    quiet_dependencies()
    import lightning_sfl.lightning_cli  # noqa: F401  (torch, Lightning, the methods: once for every trial)

    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    from lightning_sfl.wandb.process import reap

    conn.send("ready")
    try:
        while True:
            try:
                trial = conn.recv()
            except EOFError:
                return
            if trial is None:
                return
            conn.send(run_here(trial, wait_for_wandb=False))
    finally:
        reap()  # every trial's W&B run written before the worker ends
