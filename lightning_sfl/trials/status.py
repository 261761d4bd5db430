"""A live status line for the commands that run trials (``compare``, ``sweep``): one line on a terminal, rewritten in
place, with the trials finished, running and failed and the best result so far::

    [compare] 3/8 finished, 2 running, 1 failed; best final test acc 0.9123 (scala seed 1); 1 min 05 s

It is drawn only when its stream (``sys.stderr``) is a terminal (``isatty()``): in a log, a pipe or captured output
nothing of it appears, and the command's other lines are what they were. It is redrawn when a trial starts or ends
and every ``every`` seconds (the elapsed time), and cleared before any other line is printed through :meth:`say` and
when it closes, so the last lines a command prints are its own (its table), never a status line.

::

    with StatusLine("sweep", total=8, metric="test/acc", goal="maximize") as status:
        status.trial_started()
        ...
        status.trial_ended(ok=True, value=0.91, who="trial 3")
        status.say("[sweep] trial 3: finished, test/acc=0.91")   # on stdout, below the cleared status line
"""

from __future__ import annotations

import math
import shutil
import sys
import threading
import time
from typing import TextIO

from lightning_sfl.process.streams import is_terminal

__all__ = ["StatusLine", "elapsed_text", "status_text"]

#: Erases from the cursor to the end of the line (ANSI "erase in line"), after a carriage return.
CLEAR = "\r\x1b[K"


def elapsed_text(seconds: float) -> str:
    """``'42 s'``, ``'1 min 05 s'``, ``'2 h 03 min'``.

    >>> elapsed_text(42.4), elapsed_text(65), elapsed_text(7380)
    ('42 s', '1 min 05 s', '2 h 03 min')
    """
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def status_text(
    label: str,
    total: int,
    finished: int,
    running: int,
    failed: int,
    best: str | None,
    seconds: float,
    width: int = 0,
) -> str:
    """The status line: counts, the best result so far (already formatted), the time elapsed; cut to ``width``
    characters (0: not cut) so that it never wraps (a wrapped line cannot be rewritten in place).

    >>> status_text("sweep", 8, 3, 2, 1, "test/acc 0.9123 (trial 4)", 65)
    '[sweep] 3/8 finished, 2 running, 1 failed; best test/acc 0.9123 (trial 4); 1 min 05 s'
    >>> status_text("compare", 4, 0, 1, 0, None, 3, width=30)
    '[compare] 0/4 finished, 1 r...'
    """
    parts = [f"[{label}] {finished}/{total} finished, {running} running, {failed} failed"]
    if best:
        parts.append(f"best {best}")
    parts.append(elapsed_text(seconds))
    line = "; ".join(parts)
    return line if width <= 0 or len(line) <= width else line[: max(0, width - 3)] + "..."


class StatusLine:
    """The status line of ``total`` trials (see the module docstring). ``metric`` and ``goal`` (``maximize`` or
    ``minimize``) say which value of :meth:`trial_ended` is the best; ``stream``: where the line goes (default
    ``sys.stderr``), drawn only if it is a terminal. It writes with the stream's own ``write`` (its class's), so a
    console capture wrapped around it, before or after (W&B's, in a command's own W&B run), does not record the line's
    redrawing.

    Safe to call from several threads (``compare`` and ``sweep`` run trials in threads)."""

    def __init__(
        self,
        label: str,
        total: int,
        metric: str = "",
        goal: str = "maximize",
        stream: TextIO | None = None,
        every: float = 2.0,
    ) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.enabled = is_terminal(self.stream)
        # the stream's own write, not a wrapper a console capture (W&B's, a command's own W&B run) put on it
        self._write, self._flush = type(self.stream).write.__get__(self.stream), self.stream.flush
        self.label, self.total, self.metric, self.goal, self.every = label, total, metric, goal, every
        self.finished = self.running = self.failed = 0
        self.best_value: float | None = None
        self.best_who = ""
        self._start = time.monotonic()
        self._shown = False
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ what happens
    def start(self) -> StatusLine:
        """Draw the line and redraw it every ``every`` seconds (a thread of its own) until :meth:`close`."""
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._tick, name="status line", daemon=True)
            self._thread.start()
        self.draw()
        return self

    def trial_started(self) -> None:
        with self._lock:
            self.running += 1
            self.draw()

    def trial_ended(self, ok: bool, value: float | None = None, who: str = "") -> None:
        """A trial ended (``ok``: finished, else failed) with ``value`` of the metric (``None``: none)."""
        with self._lock:
            self.running = max(0, self.running - 1)
            if ok:
                self.finished += 1
            else:
                self.failed += 1
            self.consider(value, who)
            self.draw()

    def consider(self, value: float | None, who: str = "") -> None:
        """``value`` (of ``who``) becomes the best if it is better than the best so far (``None``: nothing)."""
        with self._lock:
            if value is not None and math.isfinite(value) and self._better(value):
                self.best_value, self.best_who = value, who

    def say(self, text: str, stream: TextIO | None = None) -> None:
        """Print ``text`` (a line of the command's own output, on ``sys.stdout`` unless ``stream``): the status line
        is cleared first and drawn again below it."""
        with self._lock:
            self.clear()
            print(text, file=sys.stdout if stream is None else stream, flush=True)
            self.draw()

    def close(self) -> None:
        """Stop redrawing and clear the line (what the command prints next is its result)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            self.clear()
            self.enabled = False

    def __enter__(self) -> StatusLine:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ drawing
    @property
    def best(self) -> str | None:
        """The best value so far, formatted: ``'test/acc 0.9123 (trial 4)'``; ``None`` before any."""
        if self.best_value is None:
            return None
        who = f" ({self.best_who})" if self.best_who else ""
        return f"{self.metric} {self.best_value:.4g}{who}".strip()

    def text(self) -> str:
        width = shutil.get_terminal_size((80, 24)).columns - 1
        seconds = time.monotonic() - self._start
        return status_text(self.label, self.total, self.finished, self.running, self.failed, self.best, seconds, width)

    def draw(self) -> None:
        with self._lock:
            if not self.enabled:
                return
            self._put("\r" + self.text() + "\x1b[K")
            self._shown = True

    def clear(self) -> None:
        with self._lock:
            if self._shown:
                self._put(CLEAR)
                self._shown = False

    def _put(self, text: str) -> None:
        try:
            self._write(text)
            self._flush()
        except (OSError, ValueError):  # the terminal went away: no more status
            self.enabled = self._shown = False

    def _better(self, value: float) -> bool:
        if self.best_value is None:
            return True
        return value > self.best_value if self.goal == "maximize" else value < self.best_value

    def _tick(self) -> None:
        while not self._stop.wait(self.every):
            self.draw()
