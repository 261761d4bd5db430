"""``lightning-sfl sweep SWEEP.yaml --count N``: the trials of a W&B sweep file, without a W&B server.

::

    lightning-sfl sweep sweeps/digits_lr.yaml --count 2                  # offline, prints a table at the end
    lightning-sfl sweep sweeps/digits_lr.yaml --count 8 --jobs 2         # two trials at a time; the first 2 are kept
    lightning-sfl sweep sweeps/digits_lr.yaml --count 2 -- --trainer.max_epochs=5   # args after ${args}

Each trial is the sweep's ``command`` with W&B's macros expanded (:func:`~lightning_sfl.sweep.space.expand_command`),
run in its own folder ``OUT/trial-<k>/`` (relative paths of the command that exist are made absolute; output in its
``log.txt``), as an offline W&B run (``WANDB_MODE=offline`` unless set) named ``<sweep>-trial-<k>``, grouped and
tagged ``sweep-<sweep>``. A ``lightning-sfl`` command runs in the trial pool that ``compare`` uses too
(:class:`~lightning_sfl.trials.TrialPool`): ``--jobs`` warm workers that import once, or ``--isolate`` (a process per
trial), or ``--launcher slurm``; another program's command runs as a process of its own. Its metric is the last
value of ``metric.name`` in the trial's CSV log, else in its offline W&B run (the summary, what a W&B sweep reads;
the same value).

Search (``method``): ``grid`` enumerates the values; ``random`` samples W&B's distributions from a generator seeded
by ``(--seed, trial)``; ``bayes`` asks optuna's Gaussian-process sampler (``optuna.samplers.GPSampler``; W&B's own
engine, the ``sweeps`` package, pins ``numpy<2``, which the rest of our dependencies have left behind), told every
finished trial. ``--count`` is the sweep's total number of trials (default: the grid's size or ``run_cap``);
``OUT/sweep.json`` records every trial, so a second call runs only the trials that are missing or failed.

No parameter set is tried twice: a draw (``random``) or a proposal (``bayes``) equal to a recorded or running trial's
is drawn again (:meth:`Sweep.params_of`); a space with fewer parameter sets than ``--count`` (a grid, or values only)
runs each once and says so in one line. A resumed sweep plans as one run at once: ``random`` draws trial ``k`` from
the same generator, and the Bayesian sampler's random state continues (it is seeded by ``--seed`` and the number of
trials recorded, :func:`sampler_seed`, so its random start-up draws do not start again from the first trial's).

On a terminal, a status line on stderr (:class:`~lightning_sfl.trials.status.StatusLine`) shows the trials finished,
running and failed and the best metric so far while trials run; it is cleared before each trial's line and before
the table. A sweep file, ``sweep.json`` or ``--out`` that cannot be used is one ``error:`` line (exit code 2) before
anything is written.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import yaml

from lightning_sfl.errors import (
    MAX_SEED,
    ConfigError,
    OneLineArgumentParser,
    check_output_folder,
    name_inside,
    yaml_problem,
)
from lightning_sfl.known import check_named_code
from lightning_sfl.sweep.space import (
    check_sweep,
    check_written_paths,
    distinct,
    expand_command,
    file_arguments,
    finite_points,
    grid_points,
    optuna_space,
    point_key,
    random_generator,
    sample,
    space_size,
)
from lightning_sfl.trials import Trial, TrialPool
from lightning_sfl.trials.folders import create_output_folder
from lightning_sfl.trials.options import add_launcher_arguments, launcher_of, slurm_parameters
from lightning_sfl.trials.status import StatusLine
from lightning_sfl.trials.worker import TRIAL_COMMANDS

STATE = "sweep.json"
#: Where a sweep's folder goes without ``--out``: ``runs/sweeps/<name>``.
SWEEPS = Path("runs") / "sweeps"
#: Draws (``random``) or proposals (``bayes``) made for one trial before its space counts as exhausted.
MAX_DRAWS = 1000
#: Proposals of the Bayesian sampler for one trial before a random draw is taken instead.
MAX_PROPOSALS = 20


def read_sweep(path: Path) -> dict[str, Any]:
    """The content of the sweep file ``path``, checked (:func:`~lightning_sfl.sweep.space.check_sweep`); an
    unreadable file, broken YAML or a bad key is a one-line :class:`~lightning_sfl.errors.ConfigError` naming the
    file."""
    shown = f"sweep={str(path)!r}"
    if not path.is_file():
        raise ConfigError(f"{shown} {'is not a file' if path.exists() else 'does not exist'}")
    try:
        content = yaml.safe_load(path.read_text())
    except UnicodeDecodeError:
        raise ConfigError(f"{shown} is not a text file (not UTF-8)") from None
    except OSError as err:
        raise ConfigError(f"{shown} cannot be read ({err.strerror})") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{shown} is not valid YAML ({yaml_problem(err)})") from None
    try:
        return check_sweep(content)
    except ConfigError as err:
        raise ConfigError(f"{shown}: {err}") from None


def sampler_seed(seed: int, recorded: int) -> int:
    """The seed of the Bayesian sampler of a sweep with ``recorded`` trials recorded: ``seed`` for a new sweep; for a
    resumed one a seed drawn from ``(seed, recorded)``, so that its random draws go on rather than repeat the first
    trials'.

    >>> sampler_seed(3, 0), sampler_seed(3, 2) != sampler_seed(3, 0), sampler_seed(3, 2) == sampler_seed(3, 2)
    (3, True, True)
    """
    import numpy as np

    return seed if recorded == 0 else int(np.random.SeedSequence([seed, recorded]).generate_state(1)[0])


def trial_metric(folder: Path, name: str) -> float | None:
    """The last logged value of ``name`` in a trial's CSV log (every ``lightning-sfl fit`` writes one beside its W&B
    run, with the same values), else in its offline W&B run's summary (what a W&B sweep reads: the last value
    too); both in the trial's run folder (``runs/<run>/``, :mod:`lightning_sfl.run_folder`) or, for a command with
    its own loggers, in ``runs/``. The CSV log is complete when the trial ends, while a warm worker's W&B process
    may still be writing its run."""
    import csv

    last = None
    for path in sorted(
        p for pattern in ("runs/csv/version_*/", "runs/*/csv/") for p in folder.glob(pattern + "metrics.csv")
    ):
        with open(path) as f:
            for row in csv.DictReader(f):
                if row.get(name):
                    last = float(row[name])
    if last is not None:
        return last
    from lightning_sfl.wandb.offline import find_offline_runs, read_offline_run

    places = [folder / "runs", *sorted(p for p in (folder / "runs").glob("*") if p.is_dir())]
    runs = sorted((run for place in places for run in find_offline_runs(place)), key=lambda p: p.name)  # oldest first
    if runs:
        value = read_offline_run(runs[-1]).summary.get(name)
        if isinstance(value, (int, float)):
            return float(value)
    return None


class Sweep:
    """One sweep file run into ``out``: plans trials with its method, runs them, records them in ``sweep.json``."""

    def __init__(
        self,
        path: Path,
        out: Path,
        count: int | None,
        seed: int,
        extra: Sequence[str],
        jobs: int,
        launcher: str = "warm",
        slurm: dict | None = None,
        trust_command: bool = False,
    ) -> None:
        self.path, self.out, self.seed, self.extra, self.jobs = path, out, seed, list(extra), jobs
        self.launcher, self.slurm = launcher, slurm or {}
        self.pool: TrialPool | None = None  # while :meth:`run` runs
        self.status: StatusLine | None = None  # while :meth:`run` runs
        self.config = read_sweep(path)
        self.name = str(self.config.get("name") or path.stem)
        #: the trials are ``lightning-sfl`` commands (run by the pool) rather than another program's
        self.runs_ours = expand_command(self.config["command"][:1], {}, self.config.get("program")) == ["lightning-sfl"]
        self.params = self.config["parameters"]
        shown = f"sweep={str(path)!r}"
        if not self.runs_ours and not trust_command:
            program = " ".join(expand_command(self.config["command"][:2], {}, self.config.get("program")))
            raise ConfigError(
                f"{shown}: its command runs {program!r}, not lightning-sfl: a sweep file names no program to run "
                "unless you say so (--trust_command, for a sweep file you wrote)"
            )
        arguments = file_arguments(self.config)  # what the file gives a trial: never a path outside, nor code
        check_written_paths(arguments, shown)
        if self.runs_ours:
            check_named_code(arguments, shown)
        metric = self.config.get("metric") or {}
        self.metric, self.goal = metric.get("name"), metric.get("goal", "minimize")
        self.grid = distinct(grid_points(self.params)) if self.config["method"] == "grid" else None
        #: how many parameter sets the space holds (``None``: no end)
        self.size = len(self.grid) if self.grid is not None else space_size(self.params)
        limits = [n for n in (count, self.config.get("run_cap"), self.size) if n]
        if not limits:
            raise ConfigError(f"--count is required: method {self.config['method']} without run_cap has no end")
        if count is not None and count < 1:
            raise ConfigError(f"--count={count} must be >= 1")
        self.count = min(limits)
        #: said before the trials run when the space holds fewer parameter sets than asked for
        self.note = None
        asked = [n for n in (count, self.config.get("run_cap")) if n]
        if self.size is not None and asked and min(asked) > self.size:
            self.note = (f"the space holds {self.size} parameter sets: {self.size} trials, each tried once (not "
                         f"{min(asked)})")  # fmt: skip
        self.trials: dict[int, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self._load()
        #: the parameter sets recorded or planned (by :func:`~lightning_sfl.sweep.space.point_key`): never run twice
        self.taken = {point_key(t["params"]) for t in self.trials.values()}
        self.exhausted = False  # no new parameter set could be found: the trials not started yet are not run
        self.study = self._study() if self.config["method"] == "bayes" else None

    # ------------------------------------------------------------------ state
    def _load(self) -> None:
        state = self.out / STATE
        if not state.exists():
            return
        try:
            saved = json.loads(state.read_text())
            same = (saved.get("sweep"), saved.get("seed"), saved.get("extra")) == (self.config, self.seed, self.extra)
            trials = {int(k): v for k, v in saved["trials"].items()} if same else {}
            finished = {k: v for k, v in trials.items() if v.get("status") == "finished" and "params" in v}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            why = err.strerror if isinstance(err, OSError) else f"{type(err).__name__}: {err}".splitlines()[0]
            raise ConfigError(f"{state} is not a sweep's record ({why}): choose another --out, or delete it") from None
        if not same:
            raise ConfigError(
                f"{self.out} holds another sweep (file, --seed or extra args differ); choose another --out"
            )
        self.trials = finished

    def _save(self) -> None:
        state = {"sweep": self.config, "seed": self.seed, "extra": self.extra, "trials": self.trials}
        tmp = self.out / (STATE + ".tmp")
        tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
        tmp.replace(self.out / STATE)

    # ------------------------------------------------------------------ planning
    def _study(self):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space, self.constants = optuna_space(self.params)
        direction = "maximize" if self.goal == "maximize" else "minimize"
        sampler = optuna.samplers.GPSampler(seed=sampler_seed(self.seed, len(self.trials)))
        study = optuna.create_study(direction=direction, sampler=sampler)
        for k in sorted(self.trials):
            record = self.trials[k]
            if record.get("metric") is not None:
                params = {n: record["params"][n] for n in self.space}
                study.add_trial(
                    optuna.trial.create_trial(params=params, distributions=self.space, value=record["metric"])
                )
        return study

    def params_of(self, k: int) -> tuple[dict[str, Any] | None, Any]:
        """Trial ``k``'s parameters (and optuna's trial handle for ``bayes``), a set no other trial has (recorded,
        running or planned); ``(None, None)`` once the space has no new one (said in one line)."""
        with self.lock:
            if self.exhausted:
                return None, None
            if self.grid is not None:
                params, handle = self.grid[k], None
            elif self.study is None:
                params, handle = self._draw(k), None
            else:
                params, handle = self._propose(k)
            if params is None:
                self.exhausted = True
                self._say(f"[sweep {self.name}] trial {k}: every parameter set of the space has been tried; no more "
                          "trials are run")  # fmt: skip
                return None, None
            self.taken.add(point_key(params))
            return params, handle

    def _draw(self, k: int) -> dict[str, Any] | None:
        """``random``: the first draw of trial ``k``'s generator that no other trial has; in a space of few sets whose
        draws keep repeating (values of small probability), one of the sets left, chosen by the same generator."""
        rng = random_generator(self.seed, k)
        for _ in range(MAX_DRAWS):
            point = sample(self.params, rng)
            if point_key(point) not in self.taken:
                return point
        left = [p for p in finite_points(self.params) if point_key(p) not in self.taken] if self.size else []
        return left[int(rng.integers(len(left)))] if left else None

    def _propose(self, k: int) -> tuple[dict[str, Any] | None, Any]:
        """``bayes``: the sampler's proposal; one equal to another trial's is told failed (the sampler learns
        nothing from it) and the sampler asked again; after :data:`MAX_PROPOSALS` such, a random draw
        (``_draw``) is given to the sampler as the trial's parameters."""
        import optuna

        for _ in range(MAX_PROPOSALS):
            handle = self.study.ask(self.space)
            params = {**self.constants, **handle.params}
            if point_key(params) not in self.taken:
                return params, handle
            self.study.tell(handle, state=optuna.trial.TrialState.FAIL)
        params = self._draw(k)
        if params is None:
            return None, None
        self.study.enqueue_trial({n: params[n] for n in self.space})
        return params, self.study.ask(self.space)

    # ------------------------------------------------------------------ running
    def command(self, params: dict[str, Any]) -> list[str]:
        """The trial's command: ``lightning-sfl ...`` (run by the pool: this installation's, whatever PATH says)
        or another program's."""
        cmd = expand_command(self.config["command"], params, self.config.get("program")) + self.extra
        cmd = [str(Path(t).resolve()) if not t.startswith("-") and Path(t).exists() else t for t in cmd]
        if cmd[0] == "lightning-sfl" and self.jobs > 1 and cmd[1:2] == ["fit"]:  # trials share the cores
            cmd.append("--torch_threads=1")
        return cmd

    def run_trial(self, k: int, planned: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """Run trial ``k`` with the ``planned`` parameters (else :meth:`params_of`'s) and record it; ``None``: not run,
        every parameter set has been tried."""
        params, handle = (planned, None) if planned is not None else self.params_of(k)
        if params is None:
            return None
        folder = self.out / f"trial-{k}"
        folder.mkdir(parents=True, exist_ok=True)
        env = {
            "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"),
            "WANDB_NAME": f"{self.name}-trial-{k}",
            "WANDB_RUN_GROUP": self.name,
            "WANDB_TAGS": f"sweep-{self.name}",
        }
        cmd = self.command(params)
        shown = cmd[1:]  # recorded: the command after its program
        if self.status is not None:
            self.status.trial_started()
        if cmd[0] == "lightning-sfl" and cmd[1:2] and cmd[1] in TRIAL_COMMANDS:
            trial = Trial(cmd[1:], cwd=folder, log=folder / "log.txt", env={**env, "WANDB_SWEEP_ID": None})
            code = self.pool.run(trial).exit_code
        else:  # another program (or lightning-sfl compare/sweep): a process of its own
            if cmd[0] == "lightning-sfl":  # this installation's console script, whatever PATH says
                cmd = [sys.executable, "-m", "lightning_sfl.cli", *cmd[1:]]
            env = {**{k: v for k, v in os.environ.items() if k != "WANDB_SWEEP_ID"}, **env}
            with open(folder / "log.txt", "w") as log:
                proc = subprocess.run(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, check=False)  # fmt: skip
            code = proc.returncode
        metric = trial_metric(folder, self.metric) if self.metric and code == 0 else None
        status = "finished" if code == 0 else f"failed (exit {code}, see {folder / 'log.txt'})"
        record = {"params": params, "status": status, "metric": metric, "command": shown}
        with self.lock:
            if handle is not None:
                ok = status == "finished" and metric is not None
                self.study.tell(handle, metric if ok else None, state=None if ok else _failed())
            self.trials[k] = record
            self._save()
        if self.status is not None:
            self.status.trial_ended(code == 0, metric, f"trial {k}")
        self._say(
            f"[sweep {self.name}] trial {k}: {status}" + (f", {self.metric}={metric:.4g}" if metric is not None else "")
        )
        return record

    def _say(self, line: str) -> None:
        """A line of the sweep's output (below the status line, if one is shown)."""
        if self.status is not None:
            self.status.say(line)
        else:
            print(line, flush=True)

    def run(self) -> None:
        """Run the trials that are not recorded as finished into ``out`` (which must exist: :func:`main` makes it)."""
        todo = [k for k in range(self.count) if k not in self.trials]
        print(
            f"[sweep {self.name}] {self.config['method']}: {self.count} trials, {len(self.trials)} already finished, "
            f"{len(todo)} to run -> {self.out}",
            flush=True,
        )
        if self.note:
            print(f"[sweep {self.name}] {self.note}", flush=True)
        jobs = max(1, min(self.jobs, len(todo)))
        status = StatusLine("sweep", self.count, self.metric or "", self.goal)
        status.finished = len(self.trials)
        for k, t in self.trials.items():
            status.consider(t.get("metric"), f"trial {k}")
        with TrialPool(jobs, self.launcher, self.out / "submitit", self.slurm) as self.pool:
            if todo and self.runs_ours:  # the workers' fork server imports while the first trials are planned
                self.pool.warm_up()
            with status:
                self.status = status
                try:
                    self._run_all(todo, jobs)
                finally:
                    self.status = None

    def plan(self, todo: list[int]) -> dict[int, dict[str, Any]]:
        """``grid`` and ``random``: the parameters of the trials ``todo``, drawn in trial order before any runs (as in a
        sweep run at once), up to the end of the space."""
        planned = {}
        for k in todo:
            params, _ = self.params_of(k)
            if params is None:
                break
            planned[k] = params
        return planned

    def _run_all(self, todo: list[int], jobs: int) -> None:
        if self.study is None:
            planned = self.plan(todo)
            with ThreadPoolExecutor(max_workers=jobs) as threads:
                list(threads.map(self.run_trial, planned, planned.values()))
            return
        with ThreadPoolExecutor(max_workers=jobs) as threads:  # bayes: ask when a worker frees up
            running = set()
            for k in todo:
                if len(running) >= jobs:
                    _, running = wait(running, return_when=FIRST_COMPLETED)
                running.add(threads.submit(self.run_trial, k))
            wait(running)

    # ------------------------------------------------------------------ report
    def table(self) -> str:
        """Markdown table: trial, status, metric, parameters; best first (by ``metric.goal``)."""
        names = list(self.params)
        sign = -1 if self.goal == "maximize" else 1
        order = sorted(
            self.trials, key=lambda k: (self.trials[k]["metric"] is None, sign * (self.trials[k]["metric"] or 0), k)
        )
        head = ["trial", "status", self.metric or "metric", *names]
        rows = [" | ".join(head), " | ".join("---" for _ in head)]
        for k in order:
            t = self.trials[k]
            metric = "" if t["metric"] is None else f"{t['metric']:.4f}"
            rows.append(
                " | ".join([str(k), t["status"].split(" ")[0], metric, *(_cell(t["params"][n]) for n in names)])
            )
        return "\n".join(f"| {r} |" for r in rows)


def _failed():
    import optuna

    return optuna.trial.TrialState.FAIL


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="lightning-sfl sweep",
        description="Run the trials of a W&B sweep file offline, without a W&B server (see sweeps/README.md).",
    )
    parser.add_argument("sweep", type=Path, help="a W&B sweep file (method, metric, parameters, command)")
    parser.add_argument("--count", type=int, default=None, help="total trials of the sweep (default: grid or run_cap)")
    parser.add_argument("--jobs", type=int, default=1, help="trials run at the same time (see --launcher)")
    add_launcher_arguments(parser)
    parser.add_argument("--out", type=Path, default=None, help="folder of the sweep (default: runs/sweeps/<name>)")
    parser.add_argument("--seed", type=int, default=0, help="seeds random draws and the Bayesian sampler")
    parser.add_argument(
        "--trust_command",
        action="store_true",
        help="run the sweep's command though it is not lightning-sfl (another program: only for a sweep file you "
        "wrote; a file from someone else names no program to run)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """``lightning-sfl sweep ...``; arguments after ``--`` are appended to every trial's command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = build_parser().parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    try:
        if args.jobs < 1:
            raise ConfigError(f"--jobs={args.jobs} must be >= 1")
        if not 0 <= args.seed <= MAX_SEED:
            raise ConfigError(f"--seed={args.seed} must be in [0, {MAX_SEED}] (numpy's seeds)")
        name = str(read_sweep(args.sweep).get("name") or args.sweep.stem)
        default = name_inside(SWEEPS, name, f"sweep={str(args.sweep)!r}: name")  # (a file's name: never a path out)
        out = args.out or default
        check_output_folder("--out", out)
        launcher, slurm = launcher_of(args), slurm_parameters(args.slurm)
        sweep = Sweep(args.sweep, out, args.count, args.seed, extra, args.jobs, launcher, slurm, args.trust_command)
        create_output_folder("--out", out)  # the last check: nothing is written before it
    except (ConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    sweep.run()
    table = sweep.table()
    (sweep.out / "results.md").write_text(f"# Sweep {sweep.name}\n\n{table}\n")
    print(table)
    if not any(t["status"] == "finished" for t in sweep.trials.values()):
        raise SystemExit(1)
