"""The LightningCLI of ``lightning-sfl fit|validate|test`` (the console script itself is :mod:`lightning_sfl.cli`).

Run the main job (SCALA on scikit-learn's bundled digits, offline)::

    lightning-sfl fit --config configs/digits/scala.yaml

Any setting can be overridden: ``--data.partition dirichlet --data.beta 0.1 --model.lr 0.05``. The algorithm
is chosen with ``--model SCALA`` (or ``model.class_path`` in a config); ``num_classes`` and ``input_shape``
of the model are filled in from the data module.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from pathlib import Path

import lightning as L
import torch
from jsonargparse import lazy_instance
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback

from lightning_sfl.algorithms import ALGORITHMS, SplitFedAlgorithm
from lightning_sfl.callbacks import (
    CommunicationBytes,
    GradientDissimilarity,
    PartitionReport,
    PerClassAccuracy,
    PseudoLabelQuality,
    RoundProgressBar,
    SimulatedClock,
    WandbRoundAxis,
)
from lightning_sfl.checkpoint import SPECIAL, check_checkpoint
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.errors import ConfigError, NonFiniteError, check_output_folder, reported_cause
from lightning_sfl.loop import Federation
from lightning_sfl.system.timing import SystemModel
from lightning_sfl.system.wireless import WirelessCell
from lightning_sfl.wandb.process import wandb_switch

TRAINER_DEFAULTS = {
    "max_epochs": 50,
    "default_root_dir": "runs",
    "log_every_n_steps": 1,
    "num_sanity_val_steps": 0,
}


#: The LightningCLI subcommands offered (the console script adds ``compare``).
SUBCOMMANDS = ("fit", "validate", "test")


def keyed_checkpoint_folder(config, key: str) -> Path:
    """Where a command logged to W&B keeps its checkpoints unless ``--checkpoint.dirpath`` says otherwise:
    ``<default_root_dir>/checkpoints/<key>`` (``key``: :func:`run_key`), the same for fit, validate and test of it."""
    return Path(config.get("trainer", {}).get("default_root_dir") or ".") / "checkpoints" / key


def check_rounds_to_resume(checkpoint: dict, max_epochs: int | None) -> None:
    """Resuming ``checkpoint`` must continue: ``trainer.max_epochs`` (the rounds in all) may not be fewer than the
    rounds it already holds (one-line :class:`~lightning_sfl.errors.ConfigError`; Lightning would fail deep in the fit).

    >>> check_rounds_to_resume({"epoch": 99}, 200)
    >>> try:
    ...     check_rounds_to_resume({"epoch": 99}, 2)
    ... except ConfigError as err:
    ...     print(err)
    trainer.max_epochs=2 is fewer than the 100 rounds the checkpoint holds: give --trainer.max_epochs 101 or more to ...
    """
    done = int(checkpoint.get("epoch", -1)) + 1
    if max_epochs is not None and 0 <= max_epochs < done:
        raise ConfigError(
            f"trainer.max_epochs={max_epochs} is fewer than the {done} rounds the checkpoint holds: give "
            f"--trainer.max_epochs {done + 1} or more to continue it"
        )


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
    config.yaml`` runs it again) and ``lightning_sfl`` (``method``, ``version``, ``commit``)."""

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


class SFLCLI(LightningCLI):
    """LightningCLI with the algorithm as a subclass of :class:`SplitFedAlgorithm` and data-driven links."""

    def __init__(self, args=None, run: bool = True) -> None:
        own_argv = sys.argv[1:]
        if args is not None:  # the arguments are ``args``, not this process's command line (a compare or a sweep calls
            sys.argv[1:] = []  # this in-process under its own): Lightning would warn that it was given both
        try:
            self._init(args, run)
        finally:
            sys.argv[1:] = own_argv

    def _init(self, args, run: bool) -> None:
        super().__init__(
            model_class=SplitFedAlgorithm,
            subclass_mode_model=True,
            datamodule_class=FederatedDataModule,
            trainer_defaults=TRAINER_DEFAULTS,
            seed_everything_default=0,
            save_config_callback=RecordRun,
            save_config_kwargs={"overwrite": True},
            auto_configure_optimizers=False,
            parser_kwargs={  # no abbreviated option names: --data.num_client is an error, not num_clients
                "exit_on_error": False,
                "allow_abbrev": False,
                **{sub: {"exit_on_error": False, "allow_abbrev": False} for sub in SUBCOMMANDS},
            },
            args=args,
            run=run,
        )

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """``fit``, ``validate`` and ``test``; ``predict`` is not offered (the global model's outputs on the test
        split are what ``test`` evaluates)."""
        return {k: v for k, v in LightningCLI.subcommands().items() if k in SUBCOMMANDS}

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument(
            "--torch_threads",
            type=int | None,
            default=None,
            help="torch.set_num_threads for this run (1 is fastest for small models on a shared CPU); null: default",
        )
        parser.link_arguments("data.num_classes", "model.init_args.num_classes", apply_on="instantiate")
        parser.link_arguments("data.input_shape", "model.init_args.input_shape", apply_on="instantiate")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(CommunicationBytes, "comm")
        parser.add_lightning_class_args(PerClassAccuracy, "per_class")
        parser.add_lightning_class_args(PartitionReport, "partition_report")
        parser.add_lightning_class_args(GradientDissimilarity, "dissimilarity")
        parser.add_subclass_arguments(  # the system model (SimulatedClock logs its times): --clock.flops_high 1e10
            SystemModel, "clock", default=lazy_instance(WirelessCell), required=False
        )
        parser.add_lightning_class_args(WandbRoundAxis, "wandb_axis")
        parser.add_lightning_class_args(PseudoLabelQuality, "pseudo_labels")
        parser.set_defaults(
            {
                "model": {"class_path": "lightning_sfl.algorithms.SCALA"},
                "checkpoint.save_last": "link",  # last.ckpt links to the round's numbered file: one write per round
                "trainer.logger": [
                    {
                        "class_path": "lightning_sfl.wandb.logger.WandbLogger",  # W&B in a process of its own
                        "init_args": {"project": "lightning-sfl", "save_dir": "runs", "offline": None},
                    },
                    {
                        "class_path": "lightning.pytorch.loggers.CSVLogger",
                        "init_args": {"save_dir": "runs", "name": "csv"},
                    },
                ],
            }
        )

    def _instantiate_trainer(self, config: dict, callbacks: list) -> L.Trainer:
        """Check the data first: the dataset is loaded and the partition built before the trainer exists, so a
        missing dataset or an impossible partition is a one-line error and the run creates nothing (no folder,
        checkpoint or W&B run). Then the round-level progress bar, unless progress bars are off or the user
        configured one."""
        if self.datamodule is not None:
            self.datamodule.check()
        user = config.get("callbacks") or []
        user = user if isinstance(user, list) else [user]
        if config.get("enable_progress_bar", True) is not False and not any(isinstance(c, ProgressBar) for c in user):
            callbacks = [*callbacks, RoundProgressBar()]
        callbacks = [*callbacks, SimulatedClock()]  # logs the times of the system model (--clock.*)
        if config.get("enable_checkpointing") is False:  # --trainer.enable_checkpointing false: no --checkpoint.*
            callbacks = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
        try:
            return super()._instantiate_trainer(config, callbacks)
        except (MisconfigurationException, ValueError) as exc:  # Lightning refuses the trainer's settings (an
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__  # accelerator or
            raise ConfigError(f"trainer: {reason}") from None  # strategy this machine cannot run), before any run

    def before_instantiate_classes(self) -> None:
        config = self.config.get(self.subcommand, self.config)
        key = run_key(config)
        rounds = config.get("trainer", {}).get("max_epochs")
        if rounds is not None and rounds < 1:
            raise ConfigError(f"trainer.max_epochs={rounds} must be >= 1 (the number of global rounds)")
        for name, folder in (
            ("trainer.default_root_dir", config.get("trainer", {}).get("default_root_dir")),
            ("checkpoint.dirpath", (config.get("checkpoint") or {}).get("dirpath")),
        ):
            check_output_folder(name, folder)
        threads = config.get("torch_threads")
        if threads is not None:
            if threads < 1:
                raise ConfigError(f"torch_threads={threads} must be >= 1 (or null for torch's default)")
            torch.set_num_threads(threads)
        loggers = config.get("trainer", {}).get("logger")
        root = config.get("trainer", {}).get("default_root_dir")
        for lg in loggers if isinstance(loggers, list) else [loggers]:  # the default loggers follow default_root_dir
            init = getattr(lg, "init_args", None)
            if init is not None and root and init.get("save_dir") == TRAINER_DEFAULTS["default_root_dir"]:
                init.save_dir = root
        wandb_loggers = [
            lg
            for lg in (loggers if isinstance(loggers, list) else [loggers])
            if str(getattr(lg, "class_path", "")).endswith("WandbLogger")
        ]
        lightnings = [lg for lg in wandb_loggers if not str(lg.class_path).startswith("lightning_sfl.")]
        if lightnings and wandb_switch() is None:  # nothing says otherwise: no account needed
            for lg in lightnings:  # (ours decides so in its own W&B process: offline=None)
                lg.init_args.offline = True
        if self.subcommand == "fit" and wandb_loggers:
            self._resume_where_the_same_command_left_off(config, key, wandb_loggers)
        elif self.subcommand == "fit" and config.get("ckpt_path") and str(config.get("ckpt_path")) not in SPECIAL:
            check_rounds_to_resume(check_checkpoint(config.ckpt_path), config.get("trainer", {}).get("max_epochs"))
        if self.subcommand in ("validate", "test"):
            checkpoint = config.get("checkpoint")
            if wandb_loggers and checkpoint is not None and not checkpoint.get("dirpath"):  # fit's folder: Lightning
                checkpoint.dirpath = str(keyed_checkpoint_folder(config, key))  # restores its callback there quietly
            if config.get("ckpt_path") == "last":
                config.ckpt_path = str(self._last_checkpoint_of(config, key, bool(wandb_loggers)))

    @staticmethod
    def _last_checkpoint_of(config, key: str, keyed: bool) -> Path:
        """``--ckpt_path last`` for ``validate``/``test``: the last checkpoint ``fit`` wrote for the same configuration
        (``--checkpoint.dirpath``; else, for a run logged to W&B as by default,
        ``<default_root_dir>/checkpoints/<key>``, where ``fit`` put it), checked; a one-line error if there is none
        (Lightning would evaluate an untrained model)."""
        checkpoint = config.get("checkpoint") or {}
        folder = checkpoint.get("dirpath") or (keyed_checkpoint_folder(config, key) if keyed else None)
        if folder is None:
            raise ConfigError(
                "ckpt_path='last' needs the folder fit wrote its checkpoints to: give --checkpoint.dirpath (or the "
                "checkpoint's path)"
            )
        folder = Path(folder)
        path = folder / "last.ckpt"
        if not path.is_file():
            raise ConfigError(
                f"ckpt_path='last': no checkpoint of this configuration in {folder} (fit it first with the same "
                "options, or give the checkpoint's path)"
            )
        model = config.get("model")
        check_checkpoint(path, expected_class=getattr(model, "class_path", None) if model is not None else None)
        return path

    def before_fit(self) -> None:
        """The fit's federation, built before anything is written (a bad combination of method, data and system model
        is a one-line error here): the method, the data module and the system model of ``--clock.*``."""
        system = self.config_init[self.subcommand].get("clock")
        Federation.build(self.model, self.datamodule, system=system)

    def _resume_where_the_same_command_left_off(self, config, key: str, wandb_loggers: list) -> None:
        """A cluster job re-runs the same command with ``--ckpt_path last``. Without ``--checkpoint.dirpath`` a run
        logged to W&B (whose run folder changes at every start) keeps its checkpoints in
        ``<default_root_dir>/checkpoints/<key>`` (``key``: a hash of the config without ``ckpt_path`` and
        ``max_epochs``), so ``last`` is found again; a resumed run continues the W&B run its checkpoint records."""
        checkpoint = config.get("checkpoint")
        if checkpoint is None:
            return
        if not checkpoint.get("dirpath"):
            checkpoint.dirpath = str(keyed_checkpoint_folder(config, key))
        ckpt = config.get("ckpt_path")
        path = Path(checkpoint.dirpath) / "last.ckpt" if ckpt == "last" else Path(ckpt) if ckpt else None
        if path is None or str(ckpt) in SPECIAL[1:] or not path.is_file():
            return
        loaded = check_checkpoint(path)  # loaded safely, one-line errors
        check_rounds_to_resume(loaded, config.get("trainer", {}).get("max_epochs"))
        run_id = (loaded.get("lightning_sfl") or {}).get("wandb_id")
        for lg in wandb_loggers:
            if run_id and not lg.init_args.get("id") and not lg.init_args.get("version"):
                lg.init_args.id = run_id  # Lightning's WandbLogger resumes a given id ("allow")

    def _parse_ckpt_path(self) -> None:
        """Check a given checkpoint safely before Lightning reads its hyperparameters (one-line errors for
        missing, truncated, foreign or other-algorithm checkpoints)."""
        sub = self.config.get("subcommand")
        ckpt = self.config[sub].get("ckpt_path") if sub else None
        if ckpt is not None and str(ckpt) not in SPECIAL:
            model = self.config[sub].get("model")
            expected = getattr(model, "class_path", None) if model is not None else None
            check_checkpoint(ckpt, expected_class=expected)
        super()._parse_ckpt_path()

    def after_fit(self) -> None:
        """Print the final test accuracy of the global model in one line, then where the run's logs and last
        checkpoint went."""
        if self.trainer.interrupted or not self.trainer.is_global_zero:
            return
        metrics = self.trainer.callback_metrics
        # the rounds trained: the trainer's epochs, or (ddp_spawn: the fit ran in other processes, whose metrics come
        # back but not their epoch counter) the round of the last evaluation
        rounds = max(self.trainer.current_epoch, int(float(metrics.get("round", 0))))
        if "test/acc" not in metrics or int(float(metrics.get("round", -1))) != rounds:
            metrics = self.trainer.validate(self.model, datamodule=self.datamodule, verbose=False)[0]
        print(f"final test accuracy: {float(metrics['test/acc']):.4f} after {rounds} rounds")
        folders = dict.fromkeys(str(getattr(lg, "log_dir", None) or lg.save_dir) for lg in self.trainer.loggers)
        where = [f"logs in {', '.join(folders)}"] if folders else []  # (trainer.log_dir would wait for other ranks)
        checkpoint = getattr(self.trainer.checkpoint_callback, "last_model_path", "") or getattr(
            self.trainer.checkpoint_callback, "best_model_path", ""
        )
        if checkpoint:
            inside = Path(checkpoint).resolve().is_relative_to(Path.cwd().resolve())
            where.append(f"last checkpoint {os.path.relpath(checkpoint) if inside else checkpoint}")
        if where:
            print("run saved: " + "; ".join(where))


class _ParseOnly(SFLCLI):
    """The CLI's parser and parsing, nothing instantiated (see :func:`resolved_config`)."""

    def _set_seed(self) -> None:
        pass

    def before_instantiate_classes(self) -> None:
        pass

    def instantiate_classes(self) -> None:
        pass


def resolved_config(args: list[str]) -> dict:
    """The configuration ``lightning-sfl fit ARGS`` would run, as jsonargparse resolves it (what ``--print_config``
    prints: configs merged in order, a new ``--model`` class keeps only the ``init_args`` it accepts), as a plain
    dict without the ``fit`` level. Nothing is instantiated.
    A bad setting raises :class:`~lightning_sfl.errors.ConfigError` with the parser's message in one line."""
    import yaml

    try:
        cli = _ParseOnly(args=resolve_algorithm_names(list(args)), run=False)
    except argparse.ArgumentError as exc:
        raise ConfigError(parser_error_line(str(exc))) from None
    return yaml.safe_load(cli.parser.dump(cli.config, skip_none=False)) or {}


def run_key(config) -> str:
    """A short hash naming a run by its configuration, the same when the same command is run again and for ``fit``,
    ``validate`` and ``test`` of it (what may change between a start and its resumption or evaluation is left out:
    ``ckpt_path``, ``trainer.max_epochs``, ``torch_threads``, the checkpoint options, validate's ``verbose``, the
    progress bar and model summary switches)."""
    values = config.clone().as_dict() if hasattr(config, "clone") else dict(config)
    values.pop("ckpt_path", None)
    values.pop("torch_threads", None)
    values.pop("verbose", None)  # validate's and test's own: the same run for fit, validate and test
    values.pop("checkpoint", None)
    for display in ("max_epochs", "enable_progress_bar", "enable_model_summary"):  # change nothing a run computes
        values.get("trainer", {}).pop(display, None)
    return hashlib.sha1(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:10]


def resolve_algorithm_names(argv: list[str]) -> list[str]:
    """Let ``--model scala`` (a registry name) or ``--model SCALA`` stand for the class path; an unknown name
    is a one-line error listing the valid ones."""
    names = {**{k: cls for k, cls in ALGORITHMS.items()}, **{cls.__name__: cls for cls in ALGORITHMS.values()}}
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--model" and i + 1 < len(out):
            j, value = i + 1, out[i + 1]
        elif arg.startswith("--model="):
            j, value = i, arg.split("=", 1)[1]
        else:
            continue
        if "." in value or value.startswith(("{", "-")) or value.endswith((".yaml", ".yml", ".json")):
            continue  # class path, inline dict or config file: jsonargparse's business
        if value not in names:
            raise ConfigError(f"model={value!r} is not one of: {', '.join(ALGORITHMS)} (or their class names)")
        path = f"lightning_sfl.algorithms.{names[value].__name__}"
        out[j] = path if j != i else f"--model={path}"
    return out


def run(args: list[str] | None = None) -> None:
    """``fit``/``validate``/``test`` with ``args`` (default ``sys.argv[1:]``); see :func:`lightning_sfl.cli.main`.

    Bad settings, missing datasets, unreadable checkpoints and NaN/Inf in training end the command with one
    line on stderr (exit code 2 for settings, 1 for NaN/Inf) instead of a traceback."""
    try:
        if args is None:  # LightningCLI reads sys.argv itself (and warns if it is given both)
            sys.argv[1:] = resolve_algorithm_names(sys.argv[1:])
            SFLCLI()
        else:
            SFLCLI(args=resolve_algorithm_names(list(args)))
    except argparse.ArgumentError as exc:  # the parser's own messages, without its usage dump
        print(f"error: {parser_error_line(str(exc))}", file=sys.stderr)
        raise SystemExit(2) from None
    except Exception as exc:
        cause = reported_cause(exc)
        if cause is None:
            raise
        print(f"error: {cause}", file=sys.stderr)
        raise SystemExit(1 if isinstance(cause, NonFiniteError) else 2) from None


def parser_error_line(text: str) -> str:
    """jsonargparse's (multi-line) message in one line: ``--data.num_clients: Expected a int. Got value: abc``."""
    keys = re.findall(r'Parser key "([^"]+)":', text)
    key = ".".join(dict.fromkeys(keys)) if keys else None  # --model: ... Parser key "lr": -> --model.lr
    rest = re.split(r'Parser key "[^"]+":', text)[-1] if keys else text
    rest = re.split(r"\n\s*- Expected a <class 'NoneType'>|\n\s*Given value type", rest)[0]
    rest = " ".join(line.strip().lstrip("- ") for line in rest.splitlines() if line.strip())
    rest = re.sub(r"<class '(?:[\w]+\.)*(\w+)'>", r"\1", rest)
    line = f"--{key}: {rest}" if key else rest
    return line if len(line) <= 300 else line[:297] + "..."
