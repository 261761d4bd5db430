"""One folder per run: ``<default_root_dir>/<method>-<dataset>-<partition>-s<seed>-<key>[-v<n>]`` holds everything a
run of the command line writes (``checkpoints/``, the CSV log ``csv/metrics.csv``, W&B's files ``wandb/``, the resolved
``config.yaml``), named so that a person can read it and the same command finds it again.

- A new ``fit`` takes the first free name (``…-<key>``, then ``…-<key>-v2``, …: an earlier run is never overwritten);
  ``fit --ckpt_path last`` continues the latest run of the same configuration; ``validate``, ``test`` and ``attack``
  with ``--ckpt_path last`` read the latest that reached the rounds their configuration names (:func:`finished_run`)
  and keep their records in ``<run>/<command>-<n>/`` (:func:`next_record`).
- A live process holds its run folder (:class:`RunLock`): a second process that would write there stops with one line
  naming the holder, so two runs never share checkpoints and ``last.ckpt`` never points across runs.
- Resuming continues the CSV log in the same file (:class:`ContinuingCSVLogger`, :func:`trim_rounds`).
- The processes of one run agree on one folder. Processes that Lightning launches itself (``--trainer.devices N`` on one
  machine) are started after the first has claimed it and read its path from :data:`FOLDER_ENV`. Processes that a
  launcher starts on their own, each running the same command (``torchrun``, SLURM's ``srun``, LSF's ``jsrun``, MPI, or
  one command a node with ``NODE_RANK`` and ``--trainer.num_nodes``), meet at the store the process group will meet at,
  ``MASTER_ADDR:MASTER_PORT`` (:class:`Rendezvous`, :func:`join`): rank 0 alone chooses the folder and publishes its
  name (and whether ``--ckpt_path last`` resumes from it); when every process has checked its settings and said it is
  ready, rank 0 creates and locks the folder and says so, and the others go on with that name. No other rank chooses,
  creates or locks a folder, so a run writes one folder however many processes it has, and a resumed run finds the same
  one on every node (the folder must then be on a file system the nodes share, as for any checkpoint that every process
  loads). The store is served by rank 0 itself (torch.distributed's process group later reuses that server) or, under
  ``torchrun``, by its agent. A process that stops before the run starts says so through the store, and every other
  process stops with one ``error:`` line naming the rank and its reason, instead of waiting for a peer that is gone
  (torch.distributed's C++ traceback).

Pure functions of the configuration and the file system, and the processes' rendezvous; nothing here imports
Lightning's trainer.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import inspect
import json
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import lightning as L
from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from typing_extensions import override

from lightning_sfl.class_paths import dataset_name
from lightning_sfl.errors import ConfigError, env_number
from lightning_sfl.process.streams import ddp_child

__all__ = [
    "check_run_folder", "checkpoint_rounds", "claim_new", "claim_record", "ContinuingCSVLogger", "Evaluated",
    "evaluated_checkpoint", "finished_run", "git_commit", "latest_run", "named_run", "next_record", "next_run",
    "RecordRun", "run_key", "run_name", "run_of_checkpoint", "RunLock", "seeds_group", "shown_path", "trim_rounds",
    "Ranks", "Rendezvous", "join", "joined", "leave", "launched_ranks", "first_process",
]  # fmt: skip

#: Set by the process that chose the run folder, for the processes Lightning launches for DDP (the same command).
FOLDER_ENV = "LIGHTNING_SFL_RUN_FOLDER"
LOCK_NAME = ".lock"


def run_name(config: dict, key: str, with_seed: bool = True) -> str:
    """A readable name of the run's configuration, ``<method>-<dataset>-<partition>-s<seed>-<key>`` (without
    ``-s<seed>`` unless ``with_seed``).

    >>> run_name({"model": {"class_path": "lightning_sfl.algorithms.SCALA"}, "seed_everything": 0,
    ...           "data": {"dataset": "digits", "partition": "dirichlet", "beta": 0.5}}, "0f58ca476a")
    'scala-digits-dirichlet0.5-s0-0f58ca476a'
    >>> run_name({"model": {"class_path": "my.FedAvg"}, "data": {"partition": "quantity", "alpha": 2}}, "ab")
    'fedavg-data-quantity2-sNone-ab'
    """
    model = config.get("model") or {}
    method = str(model.get("class_path", "model") if isinstance(model, dict) else getattr(model, "class_path", "model"))
    data = config.get("data") or {}
    partition = str(data.get("partition", "partition"))
    parameter = {"dirichlet": "beta", "quantity": "alpha", "shards": "shards_per_client"}.get(partition)
    if parameter and data.get(parameter) is not None:
        partition += str(data.get(parameter))
    parts = [method.rsplit(".", 1)[-1].lower(), dataset_name(data.get("dataset", "data")), partition]
    parts += [f"s{config.get('seed_everything')}"] if with_seed else []
    parts.append(key)
    return "-".join(re.sub(r"[^\w.]+", "_", p) for p in parts)


def named_run(config, key: str) -> tuple[Path, str]:
    """``(default_root_dir, name)`` of a run: ``--run_name`` if given (``''``: the root itself is the run folder),
    else :func:`run_name`; a one-line :class:`ConfigError` for a name that is not one folder."""
    root = Path(config.get("trainer", {}).get("default_root_dir") or ".")
    name = config.get("run_name")
    if name is not None and (name in (".", "..") or "/" in name or os.sep in name):
        raise ConfigError(f"run_name={name!r} must be one folder name (no '/', not '.' or '..'), or '' for the root")
    return root, run_name(config, key) if name is None else name


def run_key(config) -> str:
    """A short hash naming a run by its configuration, the same when the same command is run again and for ``fit``,
    ``validate`` and ``test`` of it (what may change between a start and its resumption or evaluation is left out:
    ``ckpt_path``, ``trainer.max_epochs``, ``torch_threads``, ``client_state_memory``, the checkpoint options,
    validate's ``verbose``, the
    progress bar and model summary switches), and whichever files gave its settings (the paths of ``--config``: the
    run's own ``config.yaml`` names the same run as the command that wrote it)."""
    values = config.clone().as_dict() if hasattr(config, "clone") else dict(config)
    values.pop("config", None)
    values.pop("ckpt_path", None)
    values.pop("weights_only", None)  # how the checkpoint is read, an argument of the subcommand like ckpt_path
    values.pop("torch_threads", None)
    values.pop("client_state_memory", None)  # where per-client rows are held, not what is computed
    values.pop("verbose", None)  # validate's and test's own: the same run for fit, validate and test
    values.pop("checkpoint", None)
    for display in ("max_epochs", "enable_progress_bar", "enable_model_summary", "logger"):  # change nothing computed
        values.get("trainer", {}).pop(display, None)
    return hashlib.sha1(json.dumps(values, sort_keys=True, default=_stable_text).encode()).hexdigest()[:10]


def _stable_text(value: object) -> str:
    """A value of a configuration as text that is the same in every process: a function by its path (its ``str``
    holds its address, e.g. ImageFolder's ``loader``), anything else by ``str``."""
    if inspect.isfunction(value) or inspect.isbuiltin(value):
        return f"{value.__module__}.{value.__qualname__}"
    return str(value)


def seeds_group(config) -> str:
    """The W&B group of a run: its name without the seed and a hash of its configuration without the seeds
    (``seed_everything``, ``data.seed``), so that the seeds of one setting are one group (W&B's grouped mean ± std)."""
    values = config.clone() if hasattr(config, "clone") else copy.deepcopy(dict(config))
    values["seed_everything"] = None
    if values.get("data") is not None:
        values["data"]["seed"] = None
    return run_name(values, run_key(values), with_seed=False)


def git_commit(folder: Path | None = None) -> str | None:
    """The commit of the checkout holding ``folder`` (default: this package's), with ``+dirty`` when files differ from
    it; ``None`` outside a git checkout or without git."""
    import subprocess

    folder = folder or Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=folder, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


class RecordRun(SaveConfigCallback):
    """Lightning's ``SaveConfigCallback`` (the resolved config as ``config.yaml`` in the log folder), and the same
    resolved config with what produced the run in every logger's hyperparameters (W&B's run config): ``config`` (what
    ``--print_config`` prints: the method's ``class_path`` and init args, data, trainer with ``max_epochs``,
    ``seed_everything``, ``torch_threads``, the callbacks' and the system model's options: ``lightning-sfl fit --config
    config.yaml`` runs it again) and ``lightning_sfl`` (``method``, ``version``, ``commit``).

    ``recorded``: the configuration to record instead of the one the run was built from, namely the command's own
    settings before the command line placed the run (its loggers' folders, W&B name and tags, the checkpoint folder:
    :class:`~lightning_sfl.lightning_cli.SFLCLI` records them as given, so that the file re-runs the command in a new
    run folder instead of writing into this one)."""

    def __init__(self, *args, recorded=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if recorded is not None:
            self.config = recorded

    @override
    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        import yaml

        import lightning_sfl

        config = yaml.safe_load(self.parser.dump(self.config, skip_none=False)) or {}
        model = config.get("model") or {}
        record = {
            "config": config,
            "lightning_sfl": {
                "method": model.get("class_path") if isinstance(model, dict) else None,
                "version": lightning_sfl.__version__,
                "commit": git_commit(),
            },
        }
        for logger in trainer.loggers:
            logger.log_hyperparams(record)


def _versions(root: Path, name: str) -> list[tuple[int, Path]]:
    found = []
    for path in root.glob(f"{_glob_escape(name)}*") if root.is_dir() else ():
        match = re.fullmatch(re.escape(name) + r"(?:-v(\d+))?", path.name)
        if match and path.is_dir():
            found.append((int(match.group(1) or 1), path))
    return sorted(found)


def _glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def latest_run(root: str | os.PathLike, name: str) -> Path | None:
    """The latest run folder of ``name`` under ``root`` (``name``, ``name-v2``, …: the highest), or ``None``."""
    found = _versions(Path(root), name)
    return found[-1][1] if found else None


def next_run(root: str | os.PathLike, name: str) -> Path:
    """The first free run folder of ``name`` under ``root`` (``name``, then ``name-v2``, …), not created."""
    version = (_versions(Path(root), name) or [(0, None)])[-1][0] + 1
    return Path(root) / (name if version == 1 else f"{name}-v{version}")


#: What a run writes inside its folder: none of them may be a link out of it.
WRITTEN_INSIDE = ("checkpoints", "checkpoints/last.ckpt", "csv", "csv/metrics.csv", "csv/hparams.yaml", "wandb",
                  "config.yaml", LOCK_NAME)  # fmt: skip
#: Of those, the folders.
FOLDERS_INSIDE = ("checkpoints", "csv", "wandb")


def check_run_folder(folder: str | os.PathLike, root: str | os.PathLike) -> None:
    """A one-line :class:`ConfigError` if the run folder ``folder`` (under ``root``, the ``default_root_dir``) is a
    symbolic link out of ``root``, or holds one of :data:`WRITTEN_INSIDE` that links out of ``folder``: a run folder
    someone shared never makes the tool write elsewhere (a link to another disk is ``default_root_dir`` itself).

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / "run").mkdir()
    >>> check_run_folder(root / "run", root)
    >>> (root / "run" / "checkpoints").symlink_to("/tmp")
    >>> check_run_folder(root / "run", root)
    Traceback (most recent call last):
    ...
    lightning_sfl.errors.ConfigError: run folder .../run: checkpoints is a link to /tmp, outside the run folder: ...
    """
    folder, root = Path(folder), Path(root)
    if folder.is_symlink() and not folder.resolve().is_relative_to(root.resolve()):
        raise ConfigError(
            f"run folder {folder} is a link to {os.readlink(folder)}, outside {root}: refused (not followed)"
        )
    inside = folder.resolve()
    for name in WRITTEN_INSIDE:
        path = folder / name
        if name == "checkpoints/last.ckpt":  # (a link to a round checkpoint beside it: run_checkpoints.damage)
            continue
        if path.is_symlink() and not path.resolve().is_relative_to(inside):
            raise ConfigError(
                f"run folder {folder}: {name} is a link to {os.readlink(path)}, outside the run folder: refused (not "
                "followed)"
            )
        if name in FOLDERS_INSIDE and path.exists() and not path.is_dir():
            raise ConfigError(f"run folder {folder}: {name} is a file, not a folder (the run's {name}/ is damaged)")


def claim_new(folder: Path) -> None:
    """Create the run folder chosen by :func:`next_run` (``mkdir``: of two processes that chose it at once, the second
    stops with one line)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        folder.mkdir()
    except FileExistsError:
        raise ConfigError(f"run folder {folder} was just created by another process: run the command again") from None


def run_of_checkpoint(path: str | os.PathLike) -> Path | None:
    """The run folder a checkpoint belongs to (``<run>/checkpoints/<file>``, beside the run's ``config.yaml``;
    ``last.ckpt`` is followed if it is a link), or ``None`` for a checkpoint kept elsewhere.

    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp()) / "scala-digits-iid-s0-ab"
    >>> (run / "checkpoints").mkdir(parents=True)
    >>> _ = (run / "config.yaml").write_text("seed_everything: 0")
    >>> run_of_checkpoint(run / "checkpoints" / "last.ckpt") == run, run_of_checkpoint(run / "model.ckpt")
    (True, None)
    """
    path = Path(path)
    for candidate in dict.fromkeys((path, path.resolve())):
        folder = candidate.parent
        if folder.name == "checkpoints" and (folder.parent / "config.yaml").is_file():
            return folder.parent
    return None


def checkpoint_rounds(path: str | os.PathLike) -> int | None:
    """The rounds a checkpoint holds (its ``epoch`` + 1), read without loading its tensors (memory-mapped), or
    ``None`` if it cannot be read."""
    import torch

    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("epoch", -1)) + 1
    except Exception:  # truncated, foreign or not a zip checkpoint: the caller's full check says which
        return None


def finished_run(root: str | os.PathLike, name: str, rounds: int | None) -> tuple[Path, Path, int] | None:
    """What ``--ckpt_path last`` evaluates (``validate``, ``test``, ``attack``): ``(run folder, its last.ckpt, rounds it
    holds)`` of the latest run of ``name`` under ``root`` whose checkpoint reached ``rounds`` (the command's
    ``trainer.max_epochs``), so that a quick 2-round check does not hide the full fit; when none did, the latest run
    with a checkpoint (the caller says so); ``None`` when no run has one."""
    from lightning_sfl.run_checkpoints import damage, damaged_line

    found = []
    for _, folder in reversed(_versions(Path(root), name)):
        check_run_folder(folder, root)  # (its records go inside it: never through a link out of the root)
        last = folder / "checkpoints" / "last.ckpt"
        if not (last.exists() or last.is_symlink()):
            continue  # (stopped before a round ended: nothing to evaluate)
        why = damage(last)
        if why is not None:  # the run is there; its checkpoint is not usable: say so, never "fit it first"
            raise ConfigError(f"ckpt_path='last': {damaged_line(last, why, shown_path(last))}")
        held = checkpoint_rounds(last)
        if rounds is None or held >= rounds:
            return folder, last, held
        found.append((folder, last, held))
    return found[0] if found else None


@dataclass(frozen=True)
class Evaluated:
    """The checkpoint a command that reads a run evaluates (``validate``, ``test``, ``attack``): its path, the run
    folder it belongs to (``None``: kept elsewhere), the rounds it holds and the rounds the command's configuration
    names (``trainer.max_epochs``); ``fallback``: ``--ckpt_path last`` found no run that reached them."""

    checkpoint: Path
    run: Path | None
    rounds: int | None
    wanted: int | None
    fallback: bool = False

    @classmethod
    def of(cls, path: str | os.PathLike, wanted: int | None, run: Path | None = None, last: bool = False) -> Evaluated:
        """The checkpoint file ``path``: the run folder it lies in (or ``run``), the rounds it holds; ``last``: it is
        what ``--ckpt_path last`` found, and ``fallback`` says whether it holds fewer rounds than ``wanted``."""
        path = Path(path)
        rounds = checkpoint_rounds(path)
        short = last and wanted is not None and rounds is not None and rounds < wanted
        return cls(path, run or run_of_checkpoint(path), rounds, wanted, fallback=short)

    def line(self, doing: str) -> str:
        """What is evaluated, for the command's first line: ``validating runs/<run> (round 100 of 100)``."""
        where = shown_path(self.run if self.run is not None else self.checkpoint)
        held = "round ?" if self.rounds is None else f"round {self.rounds}"
        of = f" of {self.wanted}" if self.wanted is not None else ""
        note = f": no run of this configuration reached {self.wanted} rounds" if self.fallback else ""
        named = self.run is not None and self.checkpoint.name != "last.ckpt"
        return f"{doing} {where} ({held}{of}{note}{', ' + self.checkpoint.name if named else ''})"


def evaluated_checkpoint(
    ckpt_path: str | None, root: Path, name: str, wanted: int | None, dirpath: str | None, command: str
) -> Evaluated:
    """The checkpoint ``command`` evaluates: ``ckpt_path`` itself, or for ``last`` the latest run of the configuration
    (``name`` under ``root``) that reached ``wanted`` rounds (:func:`finished_run`; ``dirpath``: the
    ``--checkpoint.dirpath`` the fit wrote to). A one-line :class:`ConfigError` without a checkpoint: nothing is
    evaluated unless one is given (Lightning would score an untrained model)."""
    if ckpt_path is None:
        raise ConfigError(
            f"{command} needs a checkpoint: --ckpt_path PATH (a checkpoint file) or --ckpt_path last (the latest fit "
            "of this configuration)"
        )
    if str(ckpt_path) in ("best", "hpc", "registry"):
        raise ConfigError(
            f"ckpt_path={str(ckpt_path)!r}: {command} takes a checkpoint file, or last (the latest fit of this "
            "configuration)"
        )
    if str(ckpt_path) != "last":
        return Evaluated.of(ckpt_path, wanted)
    if dirpath or name == "":
        from lightning_sfl.run_checkpoints import damage, damaged_line

        path = Path(dirpath) / "last.ckpt" if dirpath else root / "checkpoints" / "last.ckpt"
        why = damage(path) if path.exists() or path.is_symlink() else None
        if why is not None:
            raise ConfigError(f"ckpt_path='last': {damaged_line(path, why, shown_path(path))}")
        if not path.is_file():
            raise ConfigError(
                f"ckpt_path='last': no checkpoint of this configuration in {path.parent} (fit it first with the same "
                "options, or give the checkpoint's path)"
            )
        return Evaluated.of(path, wanted, run=root if name == "" else None, last=True)
    found = finished_run(root, name, wanted)
    if found is None:
        raise ConfigError(
            f"ckpt_path='last': no run of this configuration under {root} (no {name}/checkpoints/last.ckpt): fit it "
            "first with the same options, or give the checkpoint's path"
        )
    run, path, rounds = found
    return Evaluated(path, run, rounds, wanted, fallback=wanted is not None and rounds < wanted)


def shown_path(path: str | os.PathLike) -> str:
    """``path`` relative to the working directory when it lies inside it, else as it is."""
    inside = Path(path).resolve().is_relative_to(Path.cwd().resolve())
    return os.path.relpath(path) if inside else str(path)


def next_record(run: str | os.PathLike, command: str) -> Path:
    """Where a command that reads a run (``validate``, ``test``, ``attack``) keeps its records: the first free
    ``<run>/<command>-<n>`` (``n`` from 1), not created; the fit's own files are never written.

    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> (run / "validate-1").mkdir()
    >>> next_record(run, "validate").name, next_record(run, "test").name
    ('validate-2', 'test-1')
    """
    found = (re.fullmatch(rf"{re.escape(command)}-(\d+)", p.name) for p in Path(run).glob(f"{command}-*"))
    taken = [int(m.group(1)) for m in found if m]
    return Path(run) / f"{command}-{max(taken, default=0) + 1}"


def claim_record(run: str | os.PathLike, command: str) -> Path:
    """Create :func:`next_record`'s folder (of two processes that chose the same, the second takes the next)."""
    for _ in range(100):
        folder = next_record(run, command)
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise ConfigError(f"{run}: could not create a {command}-<n> folder (other processes keep taking them)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """A live process's claim on a run folder: ``<folder>/.lock`` holds its pid, host, command and start time.

    :meth:`acquire` raises a one-line :class:`ConfigError` naming the holder while another live process holds the
    folder; a lock left by a process of this host that died, or by an earlier start of the same SLURM job (a requeued
    job, maybe on another node), is taken over. :meth:`release` removes it.
    """

    def __init__(self, folder: str | os.PathLike, command: str = "") -> None:
        self.path = Path(folder) / LOCK_NAME
        self.command = command
        self.held = False

    def holder(self) -> dict | None:
        """The live holder's record, or ``None`` when the folder is free (no lock, or one left by a dead process)."""
        try:
            record = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        if record.get("host") == socket.gethostname() and not _alive(int(record.get("pid", -1))):
            return None
        job = os.environ.get("SLURM_JOB_ID")
        if (
            job
            and record.get("job") == job
            and (record.get("host"), record.get("pid")) != (socket.gethostname(), os.getpid())
        ):
            return None  # an earlier start of this SLURM job (requeued, maybe on another node): it is gone
        return record

    def acquire(self) -> None:
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command, "since": time.time()}
        record["job"] = os.environ.get("SLURM_JOB_ID")
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self.holder()
                if holder is not None and holder.get("pid") != os.getpid():
                    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder.get("since", 0))))
                    raise ConfigError(
                        f"run folder {self.path.parent} is in use by process {holder.get('pid')} on "
                        f"{holder.get('host')} (since {since}: {holder.get('command', '')}); wait for it to end, give "
                        f"another --trainer.default_root_dir, or if that process is gone, delete {self.path}"
                    ) from None
                self.path.unlink(missing_ok=True)  # left by a process that is gone (or by this one)
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(record, f)
            self.held = True
            return
        raise ConfigError(f"run folder {self.path.parent}: could not take {self.path} (other processes keep taking it)")

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False


# ---------------------------------------------------------------------- the processes of one run agree on its folder
#: Seconds the processes of a run wait for one another while they agree on its folder (torch.distributed's own default
#: for a process group to form).
RENDEZVOUS_TIMEOUT = 1800.0
#: Seconds a process that stopped before the run started waits for the others to read why (or, not yet connected, to
#: reach rank 0's store to say so).
LINGER = 120.0
#: Names of SLURM jobs that Lightning takes for an interactive shell, not for a job step (``srun --job-name bash``).
_INTERACTIVE = ("bash", "interactive")


@dataclass(frozen=True)
class Ranks:
    """This process among the processes of one run that a launcher started on their own (:func:`launched_ranks`):
    its ``rank`` of ``size``, the store's ``address`` and ``port`` (``MASTER_ADDR``, ``MASTER_PORT``), whether
    torchrun's agent serves it there (``agent``; else rank 0 does), what started them (``launcher``) and ``attempt``,
    which names this start among the restarts that one store outlives (torchrun's restarts)."""

    rank: int
    size: int
    address: str
    port: int
    launcher: str
    agent: bool = False
    attempt: str = "0"


def launched_ranks(num_nodes: int | None = None) -> Ranks | None:
    """How this process was started, when a launcher started it as one of several processes that run the same command
    and find each other at ``MASTER_ADDR:MASTER_PORT``: torchrun (``RANK``, ``WORLD_SIZE``, ``GROUP_RANK``,
    ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``), SLURM's ``srun`` (``SLURM_PROCID``, ``SLURM_NTASKS``; Lightning's address
    and port), LSF's ``jsrun``, MPI, in Lightning's order; or, given ``num_nodes`` above 1 and none of those, one
    command per node with Lightning's own launcher (``NODE_RANK``: the ranks are the nodes' first processes; the others
    are Lightning's and read :data:`FOLDER_ENV`). ``None`` for one process, and for a process Lightning launched. A
    launcher's variables that cannot work are a one-line :class:`ConfigError`.

    >>> launched_ranks() is None  # (this process: no launcher)
    True
    """
    from lightning.fabric.plugins.environments import (
        LSFEnvironment,
        MPIEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )

    env = os.environ
    found = None
    slurm = "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME") not in _INTERACTIVE  # (Lightning's "srun is used")
    if TorchElasticEnvironment.detect():
        agent = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        attempt = f"{env.get('TORCHELASTIC_RUN_ID', '')}-{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        size, rank = env_number("WORLD_SIZE", 1, low=1), env_number("RANK", 0)
        found = Ranks(rank, size, env.get("MASTER_ADDR", "127.0.0.1"), env_number("MASTER_PORT", 29500, 1, 65535),
                      "torchrun", agent, attempt)  # fmt: skip
    elif slurm or LSFEnvironment.detect() or MPIEnvironment.detect():
        cls = SLURMEnvironment if slurm else LSFEnvironment if LSFEnvironment.detect() else MPIEnvironment
        try:
            cluster = cls()
            size, rank = cluster.world_size(), cluster.global_rank()
            if size < 2:
                return None
            launcher = {SLURMEnvironment: "srun", LSFEnvironment: "jsrun"}.get(cls, "mpirun")
            found = Ranks(rank, size, cluster.main_address, int(cluster.main_port), launcher,  # (what Lightning gives
                          attempt=env.get("SLURM_RESTART_COUNT", "0"))  # fmt: skip  # the process group)
        except (RuntimeError, ValueError, KeyError) as exc:  # e.g. srun's --ntasks without --ntasks-per-node
            raise ConfigError(f"{cls.__name__}: {' '.join(str(exc).split())}") from None
    elif num_nodes is not None and num_nodes > 1 and not (ddp_child() and env.get(FOLDER_ENV)):
        missing = [v for v in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK") if not env.get(v)]
        if missing:
            raise ConfigError(
                f"--trainer.num_nodes {num_nodes} without torchrun or srun needs {', '.join(missing)} in every node's "
                "environment (MASTER_ADDR: the first node's address, MASTER_PORT: a free port there, NODE_RANK: the "
                "node's number from 0)"
            )
        node, port = env_number("NODE_RANK", 0, high=num_nodes - 1), env_number("MASTER_PORT", None, 1, 65535)
        found = Ranks(node, num_nodes, env["MASTER_ADDR"], port, "NODE_RANK")
    return found if found is not None and found.size > 1 else None


def _first_line(text: str) -> str:
    return " ".join(str(text).strip().splitlines()[:1]) or "?"


class Rendezvous:
    """The processes of one run agreeing on its folder (see the module's docstring), through a ``torch.distributed``
    store at ``MASTER_ADDR:MASTER_PORT`` under keys of their own (``lightning_sfl/run_folder/<attempt>/``):

    - ``choice``: rank 0's folder, ``{"folder": …, "resume": …}`` (:meth:`publish`; the others: :meth:`choice`), or
      ``{"error": …, "rank": …}`` when a process stopped before the run started;
    - ``report/<rank>``: another rank is ready (its settings checked, :meth:`ready`) or stopped (:meth:`stopped`);
    - ``claimed``: rank 0 created and holds the folder (:meth:`claimed`, once every rank is ready:
      :meth:`wait_for_others`), or why the run does not start;
    - ``done``: how many other ranks have read what they needed (rank 0 stopping waits for them, :data:`LINGER`).

    Rank 0 serves the store (unless torchrun's agent does) from :func:`join` on, with ``multi_tenant``, so that the
    process group torch.distributed forms later at the same address reuses this server instead of finding the port
    taken."""

    def __init__(self, ranks: Ranks) -> None:
        self.ranks = ranks
        self._store = None
        self._chose = False  # rank 0 published its choice
        self._done = False  # this process is through with the others (the run started, or its stop was said)

    @property
    def first(self) -> bool:
        """Whether this process is rank 0, which chooses, creates and holds the folder."""
        return self.ranks.rank == 0

    @property
    def where(self) -> str:
        return f"{self.ranks.address}:{self.ranks.port}"

    def open(self, timeout: float = RENDEZVOUS_TIMEOUT):
        """The store (rank 0 starts serving it, unless torchrun's agent does); a one-line :class:`ConfigError` when
        it cannot be served or reached."""
        if self._store is not None:
            return self._store
        from datetime import timedelta

        from torch.distributed import PrefixStore, TCPStore

        serve = self.first and not self.ranks.agent
        try:
            store = TCPStore(self.ranks.address, self.ranks.port, is_master=serve, timeout=timedelta(seconds=timeout),
                             wait_for_workers=False, multi_tenant=serve)  # fmt: skip
        except RuntimeError as exc:
            doing = "serve the processes' store at" if serve else "reach rank 0's store at"
            raise ConfigError(
                f"rank {self.ranks.rank} of {self.ranks.size} ({self.ranks.launcher}) cannot {doing} {self.where} "
                f"(MASTER_ADDR:MASTER_PORT): {_first_line(exc)}"
            ) from None
        self._store = PrefixStore(f"lightning_sfl/run_folder/{self.ranks.attempt}/", store)
        return self._store

    def _read(self, key: str, waiting_for: str) -> dict:
        try:
            return json.loads(self.open().get(key))
        except ConfigError:
            raise
        except RuntimeError as exc:  # the server is gone (rank 0 or torchrun's agent ended) or it never answered
            self._done = True
            timed_out = "timeout" in str(exc).lower() or "timed out" in str(exc).lower()
            why = f"no answer in {RENDEZVOUS_TIMEOUT:.0f} s" if timed_out else "it ended (its output says why)"
            raise ConfigError(
                f"rank {self.ranks.rank} of {self.ranks.size}: rank 0 at {self.where} never said {waiting_for}: {why}"
            ) from None

    def _stopped_line(self, said: dict) -> str:
        return f"rank {said.get('rank', 0)} stopped: {said['error']}"

    def _through(self) -> None:
        """A rank other than 0 has read what it needed: counted, so that a rank 0 that stops need not wait longer."""
        self._done = True
        try:
            self._store.add("done", 1)
        except RuntimeError:
            pass
        self._store = None  # (the connection closes)

    # ---------------------------------------------------------------- rank 0
    def publish(self, folder: Path, resume: bool) -> None:
        """Rank 0: the folder it chose, before it checks the run's settings (the others check theirs meanwhile)."""
        self.open().set("choice", json.dumps({"folder": str(folder), "resume": resume}))
        self._chose = True

    def wait_for_others(self) -> None:
        """Rank 0, before it creates anything: every other rank has checked its settings; else a one-line
        :class:`ConfigError` naming the first that stopped and why."""
        store = self.open()
        waiting = {r: f"report/{r}" for r in range(1, self.ranks.size)}
        deadline = time.monotonic() + RENDEZVOUS_TIMEOUT
        while waiting:
            for rank, key in list(waiting.items()):
                if store.check([key]):
                    said = json.loads(store.get(key))
                    if "error" in said:
                        raise ConfigError(self._stopped_line({**said, "rank": rank}))
                    del waiting[rank]
            if waiting and time.monotonic() > deadline:
                raise ConfigError(f"rank 0 of {self.ranks.size}: rank(s) {sorted(waiting)} never said they were "
                                  f"ready in {RENDEZVOUS_TIMEOUT:.0f} s ({self.ranks.launcher})")  # fmt: skip
            time.sleep(0.05)

    def claimed(self) -> None:
        """Rank 0: the folder exists and is held; the others go on."""
        self.open().set("claimed", json.dumps({"ok": True}))
        self._done = True

    # ---------------------------------------------------------------- the other ranks
    def choice(self) -> dict:
        """Another rank: rank 0's choice (waiting for it), or a one-line :class:`ConfigError` when rank 0 stopped."""
        said = self._read("choice", "which run folder it chose")
        if "error" in said:
            self._through()
            raise ConfigError(self._stopped_line(said))
        return said

    def ready(self) -> None:
        """Another rank, its settings checked: says so, and waits until rank 0 holds the folder (a one-line
        :class:`ConfigError` when the run does not start)."""
        self.open().set(f"report/{self.ranks.rank}", json.dumps({"ready": True}))
        said = self._read("claimed", "that it created the run folder")
        self._through()
        if "error" in said:
            raise ConfigError(self._stopped_line(said))

    # ---------------------------------------------------------------- a stop before the run started
    def stopped(self, line: str) -> None:
        """This process stops with ``line`` before the run started: the others learn it (rank 0 then waits up to
        :data:`LINGER` for them to read it). Nothing once the run started, or once this process said its stop."""
        if self._done:
            return
        self._done = True
        said = json.dumps({"error": line, "rank": self.ranks.rank})
        try:
            store = self.open(timeout=LINGER)
            if not self.first:
                store.set(f"report/{self.ranks.rank}", said)
                store.add("done", 1)
                return
            if not self._chose:
                store.set("choice", said)
            store.set("claimed", said)
            deadline = time.monotonic() + LINGER
            while store.add("done", 0) < self.ranks.size - 1 and time.monotonic() < deadline:
                time.sleep(0.05)
        except (ConfigError, RuntimeError):  # the store is gone: the others find that out themselves
            pass


#: The rendezvous of this process's command (:func:`join`), if it is one of several processes of a run.
_JOINED: Rendezvous | None = None


def join(num_nodes: int | None = None) -> Rendezvous | None:
    """The rendezvous of this process with the others of its run (:func:`launched_ranks`; made once, rank 0 serving
    its store at once), or ``None`` for one process."""
    global _JOINED
    if _JOINED is None:
        ranks = launched_ranks(num_nodes)
        if ranks is not None:
            _JOINED = Rendezvous(ranks)
            if _JOINED.first:
                _JOINED.open()
    return _JOINED


def joined() -> Rendezvous | None:
    """This process's rendezvous, if :func:`join` made one."""
    return _JOINED


def leave() -> None:
    """The command is over: the next command in this process (a warm worker's) joins anew."""
    global _JOINED
    _JOINED = None


def first_process() -> bool:
    """Whether this process is the first of its run (it prints the run's lines, checks W&B, pre-starts W&B's worker):
    neither launched by Lightning for DDP nor a rank other than 0 of a launcher's (:func:`launched_ranks`)."""
    return not ddp_child() and (_JOINED is None or _JOINED.first)


def trim_rounds(metrics_csv: str | os.PathLike, rounds: int) -> int:
    """Keep the rows of a CSV log (Lightning's ``metrics.csv``) logged in the first ``rounds`` rounds (``epoch`` below
    ``rounds``; rows without an epoch are kept): what a resumed run logs again is not logged twice. Returns the rows
    dropped.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "metrics.csv"
    >>> _ = path.write_text("epoch,step,loss\\n0,0,1.0\\n1,1,0.5\\n2,2,0.4\\n,3,\\n")
    >>> trim_rounds(path, 2), path.read_text().splitlines()
    (1, ['epoch,step,loss', '0,0,1.0', '1,1,0.5', ',3,'])
    """
    path = Path(metrics_csv)
    if not path.is_file():
        return 0
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            fields, rows = reader.fieldnames or [], list(reader)
        if rows and "epoch" not in fields:
            raise ValueError("no epoch column")
        [float(r["epoch"]) for r in rows if r.get("epoch")]
    except (UnicodeDecodeError, csv.Error, ValueError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(
            f"{path} is damaged (not a CSV log of the run: {reason}): the run cannot continue its log; move it aside "
            "to continue with a new log (the checkpoint is intact)"
        ) from None
    kept = [r for r in rows if not r.get("epoch") or float(r["epoch"]) < rounds]
    if len(kept) != len(rows):
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(kept)
    return len(rows) - len(kept)


class _ContinuingWriter(ExperimentWriter):
    """Lightning's CSV writer, but an existing ``metrics.csv`` is continued (its columns kept), not deleted."""

    @override
    def _check_log_dir_exists(self) -> None:
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as f:
                self.metrics_keys = sorted(csv.DictReader(f).fieldnames or [])


class ContinuingCSVLogger(CSVLogger):
    """Lightning's :class:`~lightning.pytorch.loggers.CSVLogger` writing ``<save_dir>/<name>/metrics.csv`` (no
    ``version_<n>`` folder: the run folder is the version) and continuing that file when the run is resumed."""

    def __init__(
        self,
        save_dir: str | os.PathLike = "runs",
        name: str = "csv",
        version: int | str = "",
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        super().__init__(save_dir, name, version, prefix, flush_logs_every_n_steps)

    @property
    @rank_zero_experiment
    @override
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ContinuingWriter(log_dir=self.log_dir)
        return self._experiment
