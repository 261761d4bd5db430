"""W&B that cannot be reached: found before the run starts (:mod:`lightning_sfl.wandb.online`: no API key, no server),
or when ``wandb.init`` refuses an online run (the worker starts it offline): either way the run's W&B record is
written offline, nothing is lost, and one line says why. Real sockets and a real local HTTP server, no mocks."""

from __future__ import annotations

import os
import re
import socket

from _helpers import REPO
from cli_in_one_process import run_command

from lightning_sfl.wandb.online import logs_online, offline_reason


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_reason_an_online_run_cannot_start(monkeypatch, tmp_path, wandb_401):
    """No key (no ``WANDB_API_KEY``, an empty netrc); a closed port; a server that answers (even 401) is reachable."""
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    (tmp_path / "netrc").write_text("")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", wandb_401)
    assert offline_reason() == f"no API key for {wandb_401} (wandb login, or WANDB_API_KEY)"
    host = wandb_401.removeprefix("http://").split(":")[0]
    (tmp_path / "netrc").write_text(f"machine {host} login user password {'k' * 40}\n")
    assert offline_reason() is None  # the key from netrc, the server answers
    port = _closed_port()
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    assert offline_reason() == f"cannot reach http://127.0.0.1:{port} (connection refused)"


def test_which_loggers_would_start_an_online_run(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "online")
    assert logs_online(None) and logs_online(False) and not logs_online(True)
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert not logs_online(None) and not logs_online(False)


def test_a_server_that_refuses_the_run_gives_an_offline_run_and_one_line(tmp_path, wandb_401):
    """The check passes (a key, a server that answers) but ``wandb.init`` fails online: the worker starts the run
    offline, the command says why in one line before its last lines, exits 0, and the offline run holds the
    accuracy the command printed."""
    from lightning_sfl.wandb.offline import find_offline_runs, read_offline_run

    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_MODE="online", WANDB_BASE_URL=wandb_401, WANDB_API_KEY="k" * 40, PYTHONWARNINGS="ignore")
    cmd = ["fit", "--config", str(REPO / "configs/digits/scala.yaml")]
    cmd += ["--trainer.max_epochs=2", "--trainer.enable_progress_bar=false"]
    proc = run_command(cmd, cwd=tmp_path, env=env, merged=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = proc.stdout.strip().splitlines()
    said = [line for line in lines if line.startswith("W&B:")]
    offline = "this run logs offline (nothing is lost: wandb sync uploads it later)"
    assert len(said) == 1 and said[0].endswith(offline), proc.stdout[-3000:]
    assert "401" in said[0] and lines.index(said[0]) < len(lines) - 2 and "Traceback" not in proc.stdout
    assert lines[-1].startswith("final test accuracy: ") and "W&B offline run" in lines[-2]
    [record] = find_offline_runs(next(tmp_path.glob("runs/*")) / "wandb")
    final = float(re.search(r"final test accuracy: (\S+)", lines[-1]).group(1))
    assert round(float(read_offline_run(record).summary["test/acc"]), 4) == final
