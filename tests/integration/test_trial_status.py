"""The live status line of ``compare`` and ``sweep`` (:mod:`lightning_sfl.trials.status`): drawn in place on a terminal
only, cleared before every other line and at the end, so the screen's last lines are the command's own; nothing of
it in a log or captured output. Checked on a fake terminal stream and on the real ``sweep`` command in a
pseudo-terminal."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import yaml

from lightning_sfl.trials.status import CLEAR, StatusLine


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def screen(text: str) -> list[str]:
    """The lines a terminal shows for ``text``: ``\\r`` returns to the line's start, ``ESC[K`` erases to its end,
    ``\\n`` starts a new line (a pty writes ``\\r\\n``)."""
    lines, line, col = [], "", 0
    i = 0
    while i < len(text):
        if text.startswith("\x1b[K", i):
            line, i = line[:col], i + 3
            continue
        ch = text[i]
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append(line)
            line, col = "", 0
        else:
            line = line[:col] + ch + line[col + 1 :]
            col += 1
        i += 1
    return lines + ([line] if line else [])


def test_on_a_terminal_the_line_is_drawn_in_place_and_cleared_before_other_lines_and_at_the_end():
    term = FakeTerminal()
    with StatusLine("sweep", total=3, metric="test/acc", goal="maximize", stream=term) as status:
        assert screen(term.getvalue()) == [status.text()]
        assert status.text().startswith("[sweep] 0/3 finished, 0 running")
        status.trial_started()
        status.trial_started()
        assert screen(term.getvalue())[-1].startswith("[sweep] 0/3 finished, 2 running, 0 failed; 0 s")
        status.trial_ended(True, 0.5, "trial 0")
        status.trial_ended(False, None, "trial 1")
        status.say("[sweep] trial 0: finished", stream=term)
        assert screen(term.getvalue()) == ["[sweep] trial 0: finished", status.text()]
        assert "1/3 finished, 0 running, 1 failed; best test/acc 0.5 (trial 0)" in status.text()
        status.trial_started()
        status.trial_ended(True, 0.25, "trial 2")  # worse: the best stays
        assert "best test/acc 0.5 (trial 0)" in status.text()
    assert term.getvalue().endswith(CLEAR)
    assert screen(term.getvalue()) == ["[sweep] trial 0: finished"]  # the status line is gone
    status.say("after")  # a closed status line draws nothing more
    assert term.getvalue().endswith(CLEAR)


def test_minimize_keeps_the_lowest_and_the_line_is_redrawn_every_few_seconds():
    term = FakeTerminal()
    with StatusLine("compare", total=2, metric="loss", goal="minimize", stream=term, every=0.05) as status:
        status.trial_ended(True, 2.0, "a")
        status.trial_ended(True, 1.0, "b")
        assert status.best == "loss 1 (b)"
        drawn = term.getvalue().count("\r")
        deadline = time.monotonic() + 5
        while term.getvalue().count("\r") < drawn + 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert term.getvalue().count("\r") >= drawn + 3  # redrawn with nothing happening (the elapsed time)


def test_nothing_is_drawn_on_a_stream_that_is_not_a_terminal(capsys):
    log = io.StringIO()
    with StatusLine("sweep", total=2, stream=log, every=0.01) as status:
        status.trial_started()
        status.trial_ended(True, 1.0, "trial 0")
        status.say("[sweep] trial 0: finished")
        time.sleep(0.05)
    assert log.getvalue() == "" and not status.enabled
    assert capsys.readouterr().out == "[sweep] trial 0: finished\n"  # the command's own lines as before


def test_the_sweep_command_on_a_terminal_ends_with_its_table_and_no_status_line(tmp_path):
    """The real command with its output on a pseudo-terminal: the status line appears while trials run, and what the
    terminal shows at the end is the command's lines, the table last."""
    (tmp_path / "slow.py").write_text(
        "import os, sys, time\ntime.sleep(0.5)\nos.makedirs('runs/csv/version_0', exist_ok=True)\n"
        "open('runs/csv/version_0/metrics.csv', 'w').write('score\\n' + sys.argv[1].split('=')[1] + '\\n')\n"
    )
    sweep = {"name": "t", "method": "grid", "metric": {"name": "score", "goal": "maximize"},
             "parameters": {"x": {"values": [1, 3, 2]}}, "command": [sys.executable, "slow.py", "${args}"]}  # fmt: skip
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(sweep))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}, "COLUMNS": "200"}
    master, slave = pty.openpty()
    cmd = [sys.executable, "-m", "lightning_sfl.cli", "sweep", "t.yaml", "--out", "out", "--trust_command"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the command's end of the terminal is closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=120) == 0
    text = b"".join(chunks).decode()
    assert "[sweep] 1/3 finished, 1 running, 0 failed; best score 1 (trial 0)" in text  # while trials ran
    shown = screen(text)
    table = ["| trial | status | score | x |", "| --- | --- | --- | --- |", "| 1 | finished | 3.0000 | 3 |",
             "| 2 | finished | 2.0000 | 2 |", "| 0 | finished | 1.0000 | 1 |"]  # fmt: skip
    assert shown[-5:] == table  # the last lines: the table, not a status line
    assert not any("running" in line for line in shown)  # every status line was cleared
    assert [line for line in shown if "trial 2: finished" in line] == ["[sweep t] trial 2: finished, score=2"]
    assert Path(tmp_path / "out" / "results.md").is_file()
