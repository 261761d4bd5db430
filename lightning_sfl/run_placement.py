"""Where one command of the command line runs (:class:`RunPlacement`, held by
:class:`~lightning_sfl.lightning_cli.SFLCLI`): the run folder it chooses, creates, holds and lets go of; the loggers it
places there; what a stopped run kept (:func:`kept_checkpoint`) and what a finished one wrote (:func:`saved_line`).

- ``fit``: a new folder for a new run, the latest of its configuration for ``--ckpt_path last``, the first process's
  for the other processes of a DDP run (those Lightning launches: :data:`~lightning_sfl.run_folder.FOLDER_ENV`; those
  a launcher starts, torchrun, ``srun``, one command a node: rank 0's, :class:`~lightning_sfl.run_folder.Rendezvous`).
- ``validate``/``test``: the checkpoint evaluated (:func:`~lightning_sfl.run_folder.evaluated_checkpoint`); their
  records go to a new ``<run>/<command>-<n>/`` (a checkpoint kept outside a run folder: a new run folder
  ``<name>-<command>``), never into the fit's files.

The file-system rules themselves (names, versions, locks, the checkpoint a ``last`` means) are
:mod:`lightning_sfl.run_folder`'s.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import warnings
from pathlib import Path

from lightning_sfl.checkpoint import check_checkpoint
from lightning_sfl.class_paths import dataset_name
from lightning_sfl.errors import ConfigError
from lightning_sfl.process.streams import ddp_child
from lightning_sfl.run_checkpoints import Resume, newest_intact, resume_point
from lightning_sfl.run_folder import (
    FOLDER_ENV,
    Evaluated,
    Rendezvous,
    RunLock,
    check_run_folder,
    claim_new,
    evaluated_checkpoint,
    join,
    latest_run,
    named_run,
    next_record,
    next_run,
    seeds_group,
    shown_path,
    trim_rounds,
)
from lightning_sfl.settings_checks import check_rounds_to_resume

__all__ = ["EVALUATIONS", "RunPlacement", "kept_checkpoint", "relink_last", "saved_line"]

#: The subcommands that evaluate a checkpoint (and keep their records in ``<run>/<subcommand>-<n>/``).
EVALUATIONS = ("validate", "test")
#: The ``save_dir`` of a logger the user did not place: the CLI's default (``runs``) and Lightning's loggers' (``.``).
UNPLACED = ("runs", ".", None)


def _remove_if_empty(folder: Path, with_parent: bool) -> None:
    """Remove the run folder ``folder`` if nothing was written to it, and its parent too if ``with_parent`` (the
    ``default_root_dir`` the run created) and it is left empty."""
    with contextlib.suppress(OSError):  # (something wrote to it meanwhile: it stays)
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
            if with_parent and folder.parent.is_dir() and not any(folder.parent.iterdir()):
                folder.parent.rmdir()


class RunPlacement:
    """The run folder of one command ``command`` (``fit``, ``validate``, ``test``) with arguments ``argv`` (for its
    lock): chosen before anything is built (:meth:`choose`), created and held once every setting has been checked
    (:meth:`claim`), let go of at the end (:meth:`release`). ``folder``: the run folder (an evaluation's record folder);
    ``evaluated``: what an evaluation reads."""

    def __init__(self, command: str, argv: list[str]) -> None:
        self.command, self.argv = command, argv
        self.folder: Path | None = None
        self.evaluated: Evaluated | None = None
        self._lock: RunLock | None = None
        self._new = self._held = self._made_root = False
        self._mend: Resume | None = None  # a damaged last.ckpt to point at the newest intact checkpoint, once claimed
        #: What the command says of the run it continues, when it starts (a damaged ``last.ckpt``, a run anew).
        self.note: str | None = None
        #: The other processes of a run a launcher started (torchrun, srun, one command a node), if any.
        self.rendezvous: Rendezvous | None = None
        self._shared: dict | None = None  # rank 0's choice, in another rank

    # ------------------------------------------------------------------ choosing
    def choose(self, config, key: str) -> Path | None:
        """Choose the folder for ``config`` (named by ``key``, :func:`~lightning_sfl.run_folder.run_key`); sets
        ``checkpoint.dirpath`` where the config leaves it unset. Returns the checkpoint a ``fit --ckpt_path last``
        resumes (the latest run has one), else ``None``."""
        root, name = named_run(config, key)
        self.rendezvous = join(config.get("trainer", {}).get("num_nodes"))
        if self.command in EVALUATIONS:
            self._choose_evaluated(config, root, name)
            return None
        ckpt = config.get("ckpt_path")
        checkpoint = config.get("checkpoint")
        given = checkpoint is not None and checkpoint.get("dirpath")
        if not self._inherit():
            if name == "":
                self.folder = root
            elif ckpt == "last":
                self.folder = latest_run(root, name)
            if self.folder is None:
                self.folder, self._new = next_run(root, name), True
            check_run_folder(self.folder, root)
        plan = self._resume_plan(checkpoint, given, ckpt, root, name)
        if checkpoint is not None and not given:
            checkpoint.dirpath = str(self.folder / "checkpoints")
        last = Path(checkpoint.dirpath) / "last.ckpt" if checkpoint is not None else None
        if ckpt is None and self._held:  # a new run: never into another run's files (a re-run of its config.yaml)
            if name == "" and (root / "config.yaml").is_file():
                raise ConfigError(
                    f"trainer.default_root_dir={str(root)!r} already holds a run (run_name ''): continue it with "
                    "--ckpt_path last, or give another --trainer.default_root_dir or --run_name"
                )
            if given and last.exists():
                raise ConfigError(
                    f"checkpoint.dirpath={str(checkpoint.dirpath)!r} holds another run's checkpoints (last.ckpt): "
                    "continue that run with --ckpt_path last, or give another --checkpoint.dirpath"
                )
        resumed = plan.intact if plan is not None else None
        if self._shared is not None:  # another rank: rank 0's resume decision, which every rank must be able to follow
            if self._shared.get("resume") and resumed is None:
                raise ConfigError(
                    f"rank {self.rendezvous.ranks.rank}: {last} (rank 0 resumes from it) is not on this node: "
                    "--ckpt_path last needs the run folder on a file system every node shares"
                )
            return resumed if self._shared.get("resume") else None
        if self.rendezvous is not None:
            self.rendezvous.publish(self.folder, resume=resumed is not None)
        return resumed

    def _resume_plan(self, checkpoint, given, ckpt, root: Path, name: str) -> Resume | None:
        """``fit --ckpt_path last``: what it resumes from (:func:`~lightning_sfl.run_checkpoints.resume_point`: a
        damaged ``last.ckpt`` names the newest intact checkpoint, mended when the folder is claimed), or ``None``. The
        latest run of the configuration holding no checkpoint at all (stopped before its first round ended) is not
        continued from round 0 in its folder: a new run is (:attr:`note` says so)."""
        if ckpt != "last" or checkpoint is None:
            return None
        folder = Path(given) if given else self.folder / "checkpoints"
        plan = resume_point(folder / "last.ckpt", shown_path(self.folder))
        if plan is not None or self._new or not self._held or RunLock(self.folder).holder() is not None:
            self._mend = plan if self._held else None  # (a folder a live process holds: its one line at the claim)
            self.note = plan.line(shown_path(self.folder)) if plan is not None and self._held else None
            return plan
        if name == "" or given:
            if any(self.folder.glob("csv/metrics.csv")) or (self.folder / "config.yaml").is_file():
                raise ConfigError(
                    f"{shown_path(self.folder)} holds a run but no checkpoint of it (no round of it finished): nothing "
                    "to resume; start it anew without --ckpt_path last (its logs are replaced), or give another folder"
                )
            return None
        self.note = f"{shown_path(self.folder)} holds no checkpoint (no round of it finished): a new run instead"
        self.folder, self._new = next_run(root, name), True
        return None

    def _choose_evaluated(self, config, root: Path, name: str) -> None:
        """``validate``/``test``: the checkpoint evaluated (``--ckpt_path`` itself, or for ``last`` the latest run of
        this configuration that reached its ``trainer.max_epochs``; none given is a one-line error), checked, and a new
        record folder for what the command writes."""
        dirpath = (config.get("checkpoint") or {}).get("dirpath")
        wanted = config.get("trainer", {}).get("max_epochs")
        self.evaluated = evaluated_checkpoint(config.get("ckpt_path"), root, name, wanted, dirpath, self.command)
        if config.get("ckpt_path") == "last":  # (a given path is checked as it is parsed: SFLCLI._parse_ckpt_path)
            model = config.get("model")
            check_checkpoint(self.evaluated.checkpoint, expected_class=getattr(model, "class_path", None))
            config.ckpt_path = str(self.evaluated.checkpoint)
        if not self._inherit():
            run = self.evaluated.run
            if run is None:  # a checkpoint kept elsewhere: a folder of this command's own, named by the configuration
                run = root if name == "" else None
            self.folder = next_record(run, self.command) if run else next_run(root, f"{name}-{self.command}")
            self._new = True
            if self.rendezvous is not None:
                self.rendezvous.publish(self.folder, resume=False)
        checkpoint = config.get("checkpoint")
        if checkpoint is not None and not checkpoint.get("dirpath"):  # the checkpointer the fit had (an evaluation
            checkpoint.dirpath = os.path.realpath(self.evaluated.checkpoint.parent)  # writes nothing with it)

    def _inherit(self) -> bool:
        """In a rank other than 0 of a launcher's run: rank 0's folder (:meth:`Rendezvous.choice`, waited for); in a
        process Lightning launched for DDP: the first process's (:data:`FOLDER_ENV`). Neither is held again: True.
        Else False: this process chooses (and will hold) its own."""
        if self.rendezvous is not None:
            self._held = self.rendezvous.first
            if not self._held:
                self._shared = self.rendezvous.choice()
                self.folder = Path(self._shared["folder"])
            return not self._held
        inherited = os.environ.get(FOLDER_ENV, "")
        self._held = not (ddp_child() and inherited)
        if not self._held:
            self.folder = Path(inherited)
        return not self._held

    # ------------------------------------------------------------------ loggers
    def place_loggers(self, config, loggers: list) -> None:
        """Loggers writing to ``trainer.default_root_dir`` or to their own default folder (:data:`UNPLACED`: the
        CLI's W&B and CSV loggers, ``--trainer.logger lightning.pytorch.loggers.WandbLogger``) write to the run folder
        instead; W&B's run is named after it, tagged with method, dataset, partition and seed, grouped with the runs of
        the same configuration but for the seeds (:func:`~lightning_sfl.run_folder.seeds_group`), typed by
        subcommand."""
        root = config.get("trainer", {}).get("default_root_dir")
        model = config.get("model")
        method = str(getattr(model, "class_path", "")).rsplit(".", 1)[-1]
        data = config.get("data") or {}
        dataset = dataset_name(data["dataset"]) if data.get("dataset") else None
        tags = [t for t in (method, dataset, data.get("partition")) if t]
        tags.append(f"seed{config.get('seed_everything')}")
        for lg in loggers:
            init = getattr(lg, "init_args", None)
            if init is None or init.get("save_dir") not in (*UNPLACED, root):
                continue
            init.save_dir = str(self.folder)
            cls = str(lg.class_path)
            if cls.endswith("WandbLogger"):  # W&B's own variables (a sweep's trials: WANDB_NAME, ...) come first
                init.name = init.get("name") or os.environ.get("WANDB_NAME") or self.wandb_name()
                if cls.startswith("lightning_sfl."):
                    given = [t for t in os.environ.get("WANDB_TAGS", "").split(",") if t]
                    init.tags = list(dict.fromkeys([*given, *tags]))
                    init.group = os.environ.get("WANDB_RUN_GROUP") or seeds_group(config)
                    init.job_type = os.environ.get("WANDB_JOB_TYPE") or self.command

    def wandb_name(self) -> str:
        """The W&B run's name: the run folder's; an evaluation's ``<run>-<command>-<n>``."""
        evaluated = self.evaluated
        if evaluated is not None and evaluated.run is not None and self.folder.parent == evaluated.run:
            return f"{evaluated.run.name}-{self.folder.name}"
        return self.folder.name

    @staticmethod
    def continue_run(config, last: Path, wandb_loggers: list, csv_logs: list[Path], trim: bool = True) -> None:
        """``fit --ckpt_path last`` (how a cluster job re-runs its command) continues the latest run of the same
        configuration: its ``last.ckpt`` (checked; fewer rounds than it holds is a one-line error), its W&B run (the id
        the checkpoint records) and its CSV logs ``csv_logs`` (the rows of rounds after the checkpoint dropped, unless
        ``trim`` is false: in the processes that do not hold the folder, which write no log)."""
        loaded = check_checkpoint(last)  # loaded safely, one-line errors
        check_rounds_to_resume(loaded, config.get("trainer", {}).get("max_epochs"))
        # Lightning warns that the checkpoint folder is not empty: it holds this run's own checkpoints, continued on
        # purpose (a folder held by one process, never shared across runs). Only that exact folder is left unsaid.
        folder = re.escape(os.path.realpath(last.parent))
        warnings.filterwarnings("ignore", message=f"Checkpoint directory {folder} exists and is not empty")
        for path in csv_logs if trim else ():
            trim_rounds(path, int(loaded.get("epoch", -1)) + 1)
        run_id = (loaded.get("lightning_sfl") or {}).get("wandb_id")
        for lg in wandb_loggers:
            if run_id and not lg.init_args.get("id") and not lg.init_args.get("version"):
                lg.init_args.id = run_id  # Lightning's WandbLogger resumes a given id ("allow")

    # ------------------------------------------------------------------ holding
    def claim(self) -> None:
        """Create (a new run) and hold the folder, once every setting has been checked and before anything is
        written; the processes Lightning launches for DDP learn it from :data:`~lightning_sfl.run_folder.FOLDER_ENV`.
        Of a launcher's ranks, rank 0 does so once every other rank is ready
        (:meth:`~lightning_sfl.run_folder.Rendezvous.wait_for_others`); the others say they are ready and wait until
        it holds the folder."""
        rendezvous = self.rendezvous
        if rendezvous is not None and not rendezvous.first:
            if self._shared is not None:
                rendezvous.ready()
                os.environ[FOLDER_ENV] = str(self.folder)  # (Lightning's processes on this node, --trainer.devices N)
                self._shared = None
            return
        if not self._held or self._lock is not None:
            return
        if rendezvous is not None:
            rendezvous.wait_for_others()
        self._made_root = not self.folder.parent.exists()
        try:
            if self._new:
                claim_new(self.folder)
            else:
                self.folder.mkdir(parents=True, exist_ok=True)
        except PermissionError as exc:  # (e.g. a validate of another user's run: its records go inside the run)
            raise ConfigError(f"cannot create {self.folder}: {exc.strerror.lower()}") from None
        self._lock = RunLock(self.folder, command=" ".join(["lightning-sfl", *self.argv]))
        self._lock.acquire()
        if self._mend is not None:  # (every setting checked: the first write to the run's checkpoints)
            self._mend.mend()
        os.environ[FOLDER_ENV] = str(self.folder)
        if rendezvous is not None:
            rendezvous.claimed()

    @property
    def chooses(self) -> bool:
        """Whether this process chose the folder and holds it (or will, once every setting is checked): not a process
        that learnt it from another (Lightning's processes for DDP, the ranks of a launcher's run but 0)."""
        return self._held

    @property
    def held(self) -> bool:
        """Whether this process holds the folder (it chose and claimed it)."""
        return self._lock is not None

    def release(self, remove_if_empty: bool) -> None:
        """Let go of the folder; a folder this process created and the command left empty (it failed with a one-line
        error, or wrote elsewhere) is removed, now or (``remove_if_empty=False``: the caller of a CLI made with
        ``run=False`` may still fit) at the end of the process."""
        if self._lock is not None:
            self._lock.release()
        if not (self._new and self.folder is not None):
            return
        if remove_if_empty:
            _remove_if_empty(self.folder, self._made_root)
        else:
            atexit.register(_remove_if_empty, self.folder.resolve(), self._made_root)  # (the caller may chdir)

    @staticmethod
    def argv_of(args) -> list[str]:
        """A command's arguments as its lock records them (``args`` may also be a dict of settings)."""
        return [str(a) for a in args] if isinstance(args, list | tuple) else [json.dumps(args, default=str)]


# ---------------------------------------------------------------------- what a run kept and wrote
def relink_last(last: Path) -> None:
    """Point ``last`` (``last.ckpt``, a link Lightning replaces after every round's checkpoint: first it removes the old
    link, then it makes the new one) at the newest round checkpoint beside it that can be read. A Ctrl-C or SIGTERM
    between the two leaves no ``last.ckpt``, though the round's checkpoint was written; without a readable one,
    nothing."""
    intact = newest_intact(last.parent)
    if intact is not None:
        last.unlink(missing_ok=True)  # a dangling link
        last.symlink_to(intact.name)


def kept_checkpoint(callback, first_process: bool = True) -> str | None:
    """``round N's checkpoint is kept (runs/…/last.ckpt)``: the checkpoint a stopped fit leaves, from its checkpoint
    callback ``callback``; ``None`` when none was written. The first process of a DDP run (``first_process``) mends a
    ``last.ckpt`` link the stop cut (:func:`relink_last`)."""
    last = Path(callback.dirpath or "") / "last.ckpt" if callback else None
    if last is not None and not last.exists() and first_process and callback.save_last == "link":
        relink_last(last)  # the stop came while the link was being replaced: point it at the newest round
    if last is None or not last.exists():
        return None
    saved = re.search(r"epoch=(\d+)", last.resolve().name)
    kept = f"round {int(saved.group(1)) + 1}'s checkpoint is kept" if saved else "the last checkpoint is kept"
    return f"{kept} ({shown_path(last)})"


def saved_line(folder: Path, checkpoint: str | None, loggers: list) -> str:
    """``run saved: <folder>: last checkpoint …, CSV log …, W&B offline run … (upload: wandb sync …)``: what a command
    wrote, in one line (paths inside ``folder`` relative to it; W&B last, with its upload command). A W&B run of
    Lightning's own logger (in this process) is finished here, so that W&B's summary comes before this line; the W&B
    runs of either logger record the command's output up to here."""
    from lightning_sfl.wandb.online import where_logged

    base = Path(os.path.abspath(folder))

    def inside(path) -> str:
        path = Path(os.path.abspath(path))
        return os.path.relpath(path, base) if path.is_relative_to(base) else shown_path(path)

    parts, wandb = ([f"last checkpoint {inside(checkpoint)}"] if checkpoint else []), []
    for lg in loggers:
        if type(lg).__name__.endswith("WandbLogger"):
            if getattr(lg, "_experiment", None) is None:  # (never started: nothing was logged to it)
                continue
            mode, where = where_logged(lg.experiment)
            if type(lg).__module__.startswith("lightning_sfl."):  # the last lines stay out of its console log
                lg.end_console_log()  # (W&B's summary goes to wandb/messages.log when its run ends, at exit)
            else:  # W&B in this process: its run ends now, and its summary comes before the last lines
                lg.experiment.finish()
            if mode == "offline":
                wandb.append(f"W&B offline run {inside(where)} (upload: wandb sync {shown_path(where)})")
            elif where:  # (W&B disabled, WANDB_MODE=disabled: no run, no address)
                wandb.append(f"W&B run {where}")
        elif getattr(lg, "log_dir", None):
            metrics = Path(lg.log_dir) / "metrics.csv"
            parts.append(f"CSV log {inside(metrics)}" if metrics.is_file() else f"logs in {inside(lg.log_dir)}")
        else:
            parts.append(f"logs in {inside(lg.save_dir)}")
    parts += wandb
    return f"run saved: {shown_path(folder)}" + (": " + ", ".join(parts) if parts else "")
