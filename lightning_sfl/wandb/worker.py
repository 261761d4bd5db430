"""The W&B worker process (``python -m lightning_sfl.wandb.worker``, started by
:class:`~lightning_sfl.wandb.process.WandbProcess`): it imports W&B and makes the calls the training process sends
down the pipe, in order (:func:`serve`); an online run that cannot start is started offline (``_init_or_offline``);
before each run it takes the training process's folder, ``WANDB_*`` variables and output file (``_adopt``).

Imports neither torch nor Lightning.
"""

from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection
from typing import Any

from lightning_sfl.wandb.process import CALLABLE, WandbProcessError, _picklable, init_mode

__all__ = ["serve"]


def serve(receive: Connection, reply: Connection) -> int:
    """The worker's loop: imports W&B, then makes the calls it receives, in order, until ``finish`` or the end of
    the pipe (the training process is gone: the run is finished with exit code 1). Returns the exit code."""
    import wandb

    run = None
    reported = False  # only the first error of a call that did not wait is sent back (the others go to stderr)
    streams = os.dup(1), os.dup(2)  # where the worker's output went when it started

    def failed(text: str, wait: bool) -> None:
        nonlocal reported
        if wait:
            reply.send(("error", text))
        elif not reported:
            reported = True
            reply.send(("async_error", text))
        else:
            print(f"wandb process: {text}", file=sys.stderr)

    while True:
        try:
            message = receive.recv()
        except (EOFError, OSError):
            if run is not None:
                run.finish(exit_code=1)
            return 0
        kind = message[0]
        wait = kind in ("get", "finish") or (kind == "call" and message[4])
        try:
            if kind == "init":
                _, init_kwargs, offline, context = message
                _adopt(context, streams)
                mode = init_mode(offline)
                if mode:
                    os.environ["WANDB_MODE"] = mode
                run = _init_or_offline(wandb, init_kwargs, reply)
                if getattr(run, "define_metric", None) is None:
                    raise WandbProcessError("wandb.init returned no run")
            elif kind == "finish":
                if run is not None:
                    run.finish(exit_code=message[1])
                reply.send(("ok", None))
                if not message[2]:
                    return 0
                run, reported = None, False  # ready for another run
            elif run is None:
                raise WandbProcessError(f"{kind} before the run was started")
            elif kind == "console":  # what W&B's console capture passes on in the process of wandb.init
                record = getattr(run, "_console_raw_callback", None)
                if record is not None:
                    record(message[1], message[2])
            elif kind == "log_built":
                _, build, args, extra, prefix = message
                run.log({**{prefix + k: v for k, v in build(*args).items()}, **extra})
            else:
                target = run
                for name in message[1][:-1]:
                    target = getattr(target, name)
                value = getattr(target, message[1][-1])
                if kind == "get":
                    reply.send(("ok", CALLABLE if callable(value) else _picklable(value)))
                else:
                    result = value(*message[2], **message[3])
                    if wait:
                        reply.send(("ok", _picklable(result)))
        except Exception as exc:  # the training process raises it (at once if it waits, else at its next call)
            failed(f"{type(exc).__name__}: {exc}".splitlines()[0], wait)


def _init_or_offline(wandb, init_kwargs: dict[str, Any], reply: Connection):
    """``wandb.init(**init_kwargs)``; an online run that cannot start (its server or key refused; the command line
    checks the network first, :mod:`lightning_sfl.wandb.online`) starts offline instead, nothing lost, and the
    training process is told why (a ``notice`` it prints as one line)."""
    try:
        return wandb.init(**init_kwargs)
    except Exception as exc:
        if os.environ.get("WANDB_MODE") in ("offline", "dryrun", "disabled"):
            raise
        os.environ["WANDB_MODE"] = "offline"
        wandb.teardown()  # (W&B's service still holds the run id of the attempt)
        run = wandb.init(**init_kwargs)
        from lightning_sfl.wandb.online import offline_line

        reason = f"{type(exc).__name__}: {exc}".splitlines()[0].split(": {")[0]  # (without the server's JSON)
        reply.send(("notice", offline_line(reason[:200])))
        return run


def _adopt(context: dict[str, Any], streams: tuple[int, int]) -> None:
    """The training process's working folder, ``WANDB_*`` variables and output file (``streams``: the worker's own
    stdout and stderr, for a run without one), before a run starts."""
    os.chdir(context["cwd"])
    for key in [k for k in os.environ if k.startswith("WANDB_") and k not in context["env"]]:
        del os.environ[key]
    os.environ.update(context["env"])
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    if context["output"] is None:
        os.dup2(streams[0], 1), os.dup2(streams[1], 2)
        return
    os.makedirs(os.path.dirname(os.path.abspath(context["output"])), exist_ok=True)
    fd = os.open(context["output"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.dup2(fd, 1), os.dup2(fd, 2)
    os.close(fd)


if __name__ == "__main__":
    import signal

    # Ctrl-C in a terminal and a scheduler's SIGTERM reach every process of the job: the training process stops and
    # closes the pipe, which ends the run here (the calls it made are written first); a signal here would only cut
    # that short with a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    read_fd, write_fd = (int(a) for a in sys.argv[1:3])
    raise SystemExit(serve(Connection(read_fd, writable=False), Connection(write_fd, readable=False)))
