"""The pool that runs trials (:class:`TrialPool`): warm workers, a process per trial, or submitit's executors."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from .spec import Outcome, Trial, read_error

__all__ = ["LAUNCHERS", "TrialPool"]

#: ``launcher`` -> what it is (the ``--launcher`` choices of ``compare`` and ``sweep``).
LAUNCHERS = {
    "warm": "long-lived worker processes that import once and run trial after trial (default)",
    "isolate": "a new process for each trial",
    "slurm": "a SLURM job for each trial, through submitit (pip install 'lightning-sfl[slurm]')",
    "submitit-local": "a submitit job for each trial on this machine (submitit's local executor)",
}


#: What a warm worker needs imported before its first trial.
NEEDS = "lightning_sfl.lightning_cli"
#: What the fork server imports (once for every worker it forks): :data:`NEEDS`, and an exit without teardown.
PRELOAD = "lightning_sfl.trials.preload"


def start_method() -> str:
    """How a new warm worker starts: ``fork`` when this process has imported what a worker needs and runs no other
    thread (``compare`` after planning its runs: the worker is ready at once; planning computed on one torch thread,
    :func:`one_thread_before_fork`, so no thread pool of torch is copied); else ``forkserver``, whose server imports
    :data:`NEEDS` once and forks every worker from it (``sweep``, whose process imports no torch; a replacement
    started while trials run); ``spawn`` where there is no fork."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and NEEDS in sys.modules and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


@contextlib.contextmanager
def one_thread_before_fork():
    """Torch on one thread for what this process computes before it forks its warm workers (``compare``'s planning
    builds every run's data and method): GNU OpenMP, torch's intra-op pool on Linux, does not survive a fork after a
    parallel region ran on more than one thread, and a worker's first parallel op would then wait forever. The
    thread count is restored on exit, for the workers to take."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _context(method: str):
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload([PRELOAD])  # used when the server starts (the first worker)
    return context


class _Worker:
    """One warm worker process (:func:`lightning_sfl.trials.worker.serve`) and the pipe to it."""

    def __init__(self, method: str | None = None, threads: int | None = None) -> None:
        from lightning_sfl.trials.worker import serve

        self.method = method or start_method()
        context = _context(self.method)
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=serve, args=(child, threads), daemon=True, name="lightning-sfl trial worker"
        )
        self.process.start()
        child.close()
        self.ready = False

    def run(self, trial: Trial) -> Outcome:
        """``trial`` in this worker; a worker that dies meanwhile gives a failed outcome (and is not used again)."""
        start = time.perf_counter()
        try:
            if not self.ready:
                self.ready = self.conn.recv() == "ready"
            self.conn.send(trial)
            return self.conn.recv()
        except (EOFError, OSError):
            self.process.join(5)
            code = self.process.exitcode
            why = f"the trial's worker process died (exit code {code}); see {trial.log}"
            return Outcome(code if code else 1, why, time.perf_counter() - start)

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def close(self, now: bool = False) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.process.join(0 if now else 30)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()
        self.conn.close()


def run_isolated(trial: Trial) -> Outcome:
    """``trial`` as ``python -m lightning_sfl.cli ARGS`` in a process of its own (the package this process runs,
    not a ``lightning_sfl/`` folder in the trial's folder: ``PYTHONSAFEPATH``)."""
    start = time.perf_counter()
    trial.cwd.mkdir(parents=True, exist_ok=True)
    trial.log.parent.mkdir(parents=True, exist_ok=True)
    env = {**trial.environment(dict(os.environ)), "PYTHONSAFEPATH": "1"}
    with open(trial.log, "w") as log:
        proc = subprocess.run([sys.executable, "-m", "lightning_sfl.cli", *trial.args], cwd=trial.cwd, env=env,
                              stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    return Outcome(proc.returncode, read_error(trial.log, proc.returncode), time.perf_counter() - start)


class TrialPool:
    """Runs trials, up to ``jobs`` at a time, with ``launcher`` (:data:`LAUNCHERS`). :meth:`run` may be called from
    several threads at once (``compare`` and ``sweep`` call it from ``jobs`` threads); it blocks until its trial
    ends. ``folder``: where submitit keeps its job files (``slurm``/``submitit-local``); ``slurm``: keyword
    arguments for submitit's ``update_parameters`` (e.g. ``{"slurm_partition": "gpu", "timeout_min": 60}``);
    ``start``: how warm workers start (``fork``, ``forkserver``, ``spawn``; default :func:`start_method`).

    Use as a context manager (or call :meth:`close`): warm workers end with it."""

    def __init__(
        self,
        jobs: int = 1,
        launcher: str = "warm",
        folder: str | Path | None = None,
        slurm: dict | None = None,
        start: str | None = None,
    ) -> None:
        if jobs < 1:
            raise ValueError(f"jobs={jobs} must be >= 1")
        if launcher not in LAUNCHERS:
            raise ValueError(f"launcher={launcher!r} is not one of: {', '.join(LAUNCHERS)}")
        self.jobs, self.launcher, self.start = jobs, launcher, start
        torch = sys.modules.get("torch")  # the workers' torch threads: this process's (None: torch's default)
        self.threads = torch.get_num_threads() if torch is not None else None
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(jobs)
        self._executor = None
        if launcher in ("slurm", "submitit-local"):
            self._executor = _submitit_executor(launcher, Path(folder or "submitit"), jobs, slurm or {})

    def __enter__(self) -> TrialPool:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(now=exc_type is not None)

    def run(self, trial: Trial) -> Outcome:
        """Run ``trial`` and return how it ended (a failure is an outcome, never an exception)."""
        with self._slots:
            if self.launcher == "isolate":
                return run_isolated(trial)
            if self._executor is not None:
                return _run_submitit(self._executor, trial)
            worker = self._take()
            outcome = worker.run(trial)
            if worker.alive:
                self._idle.put(worker)
            else:
                with self._lock:
                    self._workers.remove(worker)
            return outcome

    def _take(self) -> _Worker:
        """An idle warm worker, or a new one (never more than ``jobs``: :meth:`run` holds one of ``jobs`` slots)."""
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return self._new_worker()

    def _new_worker(self) -> _Worker:
        worker = _Worker(self.start, self.threads)
        with self._lock:
            self._workers.append(worker)
        return worker

    def warm_up(self) -> None:
        """Start every warm worker now (each imports while the caller goes on planning)."""
        if self.launcher != "warm":
            return
        while len(self._workers) < self.jobs:
            self._idle.put(self._new_worker())

    def close(self, now: bool = False) -> None:
        """End the warm workers: after their trial (default), or ``now`` (an error: no trial is waited for)."""
        with self._lock:
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.close(now)


def _submitit_executor(launcher: str, folder: Path, jobs: int, slurm: dict):
    try:
        import submitit
    except ImportError:
        raise ValueError(
            f"--launcher {launcher} needs submitit: pip install 'lightning-sfl[slurm]' (or pip install submitit)"
        ) from None
    if launcher == "submitit-local":
        executor = submitit.LocalExecutor(folder=folder)
        executor.update_parameters(timeout_min=int(slurm.get("timeout_min", 24 * 60)))
        return executor
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    executor.update_parameters(**{"slurm_array_parallelism": jobs, **slurm})
    return executor


def _run_submitit(executor, trial: Trial) -> Outcome:
    """``trial`` as a submitit job (which runs :func:`run_isolated` on its node) and its outcome."""
    start = time.perf_counter()
    job = executor.submit(run_isolated, trial)
    try:
        return job.result()
    except Exception as exc:  # the job failed or was cancelled: submitit raises what it knows
        why = str(exc).strip().splitlines()
        return Outcome(1, f"submitit job {job.job_id} failed: {why[-1] if why else type(exc).__name__}",
                       time.perf_counter() - start)  # fmt: skip
