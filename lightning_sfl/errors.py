"""Errors that the command line reports as one line (no traceback).

``ConfigError`` is raised at construction time for a bad argument: its message names the argument, the value
and what is allowed. ``DatasetNotFoundError`` names the missing path. ``NonFiniteError`` stops training when a
loss or activation is NaN/Inf, naming the round, local iteration and clients (the last good checkpoint, from
the previous round, stays on disk).
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad setting, found when the run is constructed."""


class DatasetNotFoundError(ConfigError, FileNotFoundError):
    """Dataset files are missing and downloading is off (or impossible)."""


class NonFiniteError(RuntimeError):
    """A NaN or Inf appeared in training."""


REPORTED = (ConfigError, NonFiniteError)


def reported_cause(exc: BaseException) -> BaseException | None:
    """The first error in ``exc``'s cause/context chain that the CLI reports as one line, else ``None``."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, REPORTED):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None
