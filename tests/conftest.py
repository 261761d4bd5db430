"""Shared test settings: one torch thread (small models on a shared 2-core CPU run fastest that way) and W&B
offline so no test can reach a server; a test session that leaves a run's output in the repository's folder fails."""

import http.server
import os
import threading
from pathlib import Path

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
#: What a run writes into its working directory: a test that runs one in the repository's folder leaves it there.
RUN_OUTPUTS = ("runs", "wandb", "lightning_logs", "client_state")
_OUTPUTS_BEFORE = {name for name in RUN_OUTPUTS if (REPO / name).exists()}


def pytest_sessionfinish(session, exitstatus):
    """Fail the session (in the main process, after every worker) if a test wrote a run into the repository's folder:
    tests run commands in their own folders (``run_dir``, ``cwd=tmp_path``)."""
    if hasattr(session.config, "workerinput"):
        return
    left = [name for name in RUN_OUTPUTS if (REPO / name).exists() and name not in _OUTPUTS_BEFORE]
    if left:
        print(f"\nerror: the tests left {', '.join(left)} in {REPO}: a test ran a command in the repository's folder")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


#: Tests that took 1.5 s or more on two cores (``tests/slow.txt``, written by ``tests/slow_list.py``): marked
#: ``slow``, so that ``pytest tests/unit tests/integration -m "not extended and not slow"`` is the README's quick
#: command. ``True``: its setup alone did.
SLOW = {
    node: flag == "setup"
    for node, _, flag in (
        line.strip().partition(" ") for line in (REPO / "tests" / "slow.txt").read_text().splitlines() if line
    )
    if not node.startswith("#")
}


def pytest_collection_modifyitems(config, items):
    """Marks ``slow`` the tests listed in :data:`SLOW`, and every test of a file that shares a module- or session-wide
    fixture with a listed test whose setup was slow (the fixture would otherwise be built, slowly, in the quick
    command by the first of them to run)."""
    heavy = {(item.path, name) for item in items if SLOW.get(item.nodeid) for name in _shared_fixtures(item)}
    for item in items:
        if item.nodeid in SLOW or any((item.path, name) in heavy for name in _shared_fixtures(item)):
            item.add_marker(pytest.mark.slow)


def _shared_fixtures(item) -> list[str]:
    """The fixtures of a test built once for several tests (scope module, package or session)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs if info is not None else {}
    return [name for name, found in defs.items() if found and found[-1].scope in ("module", "package", "session")]


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """Run CLI commands inside a fresh directory (relative ``runs/`` and ``data/`` land there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


class _Refusing(http.server.BaseHTTPRequestHandler):
    """A W&B address that answers every request with 401: reachable, but it refuses every key."""

    def _refuse(self) -> None:
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_HEAD = _refuse

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def wandb_401():
    """The address of a local HTTP server that answers (401) every request: W&B's online check finds it reachable."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
