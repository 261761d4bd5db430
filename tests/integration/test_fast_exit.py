"""``exit_without_teardown``: the console entry point ends without the interpreter's module teardown, but after
the non-daemon threads, the ``atexit`` handlers and a flush of the standard streams — nothing a run writes is lost."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import atexit, sys, threading, time
    from pathlib import Path
    from lightning_sfl.process.fast_exit import exit_without_teardown

    out = Path(sys.argv[1])
    atexit.register(lambda: (out / "atexit.txt").write_text("ran"))
    def late():
        time.sleep(0.3)
        (out / "thread.txt").write_text("joined")
    threading.Thread(target=late).start()
    sys.stdout.write("buffered, no newline")
    sys.stderr.write("to stderr")
    class Finalised:
        def __del__(self):
            (out / "teardown.txt").write_text("torn down")
    keep = Finalised()  # a module-level object: finalised only by the interpreter's teardown
    exit_without_teardown(3)
    """
)


def test_threads_atexit_and_buffers_are_done_and_the_teardown_is_skipped(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3
    assert proc.stdout == "buffered, no newline" and proc.stderr == "to stderr"
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    assert (tmp_path / "thread.txt").read_text() == "joined"
    assert not (tmp_path / "teardown.txt").exists()  # what was skipped (the usual exit would have written it)


def test_the_usual_exit_when_asked_or_under_a_tracer(tmp_path, monkeypatch):
    from lightning_sfl.process.fast_exit import exit_code, teardown_wanted

    monkeypatch.delenv("LIGHTNING_SFL_TEARDOWN", raising=False)
    tracer = sys.gettrace() or sys.getprofile()  # coverage or a debugger running these tests
    assert teardown_wanted() is (tracer is not None)
    monkeypatch.setenv("LIGHTNING_SFL_TEARDOWN", "1")
    assert teardown_wanted()
    assert [exit_code(None), exit_code(SystemExit()), exit_code(SystemExit(2))] == [0, 0, 2]


@pytest.mark.parametrize("args,code", [(["--help"], 0), (["nonsense"], 2), ([], 2)])
def test_console_entry_point_exit_codes(args, code):
    proc = subprocess.run([sys.executable, "-m", "lightning_sfl.cli", *args], capture_output=True, text=True)
    assert proc.returncode == code, proc.stderr
    assert ("usage: lightning-sfl" in proc.stdout) is (code == 0 or not args)
