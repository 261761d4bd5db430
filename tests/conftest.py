"""Shared test settings: one torch thread (small models on a shared 2-core CPU run fastest that way) and W&B
offline so no test can reach a server; a test session that leaves a run's output in the repository's folder fails."""

import http.server
import os
import subprocess
import sys
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


#: The documentation build that a session with the site's tests starts first (:func:`pytest_sessionstart`), and where
#: it says how it ended: its exit code, then its output (``tests/studies/test_docs_site.py`` waits for it).
SITE_BUILD = ["-m", "sphinx", "-n", "-W", "--keep-going", "-q", "-b", "html", "docs", "docs/_build/html"]
SITE_BUILD_LOG = REPO / "docs" / "_build" / "sphinx.log"
_site_build: subprocess.Popen | None = None


def _tests_the_site(config) -> bool:
    """Whether the session runs ``tests/studies`` (all of it, or a file or test of it)."""
    studies = REPO / "tests" / "studies"
    for arg in config.args:
        path = Path(str(arg).split("::", 1)[0]).resolve()
        if path == studies or studies in path.parents or path in studies.parents:
            return True
    return False


def pytest_sessionstart(session):
    """In the main process of a session that tests the site: build it in the background (nitpicky, warnings are
    errors), beside the tests, so that its ~70 s on one core overlap them; the build ends by writing its exit code and
    output to :data:`SITE_BUILD_LOG`."""
    global _site_build
    if hasattr(session.config, "workerinput") or not _tests_the_site(session.config):
        return
    SITE_BUILD_LOG.parent.mkdir(exist_ok=True)
    SITE_BUILD_LOG.unlink(missing_ok=True)
    script = (
        "import subprocess, sys; from pathlib import Path\n"
        "out = subprocess.run(sys.argv[2:], capture_output=True, text=True)\n"
        "part = Path(sys.argv[1] + '.partial'); part.write_text(f'{out.returncode}\\n{out.stdout}{out.stderr}')\n"
        "part.rename(sys.argv[1])\n"
    )
    _site_build = subprocess.Popen([sys.executable, "-c", script, str(SITE_BUILD_LOG), sys.executable, *SITE_BUILD],
                                   cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def pytest_sessionfinish(session, exitstatus):
    """Fail the session (in the main process, after every worker) if a test wrote a run into the repository's folder:
    tests run commands in their own folders (``run_dir``, ``cwd=tmp_path``). A site build still running is waited
    for (a session that stops early leaves no build behind)."""
    if hasattr(session.config, "workerinput"):
        return
    if _site_build is not None:
        _site_build.wait()
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
    heavy = {(item.path, name) for item in items if SLOW.get(_listed(item)) for name in _shared_fixtures(item)}
    for item in items:
        if _listed(item) in SLOW or any((item.path, name) in heavy for name in _shared_fixtures(item)):
            item.add_marker(pytest.mark.slow)


def _listed(item) -> str:
    """The node id as ``tests/slow.txt`` lists it: up to its first space (a parameter's id may hold spaces)."""
    return item.nodeid.partition(" ")[0]


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
