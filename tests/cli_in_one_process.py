"""Several command lines through the real entry point (``lightning_sfl.cli.main``, what the console script runs), one
after another in one fresh Python process, so that Lightning, torch and W&B are imported once instead of once per
command.

Each command runs in its own folder with file descriptors 1 and 2 redirected to files of its own, so everything it
prints reaches its result: Lightning's log lines (whose handler holds the stream it found at import), W&B's and those
of any process it starts. Its exit code is ``SystemExit``'s, 0 when ``main`` returns, and ``None`` (with the
traceback in its stderr) when any other exception escapes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

_RUNNER = textwrap.dedent(
    """
    import json, os, sys, traceback
    from lightning_sfl.cli import main
    results = []
    saved = os.dup(1), os.dup(2)
    for folder, args, out, err in json.loads(sys.stdin.read()):
        os.chdir(folder)
        with open(out, "w") as out_file, open(err, "w") as err_file:
            sys.stdout.flush(); sys.stderr.flush()
            os.dup2(out_file.fileno(), 1); os.dup2(err_file.fileno(), 2)
            try:
                main(args)
                code = 0
            except SystemExit as exc:
                code = exc.code
            except BaseException:
                code = None
                traceback.print_exc()
            sys.stdout.flush(); sys.stderr.flush()
            os.dup2(saved[0], 1); os.dup2(saved[1], 2)
        results.append(code)
    print(json.dumps(results))
    """
)


@dataclass
class Run:
    """What one command gave: exit code (``None``: an exception escaped ``main``), stdout and stderr."""

    code: int | None
    stdout: str
    stderr: str


def run_in_one_process(commands: list[tuple[Path, list[str]]], env: dict[str, str] | None = None) -> list[Run]:
    """Each ``(folder, argv)`` of ``commands`` run by ``main(argv)`` in ``folder``, in order, in one new process.

    ``env`` replaces the environment (default: this process's). The captured output is kept next to the folders
    (``<folder>.<i>.stdout``/``.stderr`` for the ``i``-th command), so a command finds only its own files in its
    folder."""
    payload = [[str(f), argv, f"{f}.{i}.stdout", f"{f}.{i}.stderr"] for i, (f, argv) in enumerate(commands)]
    proc = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(payload), capture_output=True, text=True,
                          env=os.environ.copy() if env is None else env, timeout=1200)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    return [Run(code, Path(out).read_text(), Path(err).read_text()) for code, (_, _, out, err) in zip(codes, payload)]
