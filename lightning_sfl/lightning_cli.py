"""The LightningCLI of ``lightning-sfl fit|validate|test`` (the console script itself is :mod:`lightning_sfl.cli`).

Run the main job (SCALA on scikit-learn's bundled digits, offline)::

    lightning-sfl fit --config configs/digits/scala.yaml

Any setting can be overridden: ``--data.partition dirichlet --data.beta 0.1 --model.lr 0.05``. The algorithm
is chosen with ``--model SCALA`` (or ``model.class_path`` in a config); ``num_classes`` and ``input_shape``
of the model are filled in from the data module.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Literal

import lightning as L
import torch
from jsonargparse import DefaultHelpFormatter, lazy_instance
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.accelerators import CUDAAccelerator
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override

from lightning_sfl.algorithms import SplitFedAlgorithm
from lightning_sfl.algorithms.registry import algorithm_path
from lightning_sfl.callbacks import (
    CommunicationBytes,
    GradientDissimilarity,
    PartitionReport,
    PerClassAccuracy,
    PseudoLabelQuality,
    RoundProgressBar,
    SimulatedClock,
    SplitGuard,
    WandbRoundAxis,
)
from lightning_sfl.checkpoint import (
    SPECIAL,
    check_checkpoint,
    check_fits_data,
    checkpoint_method,
    legacy_hyperparameters,
)
from lightning_sfl.client_store import DEFAULT_MEMORY_BUDGET, set_memory_budget
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.defences import moved_option_hint
from lightning_sfl.errors import (
    ConfigError,
    NonFiniteError,
    RunInterrupted,
    check_output_folder,
    parser_error_line,
    reported_cause,
    seed_number,
)
from lightning_sfl.help_text import PlainHelp
from lightning_sfl.loop import Federation
from lightning_sfl.run_checkpoints import RoundCheckpoint
from lightning_sfl.run_folder import (
    Evaluated,
    RecordRun,
    evaluated_checkpoint,
    first_process,
    join,
    joined,
    leave,
    named_run,
    run_key,
    shown_path,
)
from lightning_sfl.run_placement import UNPLACED, RunPlacement, kept_checkpoint, saved_line
from lightning_sfl.settings_checks import (
    check_config_files,
    check_rounds_to_resume,
    check_trainer_settings,
    lacking_package_line,
    resolve_algorithm_names,
    user_error_line,
    with_config_file,
)
from lightning_sfl.subclass_cache import cache_subclass_searches
from lightning_sfl.system.devices import EdgeDevices  # noqa: F401 (--clock EdgeDevices)
from lightning_sfl.system.timing import SystemModel
from lightning_sfl.system.wireless import WirelessCell
from lightning_sfl.wandb.process import wandb_switch

cache_subclass_searches()

TRAINER_DEFAULTS = {
    "max_epochs": 50,
    "default_root_dir": "runs",
    "log_every_n_steps": 1,
    "num_sanity_val_steps": 0,
}


#: The LightningCLI subcommands offered (the console script adds ``compare``).
SUBCOMMANDS = ("fit", "validate", "test")


class PlainJsonargparseFormatter(PlainHelp, DefaultHelpFormatter):
    """jsonargparse's help formatter, with the docstrings' Sphinx markup as plain text
    (:class:`~lightning_sfl.help_text.PlainHelp`)."""


class PlainArgumentParser(LightningArgumentParser):
    """Lightning's argument parser with :class:`PlainJsonargparseFormatter` (a parser it makes of its own type for
    ``--model.help CLASS`` too)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["formatter_class"] = PlainJsonargparseFormatter
        super().__init__(*args, **kwargs)


class SFLCLI(LightningCLI):
    """LightningCLI with the algorithm as a subclass of :class:`SplitFedAlgorithm` and data-driven links."""

    def __init__(self, args=None, run: bool = True) -> None:
        own_argv = sys.argv[1:]
        if args is not None:  # the arguments are ``args``, not this process's command line (a compare or a sweep calls
            sys.argv[1:] = []  # this in-process under its own): Lightning would warn that it was given both
        self.placement: RunPlacement | None = None  # where the run lives (chosen before anything is instantiated)
        self._resumed: Path | None = None  # the checkpoint fit --ckpt_path last continues from
        self._offline_line: str | None = None  # W&B cannot be reached: why this run logs offline
        self._args = args
        failed = True
        try:
            self._init(args, run)
            failed = False
        finally:
            sys.argv[1:] = own_argv
            if self.placement is not None:  # (with run=False the caller's fit is not held; its empty folder goes
                self.placement.release(remove_if_empty=failed or run)  # at the end of the process)

    @property
    def run_folder(self) -> Path | None:
        """The run's folder (an evaluation's: its record folder ``<run>/<subcommand>-<n>``)."""
        return self.placement.folder if self.placement is not None else None

    @property
    def evaluated(self) -> Evaluated | None:
        """What ``validate``/``test`` evaluate."""
        return self.placement.evaluated if self.placement is not None else None

    def _init(self, args, run: bool) -> None:
        check_config_files(args if args is not None else sys.argv[1:])
        super().__init__(
            model_class=SplitFedAlgorithm,
            subclass_mode_model=True,
            datamodule_class=FederatedDataModule,
            trainer_defaults=TRAINER_DEFAULTS,
            seed_everything_default=0,
            save_config_callback=RecordRun,
            save_config_kwargs={"overwrite": True},
            auto_configure_optimizers=False,
            parser_class=PlainArgumentParser,  # --help, --model.help: docstrings without Sphinx markup
            parser_kwargs={  # no abbreviated option names: --data.num_client is an error, not num_clients
                "exit_on_error": False,
                "allow_abbrev": False,
                **{sub: {"exit_on_error": False, "allow_abbrev": False} for sub in SUBCOMMANDS},
            },
            args=args,
            run=run,
        )

    @override
    def _add_subcommands(self, parser, **kwargs) -> None:
        """A parser for the subcommand this command line runs only (``fit``, ``validate`` or ``test``: each costs
        ~0.1-0.2 s of parsing in a warm trial worker, whose caches are warm); for all three when it names none."""
        argv = self._args if self._args is not None else sys.argv[1:]
        chosen = argv[0] if isinstance(argv, (list, tuple)) and argv and argv[0] in SUBCOMMANDS else None
        if chosen is None:
            super()._add_subcommands(parser, **kwargs)
            return
        every = self.subcommands()
        self.subcommands = lambda: {chosen: every[chosen]}  # what Lightning's loop iterates, for this call only
        try:
            super()._add_subcommands(parser, **kwargs)
        finally:
            del self.subcommands

    @override
    def _set_seed(self) -> None:
        """Lightning's (``true``: a random seed; ``false``: none; the seed used is written back into the config), with
        ``seed_everything`` checked first and quietly: "Seed set to N" is printed when the command runs
        (``_run_subcommand``), so that a bad value found while the method and data are built is the only line."""
        config = self.config.get(self.subcommand, self.config)
        seed = config.get("seed_everything")
        if seed is False:
            return
        if seed not in (True, None):
            seed_number("seed_everything", seed)
        config["seed_everything"] = L.seed_everything(None if seed is True else seed, workers=True, verbose=False)

    @staticmethod
    @override
    def subcommands() -> dict[str, set[str]]:
        """``fit``, ``validate`` and ``test``; ``predict`` is not offered (the global model's outputs on the test
        split are what ``test`` evaluates)."""
        return {k: v for k, v in LightningCLI.subcommands().items() if k in SUBCOMMANDS}

    @override
    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument(
            "--torch_threads",
            type=int | None,
            default=None,
            help="torch.set_num_threads for this run (1 is fastest for small models on a shared CPU); null: default",
        )
        parser.add_argument(
            "--client_state_memory",
            type=float,
            default=DEFAULT_MEMORY_BUDGET / 2**20,
            help="MiB of per-client state rows each store (FedDyn's, SCAFFOLD's, SCALA-PE's decoders, ...) holds in "
            "memory; beyond it, in files beside the checkpoints, read memory-mapped",
        )
        parser.add_argument(
            "--matmul_precision",
            type=Literal["highest", "high", "medium"],
            default="high",
            help="float32 matmul precision on a CUDA device (torch.set_float32_matmul_precision): high lets Tensor "
            "Cores run them in TF32, as cuDNN already runs convolutions; highest: full float32. CPU runs ignore it",
        )
        parser.add_argument(
            "--run_name",
            type=str | None,
            default=None,
            help="the run's folder under trainer.default_root_dir; null: <method>-<dataset>-<partition>-s<seed>-<hash "
            "of the config>, a new -v<n> for each new fit; '': default_root_dir itself",
        )
        parser.link_arguments("data.num_classes", "model.init_args.num_classes", apply_on="instantiate")
        parser.link_arguments("data.input_shape", "model.init_args.input_shape", apply_on="instantiate")
        parser.add_lightning_class_args(RoundCheckpoint, "checkpoint")  # (written whole or not at all)
        parser.add_lightning_class_args(CommunicationBytes, "comm")
        parser.add_lightning_class_args(PerClassAccuracy, PerClassAccuracy.cli_group)
        parser.add_lightning_class_args(PartitionReport, "partition_report")
        parser.add_lightning_class_args(GradientDissimilarity, GradientDissimilarity.cli_group)
        parser.add_lightning_class_args(SplitGuard, SplitGuard.cli_group)
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
                        "class_path": "lightning_sfl.run_folder.ContinuingCSVLogger",  # <run folder>/csv/metrics.csv
                        "init_args": {"save_dir": "runs", "name": "csv"},
                    },
                ],
            }
        )

    @override
    def _instantiate_trainer(self, config: dict, callbacks: list) -> L.Trainer:
        """Check the data first: the dataset is loaded and the partition built before the trainer exists, so a
        missing dataset or an impossible partition is a one-line error and the run creates nothing (no folder,
        checkpoint or W&B run); so is a setting the method's schedule refuses (GAS with the inversion regulariser,
        Semi-SFL without a labelled set), or one it refuses of the system model (``check_system``). Then the
        round-level progress bar, unless progress bars are off or the user configured one."""
        if self.datamodule is not None:
            self.datamodule.check()
            self._check_checkpoint_fits(config)
        if self.model is not None and self.datamodule is not None:  # a setting the schedule refuses: before the trainer
            self.model.schedule.check(self.datamodule.client_stats)
        clock = (self.config_init.get(self.subcommand) or {}).get("clock") if self.subcommand else None
        if self.model is not None and clock is not None:  # what the method refuses of the system model (--clock.*)
            self.model.check_system(clock)
        user = config.get("callbacks") or []
        user = user if isinstance(user, list) else [user]
        if config.get("enable_progress_bar", True) is not False and not any(isinstance(c, ProgressBar) for c in user):
            callbacks = [*callbacks, RoundProgressBar()]
        callbacks = [*callbacks, SimulatedClock()]  # logs the times of the system model (--clock.*)
        if config.get("enable_checkpointing") is False:  # --trainer.enable_checkpointing false: no --checkpoint.*
            callbacks = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
        try:
            trainer = super()._instantiate_trainer(config, callbacks)
        except (MisconfigurationException, ValueError, ImportError) as exc:  # Lightning refuses the trainer's
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__  # settings (an
            if isinstance(exc, ImportError):  # accelerator or strategy this machine cannot run), before any run
                reason = lacking_package_line(config, reason)
            raise ConfigError(f"trainer: {reason}") from None
        several = trainer.world_size > 1 and self._command == "fit"
        refused = self.model.one_process_only() if self.model is not None and several else None
        if refused is not None:  # before DDP starts its processes (each would refuse it at setup, after a start)
            raise ConfigError(
                f"{refused} runs on one process; --trainer.devices {trainer.num_devices} and --trainer.num_nodes "
                f"{trainer.num_nodes} would start {trainer.world_size} (give --trainer.devices 1"
                f"{' --trainer.num_nodes 1' if trainer.num_nodes > 1 else ''})"
            )
        if isinstance(trainer.accelerator, CUDAAccelerator):  # on the CPU torch's setting would switch oneDNN to TF32
            torch.set_float32_matmul_precision(self.config.get(self.subcommand, self.config)["matmul_precision"])
        self.placement.claim()
        return trainer

    @override
    def before_instantiate_classes(self) -> None:
        config = self.config.get(self.subcommand, self.config)
        recorded = config.clone()  # the command's own settings, before the run is placed: what config.yaml records
        key = run_key(config)
        check_trainer_settings(config.get("trainer", {}))
        folders = [("trainer.default_root_dir", config.get("trainer", {}).get("default_root_dir"))]
        if self._command == "fit":  # (an evaluation writes no checkpoint: the fit's folder may be read-only)
            folders.append(("checkpoint.dirpath", (config.get("checkpoint") or {}).get("dirpath")))
        for name, folder in folders:
            check_output_folder(name, folder)
        set_memory_budget(config.get("client_state_memory", DEFAULT_MEMORY_BUDGET / 2**20) * 2**20)
        threads = config.get("torch_threads")
        if threads is not None:
            cores = os.cpu_count() or 1
            if not 1 <= threads <= cores:  # (torch starts every thread it is told to: 10**5 of them exhaust memory)
                raise ConfigError(f"torch_threads={threads} must be in [1, {cores}] (this machine's cores), or null "
                                  "for torch's default")  # fmt: skip
            torch.set_num_threads(threads)
        loggers = config.get("trainer", {}).get("logger")
        loggers = [lg for lg in (loggers if isinstance(loggers, list) else [loggers]) if lg not in (None, True, False)]
        for lg in loggers:  # a folder the user gave a logger: one line now, not its traceback when it first writes
            save_dir = (getattr(lg, "init_args", None) or {}).get("save_dir")
            if save_dir not in UNPLACED:
                check_output_folder("trainer.logger.save_dir", save_dir)
        filename = (config.get("checkpoint") or {}).get("filename")
        if filename and ("/" in str(filename) or os.sep in str(filename)):  # (the run's checkpoints stay in dirpath)
            raise ConfigError(f"checkpoint.filename={filename!r} must be a file name (no '/'): the checkpoints go in "
                              "checkpoint.dirpath")  # fmt: skip
        wandb_loggers = [lg for lg in loggers if str(getattr(lg, "class_path", "")).endswith("WandbLogger")]
        lightnings = [lg for lg in wandb_loggers if not str(lg.class_path).startswith("lightning_sfl.")]
        if lightnings and wandb_switch() is None:  # nothing says otherwise: no account needed
            for lg in lightnings:  # (ours decides so in its own W&B process: offline=None)
                lg.init_args.offline = True
        self._go_offline_if_unreachable(wandb_loggers)
        args = self._args if self._args is not None else sys.argv[1:]
        self.placement = RunPlacement(self._command, RunPlacement.argv_of(args))
        resumed = self._resumed = self.placement.choose(config, key)
        if self.evaluated is not None:
            recorded.ckpt_path = str(self.evaluated.checkpoint)
        else:
            for argument in ("ckpt_path", "weights_only"):  # fit's own arguments, not settings: config.yaml starts a
                recorded.pop(argument, None)  # new run (with --ckpt_path last: continues the latest); compare reads it
        self.save_config_kwargs["recorded"] = recorded
        self.placement.place_loggers(config, loggers)
        if not loggers:  # Lightning would write the resolved config to default_root_dir, shared by every run
            self.save_config_kwargs["config_filename"] = str((self.run_folder / "config.yaml").resolve())
        if self.subcommand == "fit" and resumed is not None:
            continuing = [lg for lg in loggers if str(getattr(lg, "class_path", "")).endswith("ContinuingCSVLogger")]
            csv_logs = [Path(lg.init_args.save_dir) / str(lg.init_args.get("name") or "") / "metrics.csv"
                        for lg in continuing]  # fmt: skip
            self.placement.continue_run(config, resumed, wandb_loggers, csv_logs, trim=self.placement.chooses)
        elif self.subcommand == "fit" and config.get("ckpt_path") and str(config.get("ckpt_path")) not in SPECIAL:
            check_rounds_to_resume(check_checkpoint(config.ckpt_path), config.get("trainer", {}).get("max_epochs"))

    def _check_checkpoint_fits(self, config: dict) -> None:
        """The checkpoint this command starts from (a given ``--ckpt_path``, or what ``last`` found) holds a model of
        the classes and inputs of this configuration's data, else one line naming the data options of the fit
        (:func:`~lightning_sfl.checkpoint.check_fits_data`), not Lightning's size-mismatch traceback."""
        given = self.config.get(self.subcommand, self.config).get("ckpt_path")
        path = self._resumed if given is None or str(given) in SPECIAL else given
        if path is None:
            return
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        data = self.datamodule
        where = f"ckpt_path={str(path)!r}"
        check_fits_data(ckpt, where, data.num_classes, data.input_shape, dict(data.hparams))

    def _go_offline_if_unreachable(self, wandb_loggers: list) -> None:
        """W&B loggers that would start an online run where W&B cannot be reached (no network, no server, no API key;
        :func:`~lightning_sfl.wandb.online.offline_reason`, a few seconds at most) log offline instead: nothing is lost,
        and one line says why (printed when the command starts, ``_say_offline``)."""
        from lightning_sfl.wandb.online import logs_online, offline_line, offline_reason

        online = [lg for lg in wandb_loggers if logs_online(lg.init_args.get("offline"))]
        reason = offline_reason() if online and first_process() else None
        if reason is not None:
            for lg in online:
                lg.init_args.offline = True
            self._offline_line = offline_line(reason)

    def _say_offline(self) -> None:
        if self._offline_line and self.trainer.is_global_zero:
            print(self._offline_line, file=sys.stderr, flush=True)

    @property
    def _command(self) -> str:
        """The subcommand; ``fit`` for a CLI made with ``run=False`` (whose trainer the caller runs)."""
        return self.subcommand or "fit"

    def before_validate(self) -> None:
        """Say which run and round is evaluated (``validating runs/… (round 100 of 100)``)."""
        self._say_offline()
        if self.trainer.is_global_zero:
            print(self.evaluated.line("validating"), flush=True)

    def before_test(self) -> None:
        self._say_offline()
        if self.trainer.is_global_zero:
            print(self.evaluated.line("testing"), flush=True)

    def before_fit(self) -> None:
        """The fit's federation, built before anything is written (a bad combination of method, data and system model
        is a one-line error here): the method, the data module and the system model of ``--clock.*``. Then where the
        run lives."""
        system = self.config_init[self.subcommand].get("clock")
        Federation.build(self.model, self.datamodule, system=system)
        self._say_offline()
        if self.trainer.is_global_zero and self.placement.held:
            if self.placement.note:  # (a damaged last.ckpt, or a run with no checkpoint started anew)
                print(self.placement.note, flush=True)
            print(f"run folder: {shown_path(self.run_folder)}", flush=True)

    @override
    def _parse_ckpt_path(self) -> None:
        """Check a given checkpoint safely before its hyperparameters are read (one-line errors for missing,
        truncated, foreign or other-algorithm checkpoints, and for class paths the library does not know:
        :func:`~lightning_sfl.checkpoint.check_checkpoint`), then take its hyperparameters over the config, as
        Lightning does, with every class path one of the library's (nothing is imported on the checkpoint's word).
        ``last`` is found and checked when the run is placed (:class:`~lightning_sfl.run_placement.RunPlacement`);
        Lightning's own reading (which would load a file named ``last`` in the working folder) never runs."""
        sub = self.config.get("subcommand")
        ckpt = self.config[sub].get("ckpt_path") if sub else None
        if ckpt is None or str(ckpt) in SPECIAL:
            return None
        model = self.config[sub].get("model")
        expected = getattr(model, "class_path", None) if model is not None else None
        loaded = check_checkpoint(ckpt, expected_class=expected)
        hparams = {k: v for k, v in (loaded.get("hyper_parameters") or {}).items() if not k.startswith("_")}
        if not hparams:
            return None
        cls = checkpoint_method(loaded)
        hparams = legacy_hyperparameters(cls, hparams) if cls is not None else hparams
        written = {"class_path": algorithm_path(cls), "dict_kwargs": hparams} if cls is not None else hparams
        self.config = self.parser.parse_object({sub: {"model": written}}, self.config)
        return None

    @override
    def _run_subcommand(self, subcommand: str) -> None:
        """Lightning's, with Ctrl-C and SIGTERM (how SLURM and Kubernetes preempt a job) ending in one line: Lightning
        stops at the next step, drops the unfinished round (no checkpoint is written mid-round) and tears down; the
        last finished round's checkpoint stays, and the same command with ``--ckpt_path last`` continues exactly.
        Raises :class:`~lightning_sfl.errors.RunInterrupted` (exit code 130 for Ctrl-C, 143 for SIGTERM)."""
        seed = self.config.get(subcommand, self.config).get("seed_everything")
        if seed is not False:
            rank_zero_info(f"Seed set to {seed}")
        try:
            super()._run_subcommand(subcommand)
        except (KeyboardInterrupt, SystemExit) as exc:
            if not self.trainer.interrupted and not isinstance(exc, KeyboardInterrupt):
                raise
            sigterm = self.trainer.received_sigterm
            raise RunInterrupted(self._interrupted_line(subcommand, "SIGTERM" if sigterm else "Ctrl-C"), 143 if sigterm
                                 else 130) from None  # fmt: skip
        except Exception as exc:
            diverged = reported_cause(exc)
            if subcommand != "fit" or not isinstance(diverged, NonFiniteError):
                raise
            kept = kept_checkpoint(self.trainer.checkpoint_callback, self.trainer.is_global_zero)
            raise NonFiniteError(f"{diverged}; stopped, {kept or 'no checkpoint was written yet'}") from None

    def _interrupted_line(self, subcommand: str, cause: str) -> str:
        line = f"interrupted ({cause}) in round {self.trainer.current_epoch + 1}"
        if subcommand != "fit":
            return line
        kept = kept_checkpoint(self.trainer.checkpoint_callback, self.trainer.is_global_zero)
        if kept is None:
            return f"{line}; no round had finished: nothing to continue"
        return f"{line}; {kept}: continue with the same command and --ckpt_path last"

    def after_fit(self) -> None:
        """Where the run's records went (``_saved_line``), then its result last: the final test accuracy of the
        global model."""
        if self.trainer.interrupted or not self.trainer.is_global_zero:
            return
        metrics = self.trainer.callback_metrics
        # the rounds trained: the trainer's epochs, or (ddp_spawn: the fit ran in other processes, whose metrics come
        # back but not their epoch counter) the round of the last evaluation
        rounds = max(self.trainer.current_epoch, int(float(metrics.get("round", 0))))
        if "test/acc" not in metrics or int(float(metrics.get("round", -1))) != rounds:
            metrics = self.trainer.validate(self.model, datamodule=self.datamodule, verbose=False)[0]
        print(self._saved_line(), flush=True)
        rounds_said = f"{rounds} round{'s' * (rounds != 1)}"
        print(f"final test accuracy: {float(metrics['test/acc']):.4f} after {rounds_said}", flush=True)

    def after_validate(self) -> None:
        self._say_evaluated()

    def after_test(self) -> None:
        self._say_evaluated()

    def _say_evaluated(self) -> None:
        """``validate``/``test``: where the records went, then the result last (the test accuracy and the round of
        the checkpoint)."""
        if not self.trainer.is_global_zero:
            return
        metrics = self.trainer.callback_metrics
        print(self._saved_line(), flush=True)
        if "test/acc" in metrics:
            rounds = int(float(metrics.get("round", self.evaluated.rounds or 0)))
            print(f"test accuracy: {float(metrics['test/acc']):.4f} at round {rounds}", flush=True)

    def _saved_line(self) -> str:
        """:func:`~lightning_sfl.run_placement.saved_line` of this command (a fit's last checkpoint included)."""
        callback = self.trainer.checkpoint_callback
        checkpoint = (getattr(callback, "last_model_path", "") or getattr(callback, "best_model_path", "")) or None
        return saved_line(self.run_folder, checkpoint if self._command == "fit" else None, self.trainer.loggers)


class _ParseOnly(SFLCLI):
    """The CLI's parser and parsing, nothing instantiated (see :func:`resolved_config`)."""

    @override
    def _set_seed(self) -> None:
        pass

    @override
    def before_instantiate_classes(self) -> None:
        pass

    @override
    def instantiate_classes(self) -> None:
        pass


def _parser_line(exc: BaseException) -> str:
    """The parser's error in one line, with how to give an option that became a defence."""
    return moved_option_hint(parser_error_line(str(exc)))


def resolved_config(args: list[str], instantiate: bool = False) -> dict:
    """The configuration ``lightning-sfl fit ARGS`` would run, as jsonargparse resolves it (what ``--print_config``
    prints: configs merged in order, a new ``--model`` class keeps only the ``init_args`` it accepts), as a plain
    dict without the ``fit`` level. Nothing is instantiated unless ``instantiate`` (see :func:`check_by_instantiating`).
    A bad setting raises :class:`~lightning_sfl.errors.ConfigError` with the parser's message in one line."""
    import yaml

    try:
        cli = _ParseOnly(args=resolve_algorithm_names(list(args)), run=False)
    except argparse.ArgumentError as exc:
        raise ConfigError(with_config_file(_parser_line(exc), list(args))) from None
    if instantiate:
        check_by_instantiating(cli)
    return yaml.safe_load(cli.parser.dump(cli.config, skip_none=False)) or {}


def check_by_instantiating(cli: SFLCLI) -> None:
    """Build what ``fit`` would build from ``cli.config`` but the trainer and its loggers: the data module (its dataset
    is loaded, for the links), the model (and its schedule) and the callbacks, so that a value only their
    constructors check (e.g. ``--model.lr=-1``) or a missing dataset is a
    :class:`~lightning_sfl.errors.ConfigError` now, before a caller writes anything. Errors that are not the user's
    propagate as they are."""
    config = cli.config.clone()
    config.trainer.logger = None  # a logger may start something (W&B's process): not needed to check settings
    try:
        built = cli.parser.instantiate_classes(config)
        built.model.schedule.check(
            built.data.client_stats
        )  # what the schedule refuses (GAS with the inversion regulariser)
        if built.get("clock") is not None:  # and what the method refuses of the system model
            built.model.check_system(built.clock)
    except Exception as exc:
        found = user_error_line(exc)
        if found is None:
            raise
        raise ConfigError(found[0]) from None


def evaluated_of_fit(args: list[str], command: str = "attack") -> Evaluated:
    """``--ckpt_path last`` for commands outside the LightningCLI (``attack``): the ``last.ckpt`` of the latest ``fit``
    run with ``args`` (its configs and options: what names its run folder) that reached the ``trainer.max_epochs`` they
    name (else the latest, and :attr:`~lightning_sfl.run_folder.Evaluated.fallback` says so); a one-line error when
    there is none."""
    try:
        config = _ParseOnly(args=resolve_algorithm_names(list(args)), run=False).config
    except argparse.ArgumentError as exc:
        raise ConfigError(_parser_line(exc)) from None
    root, name = named_run(config, run_key(config))
    dirpath = (config.get("checkpoint") or {}).get("dirpath")
    return evaluated_checkpoint("last", root, name, config.get("trainer", {}).get("max_epochs"), dirpath, command)


def run(args: list[str] | None = None) -> None:
    """``fit``/``validate``/``test`` with ``args`` (default ``sys.argv[1:]``); see :func:`lightning_sfl.cli.main`.

    Bad settings, missing datasets, unreadable checkpoints and NaN/Inf in training end the command with one
    line on stderr (exit code 2 for settings, 1 for NaN/Inf) instead of a traceback. W&B's own messages go to its
    folder (:data:`~lightning_sfl.wandb.process.messages_to_file`): the last lines are the command's.

    One of several processes a launcher started for one run (torchrun, ``srun``: :func:`~lightning_sfl.run_folder.join`)
    that stops before the run started tells the others why, and they stop too, each with one line naming it."""
    from lightning_sfl.wandb import process as wandb_process

    wandb_process.messages_to_file = True
    try:
        join()  # one of several processes a launcher started: rank 0 serves their rendezvous from now on
        if args is None:  # LightningCLI reads sys.argv itself (and warns if it is given both)
            sys.argv[1:] = resolve_algorithm_names(sys.argv[1:])
            SFLCLI()
        else:
            SFLCLI(args=resolve_algorithm_names(list(args)))
    except argparse.ArgumentError as exc:  # the parser's own messages, without its usage dump
        line = with_config_file(_parser_line(exc), sys.argv[1:] if args is None else list(args))
        print(f"error: {line}", file=sys.stderr)
        _tell_others(line)
        raise SystemExit(2) from None
    except RunInterrupted as exc:
        _end_wandb_runs(exc.exit_code)
        if first_process():
            print(str(exc), file=sys.stderr)
        _tell_others(str(exc))
        raise SystemExit(exc.exit_code) from None
    except Exception as exc:
        found = user_error_line(exc)
        if found is None:
            _tell_others(f"{type(exc).__name__} (its traceback is in its output)")
            raise
        _end_wandb_runs(found[1])
        print(f"error: {found[0]}", file=sys.stderr)
        _tell_others(found[0])
        raise SystemExit(found[1]) from None
    except KeyboardInterrupt:  # (before the trainer runs: Lightning's own handling turns a later one into the above)
        _tell_others("interrupted (Ctrl-C)")
        raise
    finally:
        leave()


def _tell_others(line: str) -> None:
    """This process stops before its run started: the other processes of the run stop too, each with one line
    naming this one and ``line`` (:meth:`~lightning_sfl.run_folder.Rendezvous.stopped`), instead of waiting for it."""
    rendezvous = joined()
    if rendezvous is not None:
        rendezvous.stopped(line)


def _end_wandb_runs(exit_code: int) -> None:
    """Before a command's error or interruption line: every W&B run of this process ends now, with ``exit_code``
    (its worker's messages go to its folder; Lightning's in-process logger prints W&B's summary now, before the
    line), so that nothing of W&B's follows the command's last line."""
    from lightning_sfl.wandb import process as wandb_process

    wandb_process.finish_all(exit_code)
    wandb = sys.modules.get("wandb")  # (imported only if a W&B logger ran in this process)
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.run.finish(exit_code=exit_code)
