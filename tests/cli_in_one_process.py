"""Command lines through the real entry point (``lightning_sfl.cli.main``, what the console script runs), each in a
process of its own that starts with Lightning, torch and the CLI already imported: a server process per environment
(one per pytest worker, mostly) imports them once, then forks a child per command. A child is a fresh copy of that
server — nothing of an earlier command reaches it — which runs the command as the console script does
(:func:`lightning_sfl.cli.console_main`: ``main``, the ``atexit`` handlers, ``os._exit``), but with the working folder
on ``sys.path``, as ``python -c`` puts it (stricter than the console script: a module there is found by an import).

The server is keyed by the environment it is given (but for variables only a running command reads, W&B's and the
proxies: :data:`_RUNTIME_ONLY`), so whatever an interpreter reads
when it starts or imports (``PYTHONPATH``, thread counts, warning filters) is the command's own; a child also gets the
command's environment as ``os.environ``. What a forked child cannot show is what happens while those modules are
imported: a test of import-time behaviour (warnings printed while importing, modules a command imports) passes
``fresh=True``, which runs the commands one after another in one new process instead.

Each command runs in its own folder with file descriptors 1 and 2 redirected to files of its own, so everything it
prints reaches its result: Lightning's log lines (whose handler holds the stream it found at import), W&B's and those
of any process it starts. Its exit code is the process's (``SystemExit``'s, 0 when ``main`` returns, ``-N`` for a
signal), and ``None`` (with the traceback in its stderr) when any other exception escapes."""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

#: A child's exit status when an exception other than ``SystemExit`` escaped ``main`` (reported as code ``None``).
_ESCAPED = 213
#: The longest one command may take (seconds).
_TIMEOUT = 1200

_SERVER = textwrap.dedent(
    f"""
    import json, os, sys, traceback
    import lightning_sfl.cli, lightning_sfl.lightning_cli  # the imports every command would make, made once
    from lightning_sfl.process.fast_exit import exit_code, exit_without_teardown
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    for line in sys.stdin:
        folder, args, out, err, env = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os.chdir(folder)
            os.environ.clear(); os.environ.update(env)
            null = os.open(os.devnull, os.O_RDONLY)
            out_fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            err_fd = out_fd if err == out else os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(null, 0); os.dup2(out_fd, 1); os.dup2(err_fd, 2)
            sys.argv = ["lightning-sfl", *args]
            try:
                lightning_sfl.cli.main(args)
            except SystemExit as exc:
                exit_without_teardown(exit_code(exc))
            except BaseException:
                traceback.print_exc()
                exit_without_teardown({_ESCAPED})
            exit_without_teardown(0)
        _, status = os.waitpid(pid, 0)
        sys.stdout.write(json.dumps(os.waitstatus_to_exitcode(status)) + "\\n"); sys.stdout.flush()
    """
)

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


class _Server:
    """A process with the CLI imported that forks a child per command (:data:`_SERVER`)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, text=True, bufsize=1)  # fmt: skip
        assert self._line() == "ready", "the command server did not start"

    def _line(self) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], _TIMEOUT)
        if not ready:
            self.close()
            raise AssertionError(f"a command took more than {_TIMEOUT} s")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the command server ended (exit code {self.proc.wait()})")
        return line.strip()

    def run(self, folder: Path, argv: list[str], out: str, err: str, env: dict[str, str]) -> int | None:
        self.proc.stdin.write(json.dumps([str(folder), argv, out, err, env]) + "\n")
        self.proc.stdin.flush()
        code = json.loads(self._line())
        return None if code == _ESCAPED else code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


_SERVERS: dict[str, _Server] = {}


#: Variables read only while a command runs, never while the server starts or imports: left out of its key.
_RUNTIME_ONLY = ("PYTEST_", "WANDB_", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")


def _server(env: dict[str, str]) -> _Server:
    key = json.dumps(sorted((k, v) for k, v in env.items() if not k.startswith(_RUNTIME_ONLY)))
    server = _SERVERS.get(key)
    if server is None or server.proc.poll() is not None:
        if len(_SERVERS) >= 4:  # (each holds an interpreter with Lightning imported: ~0.5 GB)
            _SERVERS.pop(next(iter(_SERVERS))).close()
        server = _SERVERS[key] = _Server(env)
    return server


@atexit.register
def _close_servers() -> None:
    for server in _SERVERS.values():
        server.close()


def run_in_one_process(commands: list[tuple[Path, list[str]]], env: dict[str, str] | None = None,
                       fresh: bool = False, merged: bool = False) -> list[Run]:  # fmt: skip
    """Each ``(folder, argv)`` of ``commands`` run by ``main(argv)`` in ``folder``, in order.

    ``env`` is the commands' environment (default: this process's). Each command runs in a child forked from the
    server for ``env``; with ``fresh``, all of them one after another in one new process (which imports everything
    itself). The captured output is kept next to the folders (``<folder>.<i>.stdout``/``.stderr`` for the ``i``-th
    command), so a command finds only its own files in its folder. With ``merged``, stderr goes to the stdout file,
    interleaved as a terminal shows them (the ``stderr`` of each result is then empty)."""
    env = os.environ.copy() if env is None else dict(env)
    err = "stdout" if merged else "stderr"
    payload = [[str(f), argv, f"{f}.{i}.stdout", f"{f}.{i}.{err}"] for i, (f, argv) in enumerate(commands)]
    if fresh:
        assert not merged, "merged: for the forked children only"
        proc = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(payload), capture_output=True,
                              text=True, env=env, timeout=_TIMEOUT)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        codes = json.loads(proc.stdout.strip().splitlines()[-1])
    else:
        server = _server(env)
        codes = [server.run(Path(f), argv, out, err, env) for f, argv, out, err in payload]
    return [Run(code, Path(out).read_text(), "" if merged else Path(err).read_text())
            for code, (_, _, out, err) in zip(codes, payload)]  # fmt: skip


def run_command(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
                merged: bool = False) -> subprocess.CompletedProcess:  # fmt: skip
    """``lightning-sfl ARGV`` in ``cwd`` in a child of the server (:func:`run_in_one_process`), as what
    ``subprocess.run(..., capture_output=True, text=True)`` of the console script returns (``merged``: as with
    ``stderr=subprocess.STDOUT``)."""
    (run,) = run_in_one_process([(Path(cwd), list(argv))], env=env, merged=merged)
    return subprocess.CompletedProcess(["lightning-sfl", *argv], run.code, run.stdout, run.stderr)
