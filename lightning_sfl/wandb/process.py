"""W&B in a process of its own: the training process sends its W&B calls down a pipe, in order, and a worker process
makes them (``wandb.init``, ``run.log``, ``run.define_metric``, ``run.config.update``, ... and at the end
``run.finish``), so what W&B costs — importing it, starting its run and turning every logged table and chart into
files and artifacts (the per-class report of every round) — is spent on another core, while
the run it writes is the one the same calls would have written in the training process.

This module imports neither torch nor Lightning (nor W&B: the worker does), so the command line can start a worker
before it imports Lightning (:func:`prestart`) and the worker's import of W&B overlaps the training process's.

Pieces:

* :class:`WandbProcess` — the training process's end: spawns ``python -m lightning_sfl.wandb.worker`` (its stdout
  and stderr are the training process's, or a file, :data:`messages_to_file`), sends calls, raises the worker's
  errors as :class:`WandbProcessError` at the next call, finishes the run at exit (``atexit``) or on
  ``finish()``. Calls that return nothing in practice (``log``, ``define_metric``, ``config.update``,
  ``summary.update``) do not wait for the worker; every other call waits for its result.
* :class:`RemoteRun` — what ``WandbLogger.experiment`` returns: ``run.log(...)``, ``run.config.update(...)``,
  ``run.id``, ``run.dir``, ... forwarded to the worker's ``wandb.Run``.
* :func:`lightning_sfl.wandb.worker.serve` — the worker's loop. :meth:`WandbProcess.log_built` has the worker build
  what it logs from plain data (``build(*args)``: a module-level function of a module that does not import torch,
  e.g. :func:`lightning_sfl.wandb.payloads.per_class_payload`), so W&B's objects are not even built in the training
  process.

The Lightning logger on top is :class:`lightning_sfl.wandb.logger.WandbLogger`.
"""

from __future__ import annotations

import atexit
import os
import pickle
import secrets
import string
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from lightning_sfl.process.streams import ddp_child

__all__ = [
    "RemoteRun",
    "WandbProcess",
    "WandbProcessError",
    "finish_all",
    "reap",
    "generate_run_id",
    "init_mode",
    "may_log_to_wandb",
    "prestart",
    "prestart_for",
    "take",
    "wandb_switch",
]

#: Calls sent without waiting for the worker (their results are not used): a path of attribute names from the run.
FIRE_AND_FORGET = {("log",), ("define_metric",), ("config", "update"), ("summary", "update")}
#: Attributes of the run that are objects whose methods are forwarded (``run.config.update(...)``).
SUB_OBJECTS = {"config", "summary"}
_RUN_ID_CHARS = string.ascii_lowercase + string.digits
#: Why ``watch`` is refused (by the run and by :class:`lightning_sfl.wandb.logger.WandbLogger`).
WATCH_REFUSED = "watch needs the model in W&B's process: use lightning.pytorch.loggers.WandbLogger to watch it"


#: The values W&B takes for ``WANDB_MODE`` (``wandb.Settings.mode``).
WANDB_MODES = ("online", "offline", "disabled", "dryrun", "run", "shared")


class WandbProcessError(RuntimeError):
    """A W&B call failed in the worker process (its message), or the worker is gone."""


def wandb_switch() -> str | None:
    """The W&B mode that W&B's own switches set, if any: ``WANDB_MODE``, a sweep agent's environment
    (``WANDB_SWEEP_ID``: online) or ``wandb online|offline`` (the ``mode`` of W&B's settings files). ``None``: the CLI
    runs its WandbLogger offline."""
    if os.environ.get("WANDB_MODE"):
        mode = os.environ["WANDB_MODE"]
        if mode not in WANDB_MODES:  # (W&B itself would fail when the run starts, after the training began)
            from lightning_sfl.errors import ConfigError

            raise ConfigError(f"environment variable WANDB_MODE={mode!r} is not one of: {', '.join(WANDB_MODES)}")
        return mode
    if os.environ.get("WANDB_SWEEP_ID"):
        return "online"
    import wandb

    try:
        return wandb.Settings().read_system_settings().all().get("mode") or None
    except Exception:  # unreadable settings files: W&B itself would ignore them
        return None


def init_mode(offline: bool | None) -> str | None:
    """The ``WANDB_MODE`` a worker sets before ``wandb.init``: ``"dryrun"`` (offline) for ``offline=True`` (as
    Lightning's WandbLogger sets it) and for ``offline=None`` when W&B's own switches say nothing
    (:func:`wandb_switch`); ``None`` otherwise (W&B's switches decide)."""
    if offline or (offline is None and wandb_switch() is None):
        return "dryrun"
    return None


def generate_run_id() -> str:
    """A run id as ``wandb.util.generate_id`` makes them (8 characters of ``[a-z0-9]``), chosen here so that the
    training process knows it without waiting for the worker."""
    return "".join(secrets.choice(_RUN_ID_CHARS) for _ in range(8))


class WandbProcess:
    """The training process's end of a W&B worker (see the module docstring). Constructing it spawns the worker,
    which imports W&B at once; ``init`` starts the run (without waiting for it)."""

    def __init__(self) -> None:
        parent_to_child, child_reads = os.pipe()[::-1]  # (write end, read end)
        parent_reads, child_to_parent = os.pipe()
        cmd = [sys.executable, "-m", "lightning_sfl.wandb.worker", str(child_reads), str(child_to_parent)]
        # PYTHONSAFEPATH: ``python -m`` imports this installation's package, not a lightning_sfl/ folder in the working
        # folder (Python 3.11+; the worker changes to the run's folder itself before wandb.init)
        env = {**os.environ, "PYTHONSAFEPATH": "1"}
        self._proc = subprocess.Popen(cmd, pass_fds=(child_reads, child_to_parent), stdin=subprocess.DEVNULL, env=env)
        os.close(child_reads), os.close(child_to_parent)
        self._send_end = Connection(parent_to_child, readable=False)
        self._recv_end = Connection(parent_reads, writable=False)
        self._lock = threading.RLock()  # one exchange at a time (a call and its reply)
        self._async_error: str | None = None  # reported by the worker for a call that did not wait
        self._tee: _ConsoleTee | None = None
        self.initialised = False
        self.closed = False
        self._finish_sent = False  # close() told the worker to finish the run
        self._reaped = False  # wait_closed() has seen the worker exit
        self.exit_code = 0
        atexit.register(self.close)
        _open.add(self)

    # ------------------------------------------------------------------ run lifetime
    def init(self, init_kwargs: dict[str, Any], offline: bool | None) -> None:
        """``wandb.init(**init_kwargs)`` in the worker. ``offline``: True sets ``WANDB_MODE=dryrun`` there (as
        Lightning's WandbLogger does); None: W&B's own switches decide (:func:`wandb_switch`), else offline. From
        now on what this process writes to ``sys.stdout``/``sys.stderr`` is also W&B's console log of the run (what
        W&B's own console capture records in the process that calls ``wandb.init``), unless
        ``WANDB_CONSOLE=off``."""
        if init_kwargs.get("dir") is not None:  # W&B's service, started by the worker's first run, keeps its folder
            init_kwargs = {**init_kwargs, "dir": os.path.abspath(init_kwargs["dir"])}
        context = _context()
        if messages_to_file and init_kwargs.get("dir") is not None:
            context["output"] = os.path.join(init_kwargs["dir"], "wandb", MESSAGES)
        self._send(("init", init_kwargs, offline, context))
        self.initialised = True
        if os.environ.get("WANDB_CONSOLE", "").lower() != "off":
            self._tee = _ConsoleTee(self)

    def close(self, exit_code: int | None = None, wait: bool = True) -> None:
        """Finish the run (``run.finish(exit_code)``, default ``exit_code``), wait for the worker to write it
        and exit. Idempotent; called at exit of the training process. ``wait=False`` (a warm trial worker, which
        goes on with its next trial meanwhile): send the finish and return at once; the worker stays alive for
        another run, and :func:`reap` takes it back (or ends it) once it has written this one."""
        if self.closed:
            if wait:
                self.wait_closed()
            return
        self.closed = True
        atexit.unregister(self.close)
        if self._tee is not None:
            self._tee.uninstall()
        try:
            if self.initialised:
                with self._lock:
                    code = self.exit_code if exit_code is None else exit_code
                    self._send_end.send(("finish", code, not wait))
                    self._finish_sent = True
        except (BrokenPipeError, OSError):
            pass  # the worker is gone already; it finished the run itself
        if wait:
            self.wait_closed()
        else:
            _finishing.append(self)

    def end_console_log(self) -> None:
        """Stop sending this process's output to the run's console log (see :meth:`init`)."""
        if self._tee is not None:
            self._tee.uninstall()
            self._tee = None

    def wait_closed(self) -> None:
        """Wait until the worker has finished the run it was told to finish (:meth:`close`) and has exited."""
        if self._reaped:
            return
        self._reaped = True
        try:
            self._take_finish_reply()
        finally:
            self._send_end.close()
            self._proc.wait()
            self._recv_end.close()
        if self._async_error is not None:
            print(f"wandb process: {self._async_error}", file=sys.stderr)

    def _take_finish_reply(self) -> bool:
        """The worker's reply to the finish sent by :meth:`close`, once; False (said on stderr) if it failed."""
        if not self._finish_sent:
            return True
        self._finish_sent = False
        try:
            with self._lock:
                self._receive()
        except WandbProcessError as exc:
            print(f"wandb process: {exc}", file=sys.stderr)
            return False
        return True

    def finished(self) -> bool:
        """Whether the worker, told to finish and stay (``close(wait=False)``), has written the run."""
        return not self._finish_sent or self._proc.poll() is not None or self._recv_end.poll()

    def recycle(self) -> bool:
        """After ``close(wait=False)`` and :meth:`finished`: take the finish's reply and make this worker ready for
        another run (its W&B imported, its service started). False, and the worker ended, if it reported an error
        or exited."""
        if not self._take_finish_reply() or self._proc.poll() is not None or self._async_error is not None:
            self.wait_closed()
            return False
        self.closed = self.initialised = False
        self.exit_code, self._tee = 0, None
        atexit.register(self.close)
        return True

    # ------------------------------------------------------------------ calls
    def call(self, path: tuple[str, ...], args: tuple = (), kwargs: dict | None = None) -> Any:
        """``run.<path>(*args, **kwargs)`` in the worker; waits for its result unless ``path`` is in
        :data:`FIRE_AND_FORGET`."""
        wait = path not in FIRE_AND_FORGET
        with self._lock:
            self._send(("call", path, _picklable(args), _picklable(kwargs or {}), wait))
            return self._receive() if wait else None

    def get(self, path: tuple[str, ...]) -> Any:
        """``run.<path>`` in the worker: its value, or ``CALLABLE`` for a method."""
        with self._lock:
            self._send(("get", path))
            return self._receive()

    def log_built(
        self, build: Callable[..., dict[str, Any]], args: tuple = (), extra: dict | None = None, prefix: str = ""
    ) -> None:
        """``run.log({**{prefix + k: v for k, v in build(*args).items()}, **extra})`` with ``build`` called in the
        worker (a module-level function: it travels by name, its ``args`` by value)."""
        self._send(("log_built", build, args, extra or {}, prefix))

    def console(self, stream: str, text: str) -> None:
        """``text`` written to this process's ``stream`` (``"stdout"``/``"stderr"``), for the run's console log."""
        self._send(("console", stream, text))

    # ------------------------------------------------------------------ plumbing
    def _send(self, message: tuple) -> None:
        if self.closed:
            raise WandbProcessError("the W&B run of this logger has finished; nothing more can be logged to it")
        self._raise_pending()
        try:
            with self._lock:
                self._send_end.send(message)
        except (BrokenPipeError, OSError):
            raise WandbProcessError(f"the W&B process has exited (exit code {self._proc.poll()})") from None

    def _receive(self) -> Any:
        """The reply to the call just sent (an earlier call's error that arrives first is kept for later)."""
        while True:
            try:
                kind, value = self._recv_end.recv()
            except (EOFError, OSError):
                raise WandbProcessError(f"the W&B process has exited (exit code {self._proc.poll()})") from None
            if kind == "async_error":
                self._async_error = self._async_error or value
                continue
            if kind == "notice":
                print(value, file=sys.stderr, flush=True)
                continue
            if kind == "error":
                raise WandbProcessError(value)
            return value

    def _raise_pending(self) -> None:
        """An error the worker reported for a call that did not wait (``log``, ``init``, ...), raised now."""
        try:
            while self._async_error is None and self._recv_end.poll():
                kind, value = self._recv_end.recv()
                if kind == "async_error":
                    self._async_error = value
                elif kind == "notice":
                    print(value, file=sys.stderr, flush=True)
        except (EOFError, OSError):
            return  # the worker has exited; the next send says so
        if self._async_error is not None:
            error, self._async_error = self._async_error, None
            raise WandbProcessError(error)


CALLABLE = "<callable>"


class _ConsoleTee:
    """Wraps ``write`` of ``sys.stdout`` and ``sys.stderr`` (as W&B's ``wrap`` console capture wraps them in the
    process running ``wandb.init``) so that the text also goes to the worker."""

    def __init__(self, process: WandbProcess) -> None:
        self._process, self._streams, self._busy = process, [], False
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream is None:
                continue
            try:
                original = stream.write
                stream.write = self._wrap(name, original)
            except (AttributeError, TypeError):  # a stream whose write cannot be replaced: not recorded
                continue
            self._streams.append((stream, original))

    def _wrap(self, name: str, original: Callable[[str], int]) -> Callable[[str], int]:
        def write(text: str) -> int:
            written = original(text)
            if not self._busy and text:
                self._busy = True
                try:
                    self._process.console(name, text)
                except Exception:  # the worker is gone or failed: the console log stops, the output does not
                    self.uninstall()
                finally:
                    self._busy = False
            return written

        return write

    def uninstall(self) -> None:
        for stream, original in self._streams:
            try:
                stream.write = original
            except (AttributeError, TypeError):
                pass
        self._streams = []


class RemoteRun:
    """The worker's ``wandb.Run`` seen from the training process: attribute reads and method calls are forwarded
    (``run.log``, ``run.define_metric``, ``run.config.update``, ``run.summary.update`` without waiting). ``id`` is
    known here."""

    def __init__(self, process: WandbProcess, run_id: str, path: tuple[str, ...] = ()) -> None:
        object.__setattr__(self, "_process", process)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "id", run_id)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        path = (*self._path, name)
        if path in FIRE_AND_FORGET:
            return _RemoteMethod(self._process, path)
        if not self._path and name in SUB_OBJECTS:
            return RemoteRun(self._process, self.id, path)
        value = self._process.get(path)
        return _RemoteMethod(self._process, path) if value == CALLABLE else value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"set {name} through a method of the run (e.g. run.config.update), not an attribute")

    def __setitem__(self, key: str, value: Any) -> None:  # run.config["lr"] = ..., run.summary["acc"] = ...
        self._process.call((*self._path, "update"), ({key: value},))

    def __getitem__(self, key: str) -> Any:
        return self._process.call((*self._path, "__getitem__"), (key,))

    def finish(self, exit_code: int | None = None, **_: Any) -> None:
        """``run.finish``: the run ends and the worker exits."""
        self._process.close(exit_code)

    def watch(self, *args: Any, **kwargs: Any) -> None:
        raise WandbProcessError(WATCH_REFUSED)


class _RemoteMethod:
    def __init__(self, process: WandbProcess, path: tuple[str, ...]) -> None:
        self._process, self._path = process, path

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._process.call(self._path, args, kwargs)


def _picklable(value: Any) -> Any:
    """``value`` itself if it pickles; else its containers rebuilt with ``str`` of the leaves that do not (what W&B
    would do with them: it stores such config values as strings)."""
    try:
        pickle.dumps(value)
        return value
    except Exception:
        if isinstance(value, dict):
            return {k: _picklable(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(_picklable(v) for v in value)
        return str(value)


# ---------------------------------------------------------------------- pre-started worker
_spare: WandbProcess | None = None
_open: weakref.WeakSet[WandbProcess] = weakref.WeakSet()  # every worker not closed yet
_finishing: list[WandbProcess] = []  # told to finish, not waited for (close(wait=False))


def finish_all(exit_code: int = 0, wait: bool = True) -> None:
    """Finish every W&B run of this process, as its exit would (a warm trial worker calls it after each trial,
    :mod:`lightning_sfl.trials.worker`): a run of a failed command (``exit_code`` not 0) ends failed, others with
    their own exit code. A pre-started worker no run took is closed too. ``wait=False``: return once each worker
    has been told, and leave the spare (a pre-started worker no run took) for the next run; :func:`reap` takes them
    back."""
    global _spare
    for process in list(_open):
        if not process.closed and (wait or process is not _spare):
            process.close(None if exit_code == 0 else exit_code, wait=wait)
    if wait:
        _spare = None


def reap(block: bool = True) -> None:
    """Take back the workers told to finish without waiting (:func:`finish_all` with ``wait=False``) whose run is
    written: the first becomes the spare that the next run takes (:func:`take`: no new process, no new import of
    W&B), the others end. ``block=True`` (before the process ends): wait for every one of them, and end them all,
    the spare too."""
    global _spare
    for process in list(_finishing):
        if block or process.finished():
            _finishing.remove(process)
            if process.recycle():
                if _spare is None and not block:
                    _spare = process
                else:
                    process.close()
    if block:
        for process in list(_open):
            process.close()
        _spare = None


def _context() -> dict[str, Any]:
    """What a worker makes its own before ``wandb.init``, for a worker that serves several runs in turn: this
    process's working folder, its ``WANDB_*`` variables and the file its output goes to (:data:`output_path`)."""
    env = {k: v for k, v in os.environ.items() if k.startswith("WANDB_")}
    return {"cwd": os.getcwd(), "env": env, "output": output_path}


#: The file this process's output goes to, set by a warm trial worker for each trial; a recycled W&B worker writes
#: its own messages there too (None: wherever it started).
output_path: str | None = None
#: Set by the command line: a worker writes W&B's own messages (its banner, its end-of-run summary, its warnings) to
#: :data:`MESSAGES` in the run's W&B folder (``<dir>/wandb/``) instead of the terminal, so that the last lines a command
#: prints are its own; the command's ``run saved:`` line names the W&B run and how to upload it.
messages_to_file: bool = False
#: The file in the run's W&B folder that holds W&B's own messages when they do not go to the terminal.
MESSAGES = "messages.log"


def prestart() -> None:
    """Start a worker now (it imports W&B while the caller imports Lightning); the next :func:`take` gets it. Only
    where this process is rank zero (no ``LOCAL_RANK``/``RANK`` other than 0 in the environment)."""
    global _spare
    if _spare is None and not ddp_child():
        _spare = WandbProcess()


def may_log_to_wandb(args: list[str]) -> bool:
    """False when the ``fit`` arguments ``args`` set ``--trainer.logger`` (and append with ``--trainer.logger+``)
    only loggers other than W&B's (``false``, a ``CSVLogger``: what ``compare --wandb false`` trials pass): then no
    W&B worker is pre-started for it. True otherwise, a logger set in a config file included (the default logger is
    W&B's), and a compare trial's CSV logger followed by ``--trainer.logger+=…WandbLogger``.

    >>> may_log_to_wandb(["--trainer.logger=lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir=x"])
    False
    >>> may_log_to_wandb(["--trainer.logger", "false"]), may_log_to_wandb(["--config", "a.yaml"])
    (False, True)
    >>> may_log_to_wandb(["--trainer.logger=CSVLogger", "--trainer.logger+=lightning_sfl.wandb.logger.WandbLogger"])
    True
    """
    values = []
    for i, arg in enumerate(args):
        key, equals, value = arg.partition("=")
        if key in ("--trainer.logger", "--trainer.logger+"):
            values.append(value if equals else (args[i + 1] if i + 1 < len(args) else ""))
    return not values or any("wandb" in value.lower() for value in values)


def prestart_for(args: list[str]) -> None:
    """:func:`prestart` for a ``fit``/``validate``/``test`` with arguments ``args`` that may log to W&B (not for
    ``--help`` or ``--print_config``)."""
    if not {"-h", "--help", "--print_config"} & {a.split("=")[0] for a in args} and may_log_to_wandb(args):
        prestart()


def take() -> WandbProcess:
    """The pre-started worker if there is one, else a new one."""
    global _spare
    process, _spare = _spare, None
    return process if process is not None and process._proc.poll() is None else WandbProcess()
