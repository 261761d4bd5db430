"""End the ``lightning-sfl`` process without the interpreter's teardown of its modules.

When Python exits normally it first joins non-daemon threads and runs the ``atexit`` handlers (W&B's worker is
closed there, logging is shut down, ...), then tears its modules down object by object. With Lightning imported
(torchmetrics, torchvision, ``torch._dynamo``, scipy: ~5,000 modules) that last part alone takes most of a second
(``benchmarks/framework_overhead.py`` measures it), and it writes nothing: every file of a run is closed before.

:func:`exit_without_teardown` does the first two steps, flushes ``sys.stdout``/``sys.stderr`` and ends the process
with ``os._exit``. Only the console entry point uses it (:func:`lightning_sfl.cli.console_main`, also
``python -m lightning_sfl.cli``), not a Python caller of :func:`lightning_sfl.cli.main`; it steps aside under a
profiler or tracer (cProfile, coverage: they write their results at the interpreter's exit) and when
``LIGHTNING_SFL_TEARDOWN=1``.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

__all__ = ["exit_without_teardown", "teardown_wanted"]


def teardown_wanted() -> bool:
    """Whether the process should end the usual way: a profiler or tracer is active, or ``LIGHTNING_SFL_TEARDOWN=1``."""
    return sys.getprofile() is not None or sys.gettrace() is not None or os.environ.get("LIGHTNING_SFL_TEARDOWN") == "1"


def exit_code(exc: SystemExit | None) -> int:
    """The exit status Python gives ``raise exc`` (``None``: 0; a message: printed to stderr, 1)."""
    code = None if exc is None else exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def exit_without_teardown(code: int = 0) -> None:
    """Join the non-daemon threads, run the ``atexit`` handlers, flush the standard streams, ``os._exit(code)``."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or broken stream: nothing more can be written to it anyway
            pass
    os._exit(code)
