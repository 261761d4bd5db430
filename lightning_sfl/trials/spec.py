"""What a trial is (:class:`Trial`) and what comes back (:class:`Outcome`); plain data, picklable, no torch."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Outcome", "Trial", "error_from_output"]


@dataclass(frozen=True)
class Trial:
    """One ``lightning-sfl`` command: ``args`` after the program name (``["fit", "--config", ...]``), run in folder
    ``cwd`` with ``env`` added to the environment (a ``None`` value removes the variable), its output (stdout and
    stderr) written to ``log``."""

    args: list[str]
    cwd: Path
    log: Path
    env: dict[str, str | None] = field(default_factory=dict)

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with this trial's ``env`` applied."""
        out = dict(base)
        for key, value in self.env.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out

    def __post_init__(self) -> None:
        object.__setattr__(self, "cwd", Path(self.cwd).resolve())
        object.__setattr__(self, "log", Path(self.log).resolve())


@dataclass(frozen=True)
class Outcome:
    """How a trial ended: ``exit_code`` (0: success), ``error`` (the last error line of its output, or why it could
    not run; ``None`` on success) and its wall ``seconds``."""

    exit_code: int
    error: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


_ERROR_LINE = re.compile(r"^(?:[\w.]+(?:Error|Exception|Interrupt)\b.*|.*\berror:.*)$")


def error_from_output(text: str) -> str | None:
    """The last exception or ``error:`` line of a run's output.

    >>> error_from_output("Seed set to 0\\nerror: data.alpha=11 must be ...\\n")
    'error: data.alpha=11 must be ...'
    >>> error_from_output("all good") is None
    True
    """
    lines = [ln.strip() for ln in text.splitlines() if _ERROR_LINE.match(ln.strip())]
    return lines[-1][:500] if lines else None


def read_error(log: Path, exit_code: int) -> str | None:
    """The error of a trial that exited with ``exit_code``, from its log: ``None`` for 0."""
    if exit_code == 0:
        return None
    try:
        detail = error_from_output(log.read_text(errors="replace"))
    except OSError:
        detail = None
    return detail or f"exit code {exit_code} (see {log})"
