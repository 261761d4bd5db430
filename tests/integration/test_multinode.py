"""Several nodes: processes that a launcher starts on their own, each running the same command (torchrun's nodes,
SLURM's tasks, one command per node with ``NODE_RANK``), agree on one run folder (rank 0 chooses, creates and holds
it; the others learn its name: :class:`lightning_sfl.run_folder.Rendezvous`), train as one process does, continue
after a kill of every process with ``--ckpt_path last``, and a stop on one rank is one ``error:`` line on each.

Two "nodes" on one machine (gloo on CPU), started at once. The commands are the documentation's
(``docs/guide/runs.md``'s torchrun lines, the ``srun`` line of the multi-node job script in it and in
``docs/tutorials/ddp-and-slurm.md``, the tutorial's ``NODE_RANK`` lines), with the rounds shortened, a free port for
the first node's, and W&B off."""

from __future__ import annotations

import csv
import json
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _helpers import REPO

BIN = Path(sys.executable).parent
ROUNDS = 2
#: What the tests add to the documented commands, besides fewer rounds (the config has 100): no progress bar, no model
#: summary.
SHORTER = ("--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false")
#: Variables of a launcher or of a run folder that must not leak into the processes from the test's own environment.
LEAKS = re.compile(r"SLURM_\w+|RANK|LOCAL_RANK|NODE_RANK|GROUP_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT"
                   r"|TORCHELASTIC_\w+|LIGHTNING_SFL_RUN_FOLDER|WANDB_\w+|PL_GLOBAL_SEED")  # fmt: skip


# ------------------------------------------------------------------------------------------ the documented commands
def _commands(page: Path) -> list[str]:
    """The command lines of a page's bash blocks (backslash continuations joined, trailing comments dropped)."""
    text = page.read_text()
    blocks = re.findall(r"^ *```(?:bash|\{code-block\} bash)\n(.*?)^ *```", text, re.S | re.M)
    lines = []
    for block in blocks:
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith(("#", ":")):
                lines.append(line)
    return lines


GUIDE = REPO / "docs" / "guide" / "runs.md"
TUTORIAL = REPO / "docs" / "tutorials" / "ddp-and-slurm.md"


def _srun_args() -> list[str]:
    """The ``srun`` line of the multi-node job script (``--trainer.num_nodes``), the same in the guide and the
    tutorial; its arguments after ``srun lightning-sfl``."""
    found = {page.name: [c for c in _commands(page) if c.startswith("srun ") and "--trainer.num_nodes" in c]
             for page in (GUIDE, TUTORIAL)}  # fmt: skip
    assert all(len(v) == 1 for v in found.values()), found
    assert found[GUIDE.name] == found[TUTORIAL.name], found
    words = shlex.split(found[GUIDE.name][0])
    assert words[:2] == ["srun", "lightning-sfl"], words
    return words[2:]


def _torchrun_words(port: int) -> list[list[str]]:
    """The guide's torchrun line of each node, node 0 at 127.0.0.1 and the master port ``port``."""
    lines = [c for c in _commands(GUIDE) if c.startswith("torchrun ")]
    nodes = []
    for line in lines:
        words = shlex.split(line)
        words[words.index("--master_addr") + 1] = "127.0.0.1"
        words[words.index("--master_port") + 1] = str(port)
        nodes.append(words)
    assert [w[w.index("--node_rank") + 1] for w in nodes] == ["0", "1"], lines
    return nodes


def _node_rank_lines(port: int) -> list[tuple[dict[str, str], list[str]]]:
    """The tutorial's lines for Lightning's own launcher (``NODE_RANK=k lightning-sfl fit …``): environment, words."""
    found = []
    for line in _commands(TUTORIAL):
        match = re.fullmatch(r"((?:\w+=\S+\s+)+)(lightning-sfl .*)", line)
        if match and "NODE_RANK=" in match[1]:
            env = dict(w.split("=", 1) for w in match[1].split())
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            found.append((env, shlex.split(match[2])))
    assert [env["NODE_RANK"] for env, _ in found] == ["0", "1"], found
    return found


# ------------------------------------------------------------------------------------------ processes
def _free_port(low: int | None = None, high: int | None = None) -> int:
    """A free port: any (bound to port 0), or one in ``[low, high)``."""
    for _ in range(200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", 0 if low is None else random.randrange(low, high)))
            except OSError:
                continue
            return s.getsockname()[1]
    raise AssertionError("no free port")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not LEAKS.fullmatch(k)}
    env.update(WANDB_MODE="disabled", PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", **extra)
    env.pop("PYTHONPATH", None)
    return env


def _folder(tmp_path: Path, name: str) -> Path:
    """A working folder with the repository's ``configs/`` (the documented commands name ``configs/…``)."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "configs").symlink_to(REPO / "configs", target_is_directory=True)
    return folder


class Started:
    """Processes started at once, each with its output in a file; :meth:`wait` gives their exit codes and outputs."""

    def __init__(self, cwd: Path, commands: list[tuple[list[str], dict[str, str]]], first: int = 0, delay: float = 0):
        self.cwd, self.procs, self.logs = cwd, {}, {}
        order = list(range(len(commands)))
        order = order[first:] + order[:first]
        for i in order:
            argv, env = commands[i]
            self.logs[i] = cwd.parent / f"{cwd.name}.out{i}.txt"
            with open(self.logs[i], "w") as log:
                self.procs[i] = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
            time.sleep(delay)

    def wait(self, timeout: float = 400) -> list[tuple[int, str]]:
        deadline = time.monotonic() + timeout
        try:
            for proc in self.procs.values():
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            self.kill()
        return [(self.procs[i].returncode, self.logs[i].read_text()) for i in sorted(self.procs)]

    def kill(self) -> None:
        """SIGKILL to every process started and all their descendants (a torchrun agent's worker runs in a session of
        its own), the descendants first."""
        for pid in [*_descendants([p.pid for p in self.procs.values()]), *(p.pid for p in self.procs.values())]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.procs.values():
            proc.wait()


def _descendants(pids: list[int]) -> list[int]:
    """The processes below ``pids`` (from ``/proc``), deepest first."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, level = [], list(pids)
    while level:
        level = [pid for pid, parent in parents.items() if parent in level]
        found = level + found
    return found


def _torchrun(cwd: Path, extra=(), first: int = 0, delay: float = 0) -> Started:
    nodes = _torchrun_words(_free_port())
    return Started(cwd, [([str(BIN / w[0]), *w[1:], *extra], _env()) for w in nodes], first, delay)


def _slurm_envs(job: str | None = None) -> list[dict[str, str]]:
    """The environments SLURM gives the two tasks of a two-node job (one task a node) of id ``job``. No
    ``MASTER_ADDR``/``MASTER_PORT``: Lightning takes the first node of the job's node list and a port from the job id,
    chosen here to be free."""
    if job is None:
        job = f"7{_free_port(15000, 25000) - 15000:04d}"  # Lightning's port: 15000 + the job id's last four digits
    common = dict(SLURM_JOB_ID=job, SLURM_JOB_NAME="scala-2nodes", SLURM_NNODES="2", SLURM_NTASKS="2",
                  SLURM_NTASKS_PER_NODE="1", SLURM_NODELIST="localhost", SLURM_LOCALID="0")  # fmt: skip
    return [_env(**common, SLURM_PROCID=str(rank), SLURM_NODEID=str(rank)) for rank in (0, 1)]


def _slurm(cwd: Path, args: list[str], per_rank=((), ())) -> Started:
    """``lightning-sfl ARGS`` as the two tasks of a two-node job (``per_rank``: arguments one task adds)."""
    return Started(cwd, [([str(BIN / "lightning-sfl"), *args, *more], env)
                         for more, env in zip(per_rank, _slurm_envs())])  # fmt: skip


def _one_process(cwd: Path, rounds: int) -> Started:
    """The same configuration on one process (the reference)."""
    argv = [str(BIN / "lightning-sfl"), "fit", "--config", "configs/digits/scala.yaml", "--trainer.accelerator=cpu",
            f"--trainer.max_epochs={rounds}", *SHORTER]  # fmt: skip
    return Started(cwd, [(argv, _env())])


# ------------------------------------------------------------------------------------------ what a run wrote
def _run_of(cwd: Path) -> Path:
    """The one run folder a command wrote (``runs/<name>``)."""
    folders = sorted(cwd.glob("runs/*"))
    assert len(folders) == 1, folders
    return folders[0]


def _rounds(run: Path) -> dict[int, float]:
    """Test accuracy by round from the run's CSV log."""
    with open(run / "csv" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("test/acc")]
    found = {int(float(r["round"])): float(r["test/acc"]) for r in rows}
    assert len(found) == len(rows), "a round logged twice"
    return found


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")["state_dict"]


def _assert_equal_runs(run: Path, reference: Path, rounds: int, tolerance: float = 1e-4) -> None:
    """The run's weights and per-round accuracy are the reference run's (by default to DDP's tolerance against one
    process in float32, as test_ddp.py; ``tolerance=0``: exactly)."""
    mine, theirs = _weights(run), _weights(reference)
    assert mine.keys() == theirs.keys()
    for k, v in theirs.items():
        if v.is_floating_point():
            torch.testing.assert_close(mine[k], v, rtol=tolerance, atol=tolerance / 10, msg=lambda m, k=k: f"{k}: {m}")
    accuracy, expected = _rounds(run), _rounds(reference)
    assert sorted(accuracy) == sorted(expected) == list(range(1, rounds + 1)), (accuracy, expected)
    for r, acc in expected.items():
        assert accuracy[r] == pytest.approx(acc, rel=tolerance, abs=tolerance / 10), r


def _assert_clean(out: str) -> None:
    """No traceback, no C++ log line (torch.distributed's ``[W… TCPStore.cpp…]``), no warning."""
    assert "Traceback" not in out and "frame #" not in out and not re.search(r"^\[[WE]\d", out, re.M), out[-3000:]
    assert not re.search(r"warn", out, re.I), out[-3000:]


def _assert_trained(results: list[tuple[int, str]], cwd: Path, rounds: int) -> Path:
    """Both ranks finished, rank 0 said the one run folder once and its result; returns that folder."""
    (code0, out0), (code1, out1) = results
    assert code0 == 0 and code1 == 0, (out0[-3000:], out1[-3000:])
    run = _run_of(cwd)
    assert re.findall(r"^run folder: (.*)$", out0 + out1, re.M) == [f"runs/{run.name}"], (out0, out1)
    assert f"after {rounds} rounds" in out0 and "final test accuracy" not in out1
    assert not (run / ".lock").exists() and (run / "config.yaml").is_file()
    for out in (out0, out1):
        _assert_clean(out)
    return run


def _error_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "error" in line.lower()]


# ------------------------------------------------------------------------------------------ the tests
#: The two-node start (~40 s on two cores) leaves out the one-process reference (~15 s more): the weights and metrics
#: of one process are checked for two processes in CI by test_ddp.py (the same arithmetic; which launcher started the
#: processes changes nothing in it), and for two nodes by the extended tests below (five starts, SLURM's tasks,
#: Lightning's own launcher). In CI instead: two SLURM tasks agreeing on rank 0's run folder (its stop, below),
#: torchrun's ranks and store (test_each_launcher_gives_the_rank_size_and_store).
@pytest.mark.extended
def test_two_torchrun_nodes_write_one_run_folder(tmp_path):
    """The problem measured: two torchrun nodes started at once, each choosing a folder of its own, raced (one stopped
    with "was just created by another process", the other crashed in gloo's C++ traceback) or wrote ``…-v2``. Now
    rank 0 chooses, creates and holds the one folder, rank 1 learns it, and the run trains to its end."""
    nodes = _folder(tmp_path, "nodes")
    run = _assert_trained(_torchrun(nodes, (f"--trainer.max_epochs={ROUNDS}", *SHORTER)).wait(), nodes, ROUNDS)
    assert re.fullmatch(r"scala-digits-quantity2-s0-[0-9a-f]{10}", run.name), run.name
    assert sorted(_rounds(run)) == [1, 2] and (run / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.extended  # ~4.5 min on two cores (46-54 s a start); one start of two SLURM tasks runs in CI below
def test_five_simultaneous_two_node_starts_each_take_the_next_folder(tmp_path):
    """Five starts of the same two-node command in the same folder, one after another, each pair at once (node 0 or
    node 1 first, with or without a pause between them): each start writes one new folder (``…``, ``…-v2``, …,
    ``…-v5``), complete, and trains the same run."""
    nodes, one = _folder(tmp_path, "nodes"), _folder(tmp_path, "one")
    assert _one_process(one, ROUNDS).wait()[0][0] == 0
    reference = _run_of(one)
    seconds = []
    for start in range(5):
        began = time.monotonic()
        started = _torchrun(nodes, (f"--trainer.max_epochs={ROUNDS}", *SHORTER), first=start % 2,
                            delay=(0, 0, 1.5, 0, 3)[start])  # fmt: skip
        results = started.wait()
        seconds.append(time.monotonic() - began)
        (code0, out0), (code1, out1) = results
        assert code0 == 0 and code1 == 0, (start, out0[-3000:], out1[-3000:])
        folders = sorted(p.name for p in nodes.glob("runs/*"))
        assert len(folders) == start + 1, folders
        newest = max(nodes.glob("runs/*"), key=lambda p: int((re.search(r"-v(\d+)$", p.name) or [0, 1])[1]))
        assert re.findall(r"^run folder: (.*)$", out0 + out1, re.M) == [f"runs/{newest.name}"], (out0, out1)
        _assert_equal_runs(newest, reference, ROUNDS)
    base = min(nodes.glob("runs/*"), key=lambda p: len(p.name)).name
    assert sorted(p.name for p in nodes.glob("runs/*")) == sorted([base] + [f"{base}-v{n}" for n in range(2, 6)])
    print(f"five two-node starts: {', '.join(f'{s:.0f} s' for s in seconds)}")


@pytest.mark.extended  # ~3.5 min on two cores; two SLURM tasks start in CI below (kill -9 and resume: test_resume's)
def test_both_nodes_killed_then_restarted_with_ckpt_path_last_continue_the_run(tmp_path):
    """kill -9 of both nodes (each torchrun with its worker) after a round's checkpoint; the same two commands with
    ``--ckpt_path last`` continue in the same folder (its lock, left by the killed rank 0, taken over) and end with the
    weights and per-round accuracy of the same two nodes run without a stop (started meanwhile: the same arithmetic, so
    equal to the last bit), the CSV log continued in one file, no round twice."""
    rounds = 10
    nodes, whole = _folder(tmp_path, "nodes"), _folder(tmp_path, "whole")
    extra = (f"--trainer.max_epochs={rounds}", *SHORTER)
    started, reference = _torchrun(nodes, extra), _torchrun(whole, extra)
    deadline = time.monotonic() + 300
    last = None
    while time.monotonic() < deadline and all(p.poll() is None for p in started.procs.values()):
        lasts = [p for p in nodes.glob("runs/*/checkpoints/last.ckpt") if p.exists()]
        if lasts and int(re.search(r"epoch=(\d+)", lasts[0].resolve().name)[1]) >= 1:
            last = lasts[0]
            break
        time.sleep(0.05)
    started.kill()
    assert last is not None, [log.read_text()[-2000:] for log in started.logs.values()]
    done = torch.load(last, weights_only=True, map_location="cpu")["epoch"] + 1
    assert 2 <= done < rounds - 1, f"the kill must land mid-run (round {done} of {rounds})"
    run = _run_of(nodes)
    assert (run / ".lock").exists()  # left by the killed rank 0
    again = _torchrun(nodes, (*extra, "--ckpt_path=last"), first=1).wait()
    assert _assert_trained(again, nodes, rounds) == run
    assert re.search(rf"^Restored all states from the checkpoint at .*/{re.escape(run.name)}/checkpoints/last\.ckpt$",
                     again[0][1], re.M), again[0][1]  # fmt: skip
    _assert_trained(reference.wait(), whole, rounds)
    _assert_equal_runs(run, _run_of(whole), rounds, tolerance=0.0)


#: ~50 s on two cores; in CI the torchrun start above runs the rendezvous (there torchrun's agent serves the store) and
#: the stop on rank 0 below runs SLURM's (rank 0 serves it).
@pytest.mark.extended
def test_two_slurm_tasks_run_the_documented_srun_line(tmp_path):
    """The job script's ``srun`` line as two tasks of a two-node job, with SLURM's variables only (Lightning's SLURM
    environment: no torchrun, no MASTER_ADDR or MASTER_PORT given): every task finds the run folder by itself, the
    run is the one-process run's; the script's ``--ckpt_path last`` starts fresh when there is no run yet."""
    tasks, one = _folder(tmp_path, "tasks"), _folder(tmp_path, "one")
    reference = _one_process(one, ROUNDS)
    started = _slurm(tasks, [*_srun_args(), f"--trainer.max_epochs={ROUNDS}", *SHORTER])
    results = started.wait()
    assert reference.wait()[0][0] == 0
    run = _assert_trained(results, tasks, ROUNDS)
    _assert_equal_runs(run, _run_of(one), ROUNDS)


@pytest.mark.extended  # ~50 s on two cores; two SLURM tasks in CI below
def test_two_nodes_of_lightnings_own_launcher_run_the_documented_lines(tmp_path):
    """The tutorial's ``MASTER_ADDR=… MASTER_PORT=… NODE_RANK=k lightning-sfl fit …`` on each node: one folder, the
    one-process run."""
    nodes, one = _folder(tmp_path, "nodes"), _folder(tmp_path, "one")
    reference = _one_process(one, ROUNDS)
    lines = _node_rank_lines(_free_port())
    started = Started(nodes, [([str(BIN / w[0]), *w[1:], f"--trainer.max_epochs={ROUNDS}", *SHORTER], _env(**env))
                              for env, w in lines])  # fmt: skip
    results = started.wait()
    assert reference.wait()[0][0] == 0
    run = _assert_trained(results, nodes, ROUNDS)
    _assert_equal_runs(run, _run_of(one), ROUNDS)


def test_a_stop_on_rank_0_is_one_error_line_on_every_task(tmp_path):
    """Rank 0 cannot hold the run folder (a live process holds it): it stops with its one line, and the other task,
    instead of waiting for it at the process group (and ending in gloo's C++ traceback), stops with one line naming
    rank 0 and why. Nothing is created."""
    tasks = _folder(tmp_path, "tasks")
    held = tasks / "runs" / "held"
    held.mkdir(parents=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        lock = {"pid": sleeper.pid, "host": socket.gethostname(), "command": "lightning-sfl fit", "since": 0}
        (held / ".lock").write_text(json.dumps(lock))
        args = [*_srun_args(), "--run_name=held", f"--trainer.max_epochs={ROUNDS}", *SHORTER]
        (code0, out0), (code1, out1) = _slurm(tasks, args).wait(timeout=200)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert (code0, code1) == (2, 2), (out0[-3000:], out1[-3000:])
    (line0,) = _error_lines(out0)
    (line1,) = _error_lines(out1)
    assert line0.startswith(f"error: run folder runs/held is in use by process {sleeper.pid}"), out0
    assert line1 == f"error: rank 0 stopped: {line0.removeprefix('error: ')}", out1
    for out in (out0, out1):
        _assert_clean(out)
    assert sorted(p.name for p in held.iterdir()) == [".lock"]


@pytest.mark.extended  # ~25 s on two cores; a stop on rank 0 runs in CI above
def test_a_stop_on_rank_1_is_one_error_line_on_every_task(tmp_path):
    """A setting only rank 1 refuses (here: only its command line has it): rank 1 stops with its line, rank 0 (which
    waits for every rank to be ready before it creates the folder) stops with one line naming rank 1 and why, and
    creates no folder."""
    tasks = _folder(tmp_path, "tasks")
    args = [*_srun_args(), f"--trainer.max_epochs={ROUNDS}", *SHORTER]
    (code0, out0), (code1, out1) = _slurm(tasks, args, per_rank=((), ("--data.num_clients=abc",))).wait(timeout=200)
    assert (code0, code1) == (2, 2), (out0[-3000:], out1[-3000:])
    (line1,) = _error_lines(out1)
    (line0,) = _error_lines(out0)
    assert line1.startswith("error: --data.num_clients: expected a whole number"), out1
    assert line0 == f"error: rank 1 stopped: {line1.removeprefix('error: ')}", out0
    for out in (out0, out1):
        _assert_clean(out)
    assert not (tasks / "runs").exists() or not any((tasks / "runs").iterdir())


@pytest.mark.parametrize(
    "variables,expected",
    [
        ({"RANK": "1", "GROUP_RANK": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "WORLD_SIZE": "2",
          "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_USE_AGENT_STORE": "True",
          "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "3"},
         ("torchrun", 1, 2, "10.0.0.1", 29500, True, "none-3")),
        ({"SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2", "SLURM_PROCID": "2", "SLURM_LOCALID": "0",
          "SLURM_NODEID": "1", "SLURM_JOB_ID": "123456", "SLURM_JOB_NAME": "job", "SLURM_NODELIST": "gpu[07-08]"},
         ("srun", 2, 4, "gpu07", 18456, False, "0")),
        ({"SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2", "SLURM_PROCID": "2", "SLURM_JOB_NAME": "bash",
          "NUM_NODES": "1"}, None),
        ({"SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_JOB_ID": "9", "SLURM_JOB_NAME": "job", "NUM_NODES": "1"},
         None),
        ({"NODE_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}, ("NODE_RANK", 1, 2, "node0", 29500)),
        ({"NODE_RANK": "1", "LOCAL_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "1",
          "LIGHTNING_SFL_RUN_FOLDER": "runs/x"}, None),
        ({"SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_JOB_NAME": "job"}, "SLURMEnvironment: You set `--ntasks=2`"),
        ({"MASTER_ADDR": "node0"}, "--trainer.num_nodes 2 without torchrun or srun needs MASTER_PORT, NODE_RANK in"),
    ],
    ids=["torchrun", "srun", "slurm-interactive", "srun-one-task", "node-rank", "lightnings-own-process",
         "srun-ntasks-without-per-node", "node-rank-missing"],
)  # fmt: skip
def test_each_launcher_gives_the_rank_size_and_store(variables, expected, monkeypatch):
    """Where this process stands among the run's processes, from each launcher's variables (no process started):
    torchrun's agent serves the store; SLURM's address and port are Lightning's (the job's first node, 15000 + the
    job id's last four digits); an interactive SLURM shell, one task, and a process Lightning launched are none; what
    cannot work is one line. (``NUM_NODES``: ``--trainer.num_nodes``, 2 unless given.)"""
    from lightning_sfl.errors import ConfigError
    from lightning_sfl.run_folder import launched_ranks

    for name in {*(k for k in os.environ if LEAKS.fullmatch(k)), "MASTER_ADDR", "MASTER_PORT"}:
        monkeypatch.setenv(name, "")  # (restored after the test: Lightning's SLURM environment sets these two)
        monkeypatch.delenv(name)
    variables = dict(variables)
    nodes = int(variables.pop("NUM_NODES", "2"))
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    if isinstance(expected, str):
        with pytest.raises(ConfigError, match=re.escape(expected)):
            launched_ranks(nodes)
        return
    ranks = launched_ranks(nodes)
    if expected is None:
        assert ranks is None
        return
    launcher, rank, size, address, port, *agent = expected
    assert (ranks.launcher, ranks.rank, ranks.size, ranks.address, ranks.port) == (launcher, rank, size, address, port)
    if agent:
        assert (ranks.agent, ranks.attempt) == tuple(agent)
