"""Where a process's output goes and what it is: whether a stream is a terminal (:func:`is_terminal`: progress and
status lines are drawn only there), whether this process is one Lightning launched for DDP (:func:`ddp_child`), and
the whole process's output sent to a file for a while (:func:`output_to`). Imports nothing heavy."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

__all__ = ["ddp_child", "is_terminal", "output_to"]


def is_terminal(stream) -> bool:
    """Whether ``stream`` is an open terminal (``isatty()``); ``False`` for files, pipes, closed or odd streams.

    >>> import io
    >>> is_terminal(io.StringIO()), is_terminal(None)
    (False, False)
    """
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def ddp_child() -> bool:
    """Whether this process is one Lightning launched for DDP, or another than the first of a launcher's (a
    ``LOCAL_RANK``, ``NODE_RANK``, ``RANK`` or, under ``srun``, ``SLURM_PROCID`` other than 0 in its environment)."""
    from lightning_sfl.errors import env_number

    return any(env_number(v, 0) > 0 for v in ("LOCAL_RANK", "NODE_RANK", "RANK", "SLURM_PROCID"))


@contextlib.contextmanager
def output_to(path: str | os.PathLike) -> Iterator[None]:
    """Everything this process writes meanwhile goes to ``path`` (emptied first): Python's ``sys.stdout``/
    ``sys.stderr`` and file descriptors 1 and 2 (C libraries, child processes that inherit them). Every write goes to
    the file's end (append mode), so that another process writing there on its own overwrites nothing."""
    streams = sys.stdout, sys.stderr
    for stream in streams:
        stream.flush()
    saved = os.dup(1), os.dup(2)
    open(path, "w").close()
    with open(path, "a", buffering=1, encoding="utf-8", errors="backslashreplace") as log:
        os.dup2(log.fileno(), 1), os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr = log
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                log.flush()
            sys.stdout, sys.stderr = streams
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])
