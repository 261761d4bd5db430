"""Progress of the attacks' long loops (the decoder's training, UnSplit's alternations) on stderr, shown only when
stderr is a terminal: logs and captured output stay as they were.

:class:`Progress` is a transient tqdm bar (its line is cleared when it closes, so that what the command prints next,
its result line, is the last line on the screen); when the stream is not a terminal every call returns at once.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

from lightning_sfl.process.streams import is_terminal

__all__ = ["INTERVAL", "Progress", "is_terminal"]

#: Seconds between two draws of a bar (and reads of the values it shows).
INTERVAL = 0.5


class Progress:
    """A bar of ``total`` steps (``unit``) titled ``desc`` on ``stream`` (default: ``sys.stderr`` when created) if
    that is a terminal, else nothing. :meth:`advance` counts steps and shows values (e.g. the running loss) at most
    every ``interval`` seconds (default :data:`INTERVAL`; a loss on an accelerator is read that rarely);
    :meth:`close` (or leaving the ``with`` block, an error or Ctrl-C included) clears the bar's line."""

    def __init__(
        self, total: int, desc: str, unit: str = "step", stream: TextIO | None = None, interval: float | None = None
    ) -> None:
        stream = sys.stderr if stream is None else stream
        self.interval = interval = INTERVAL if interval is None else interval
        self._shown = -math.inf
        self.bar = None
        if is_terminal(stream):
            from tqdm.std import tqdm

            self.bar = tqdm(
                total=total, desc=desc, unit=unit, file=stream, leave=False, dynamic_ncols=True, mininterval=interval
            )

    def describe(self, desc: str) -> None:
        """Retitle the bar (drawn with the next step)."""
        if self.bar is not None:
            self.bar.set_description_str(desc, refresh=False)

    def advance(self, steps: int = 1, **values) -> None:
        """Count ``steps``; show ``values`` (numbers, or tensors read only then, as 4 significant digits; strings as
        they are) if ``interval`` seconds have passed since they were last shown."""
        if self.bar is None:
            return
        if values and time.monotonic() - self._shown >= self.interval:
            self._shown = time.monotonic()
            self.bar.set_postfix({k: v if isinstance(v, str) else f"{float(v):.4g}" for k, v in values.items()},
                                 refresh=False)  # fmt: skip
        self.bar.update(steps)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
