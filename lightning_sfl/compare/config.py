"""Configs and the run plan: each method's config as the CLI's own parser resolves it (the base configs, then
``--model <class>``, which keeps only the ``init_args`` that class accepts, then the overrides it accepts),
checking the overrides, and laying out one run folder (``run_config.yaml``, ``command.txt``, ``fit`` arguments)
per method × seed, with the name, group and tags of its W&B run (:func:`wandb_env`)."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

#: Arguments the runner sets itself for every run; overriding them would break the comparison (the loggers: a CSV log
#: that the comparison reads, and W&B's run unless ``--wandb false``).
RESERVED_OVERRIDES = ("seed_everything", "data.seed", "trainer.logger", "trainer.default_root_dir", "config")
#: Model arguments filled in from the data module by the CLI (not listed in the settings).
LINKED_MODEL_ARGS = ("num_classes", "input_shape")
#: Folder of a run's Lightning logs (``metrics.csv``, resolved ``config.yaml``, checkpoints) inside its run folder.
LOG_SUBDIR = "logs"
FIT_FLAGS = ("--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false")


# ====================================================================== methods
def resolve_method(name: str) -> type:
    """A registered name (``lightning_sfl.algorithms.ALGORITHMS``) or a dotted class path."""
    from lightning_sfl.algorithms import ALGORITHMS, SplitFedAlgorithm

    if name in ALGORITHMS:
        return ALGORITHMS[name]
    module, _, attr = name.rpartition(".")
    cls = None
    if module:
        with contextlib.suppress(ImportError, AttributeError):
            cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, SplitFedAlgorithm)):
        raise ValueError(
            f"unknown method {name!r}: not one of {', '.join(ALGORITHMS)} nor the path of a SplitFedAlgorithm class"
        )
    return cls


def known_method(name: str) -> type | None:
    """The method ``name`` names if the library knows it without importing anything on its word (a registered name,
    a library class path, or a class the command line imported: :func:`~lightning_sfl.known.known_class`); for names
    read from a file (a comparison's ``results.md``)."""
    from lightning_sfl.algorithms import ALGORITHMS, SplitFedAlgorithm
    from lightning_sfl.known import known_class

    return known_class(name, SplitFedAlgorithm, ALGORITHMS)


def class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def unused_options(cls: type) -> dict[str, str]:
    """The options ``cls`` has no use for (``SplitFedAlgorithm.unused_options``: refused other than at their defaults),
    which a config shared by several methods may set for the others: each method's config leaves them out."""
    return getattr(cls, "unused_options", dict)()


def unused_settings(cls: type, init_args: dict) -> dict[str, object]:
    """The options of ``init_args`` (a resolved config's) that ``cls`` has no use for, set to other than their
    defaults: option -> its default."""
    from lightning_sfl.runtime.options import option_defaults

    defaults = option_defaults(cls)
    return {k: defaults.get(k) for k in unused_options(cls) if k in init_args and init_args[k] != defaults.get(k)}


def init_parameters(cls: type) -> set[str]:
    """Keyword arguments ``cls(...)`` accepts (:func:`~lightning_sfl.runtime.options.option_parameters`)."""
    from lightning_sfl.runtime.options import option_parameters

    return set(option_parameters(cls))


# ====================================================================== configs
def resolve_config(configs: Sequence[str | os.PathLike], args: Sequence[str] = (), check: bool = False) -> dict:
    """What ``lightning-sfl fit --config C1 --config C2 ... ARGS`` would run, resolved by the CLI's own parser
    (jsonargparse: configs merged in order; a ``--model`` of another class keeps only the ``init_args`` it
    accepts). A bad setting raises ``ValueError`` with the parser's one-line message; with ``check``, also one that
    only a constructor checks (the data module, with its dataset loaded, the model and the callbacks are built)."""
    from lightning_sfl.lightning_cli import resolved_config

    return resolved_config([tok for c in configs for tok in ("--config", str(c))] + list(args), instantiate=check)


def non_model_overrides(tokens: Sequence[str]) -> list[str]:
    """The override tokens that are not ``--model.*`` options (those apply per method)."""
    return [tok for item in group_overrides(tokens) if not _override_key(item).startswith("model.") for tok in item]


def method_config(
    configs: Sequence[str | os.PathLike], base: dict, cls: type, overrides: Sequence[str], check: bool = False
) -> tuple[dict, list[str]]:
    """The resolved config of one method: the configs, ``--model <cls>`` and the overrides ``cls`` accepts, with the
    options it has no use for (:func:`unused_options`, which it refuses) at their defaults; also what was dropped as
    not accepted by ``cls`` (``model.init_args.*`` of the base config and ``--model.*`` overrides). ``check``: see
    :func:`resolve_config`."""
    kept, dropped_overrides = method_overrides(overrides, cls)
    args = ["--model", class_path(cls), *kept]
    config = resolve_config(configs, args)
    unused = unused_settings(cls, (config.get("model") or {}).get("init_args") or {})
    # options it refuses, at their defaults (a string as it is: a str option keeps JSON's quotes as part of its value)
    defaults = [tok for k, v in unused.items() for tok in (f"--model.{k}", v if isinstance(v, str) else json.dumps(v))]
    if unused or check:
        config = resolve_config(configs, args + defaults, check=check)
    accepted = set((config.get("model") or {}).get("init_args") or {}) - set(unused)
    base_args = (base.get("model") or {}).get("init_args") or {}
    dropped = [f"model.init_args.{k}" for k in base_args if k not in accepted]
    return config, dropped + [f"model.init_args.{k}" for k in unused if k not in base_args] + dropped_overrides


# ====================================================================== overrides
def group_overrides(tokens: Sequence[str]) -> list[list[str]]:
    """Split override tokens into options: ``['--a=1', '--b', '2'] -> [['--a=1'], ['--b', '2']]``."""
    items: list[list[str]] = []
    for tok in tokens:
        if tok.startswith("--") or not items:
            items.append([tok])
        else:
            items[-1].append(tok)
    return items


def _override_key(item: Sequence[str]) -> str:
    """``model.lr`` of ``--model.lr=0.1``; ``model.defences`` of ``--model.defences+=NoPeek`` (an item appended)."""
    return item[0].removeprefix("--").split("=", 1)[0].removesuffix("+")


def check_overrides(tokens: Sequence[str]) -> None:
    """Reject overrides of what the runner sets itself (seeds, the method, the logger, the configs)."""
    for item in group_overrides(tokens):
        if not item[0].startswith("--"):
            raise ValueError(f"override {item[0]!r} is not an option (expected --key=value or --key value)")
        key = _override_key(item)
        if key in ("model", "model.class_path") or any(key == r or key.startswith(r + ".") for r in RESERVED_OVERRIDES):
            raise ValueError(
                f"--{key} cannot be overridden: the runner sets the method (--methods), the seeds (--seeds, used for "
                "--seed_everything and --data.seed), the logger and output folders, and the configs (--config)"
            )


def method_overrides(tokens: Sequence[str], cls: type) -> tuple[list[str], list[str]]:
    """The override tokens that apply to ``cls``, and the ``--model.*`` options dropped as not accepted (or of no use
    to it: :func:`unused_options`)."""
    accepted = init_parameters(cls) - set(unused_options(cls))
    kept: list[str] = []
    dropped: list[str] = []
    for item in group_overrides(tokens):
        key = _override_key(item)
        if key.startswith("model."):
            name = key.removeprefix("model.").removeprefix("init_args.").split(".")[0]
            if name not in accepted:
                dropped.append(" ".join(item))
                continue
        kept.extend(item)
    return kept, dropped


# ====================================================================== run plan
@dataclass
class RunSpec:
    method: str
    seed: int
    run_dir: Path
    fit_args: list[str]
    #: the run already finished earlier with exactly this config and command (``--reuse``): not run again
    reuse: bool = False
    #: the run started earlier with exactly this config and command and did not finish (``--reuse``): continued from
    #: its last checkpoint (``fit --ckpt_path last``: its CSV log continued, the rounds after the checkpoint dropped)
    resume: bool = False
    #: W&B's variables for the run (:func:`wandb_env`): its name, group and tags (``None``: the variable removed)
    env: dict[str, str | None] = field(default_factory=dict)


@dataclass
class Plan:
    runs: list[RunSpec]
    classes: dict[str, str]  # method -> class path
    dropped: dict[str, list[str]]  # method -> dropped config init_args and overrides
    base: dict  # the configs (and the non-model overrides) resolved, before any method is set
    configs: dict[str, dict] = field(default_factory=dict)  # method -> its resolved run config

    def __add__(self, other: Plan) -> Plan:
        """Both plans' methods and runs (this one's first); they share ``base``."""
        return Plan(
            self.runs + other.runs,
            {**self.classes, **other.classes},
            {**self.dropped, **other.dropped},
            self.base,
            {**self.configs, **other.configs},
        )


def _dir_name(method: str) -> str:
    """One folder name of ``method`` (never ``.``, ``..`` or a path).

    >>> _dir_name("scala"), _dir_name("../x"), _dir_name("..")
    ('scala', '.._x', '_.')
    """
    name = re.sub(r"[^\w.-]", "_", method)
    return "_" + name[1:] if name in (".", "..") else name


def fit_args(run_config: Path, seed: int, run_dir: Path, wandb: bool = True) -> list[str]:
    """Arguments of ``lightning-sfl fit`` for one run: its resolved config (overrides included), the seed, a CSV
    logger into ``run_dir/logs`` (what the comparison reads; first, so Lightning's ``config.yaml`` goes beside it)
    and, with ``wandb``, the CLI's default W&B logger into ``run_dir`` (offline unless W&B's own switches say
    otherwise; named, tagged and grouped by the CLI as a fit's run, :func:`wandb_env`); no progress bar."""
    loggers = [
        "--trainer.logger=lightning_sfl.run_folder.ContinuingCSVLogger",  # <run_dir>/logs/metrics.csv, continued
        f"--trainer.logger.save_dir={run_dir}",
        f"--trainer.logger.name={LOG_SUBDIR}",
    ]
    if wandb:  # save_dir = default_root_dir: the CLI names, tags and groups it as a fit's (lightning_cli.py)
        loggers += [
            "--trainer.logger+=lightning_sfl.wandb.logger.WandbLogger",
            f"--trainer.logger.save_dir={run_dir}",
            "--trainer.logger.project=lightning-sfl",
        ]
    return [
        "fit",
        "--config",
        str(run_config),
        f"--seed_everything={seed}",
        f"--data.seed={seed}",
        *loggers,
        f"--trainer.default_root_dir={run_dir}",
        "--run_name=",  # the trial's folder is the run folder
        f"--checkpoint.dirpath={run_dir / LOG_SUBDIR / 'checkpoints'}",
        *FIT_FLAGS,
    ]


def wandb_env(config: dict, seed: int, comparison: str) -> dict[str, str | None]:
    """W&B's variables for the run of ``config`` (a method's resolved config) with ``seed`` in the comparison named
    ``comparison``: its name, read as a fit's run folder is, ``<method>-<dataset>-<partition>-s<seed>-<key>`` but with
    its group's ``key`` (a fit's folder has the hash of its whole configuration, seeds included), its group, the same
    for every seed of the method (``WANDB_RUN_GROUP`` if set, else
    :func:`~lightning_sfl.run_folder.seeds_group`: ``<method>-<dataset>-<partition>-<key>``, ``key`` a hash of the
    setting without its seeds), and the tag ``compare-<comparison>`` after those of ``WANDB_TAGS``; the CLI adds the
    method, dataset, partition and seed tags as for any fit.

    >>> cfg = {"model": {"class_path": "x.SCALA"}, "data": {"dataset": "digits", "partition": "iid", "seed": 0}}
    >>> env = wandb_env(cfg, 3, "study")
    >>> env["WANDB_NAME"].startswith("scala-digits-iid-s3-"), env["WANDB_RUN_GROUP"].startswith("scala-digits-iid-")
    (True, True)
    >>> env["WANDB_NAME"].endswith(env["WANDB_RUN_GROUP"].rsplit("-", 1)[1]), env["WANDB_TAGS"]
    (True, 'compare-study')
    """
    from lightning_sfl.run_folder import run_name, seeds_group

    group = seeds_group(config)
    name = run_name({**config, "seed_everything": seed}, group.rsplit("-", 1)[1])
    tags = [t for t in os.environ.get("WANDB_TAGS", "").split(",") if t] + [f"compare-{comparison}"]
    return {
        "WANDB_NAME": name,
        "WANDB_RUN_GROUP": os.environ.get("WANDB_RUN_GROUP") or group,
        "WANDB_TAGS": ",".join(dict.fromkeys(tags)),
        "WANDB_RUN_ID": None,  # a run id of the environment would make every trial one run
    }


#: Written into a run folder when its ``fit`` finished without error (see ``--reuse``).
DONE_MARKER = "done"


def _write_run_dir(spec: RunSpec, run_config: Path, config: dict, header: str, reuse: bool = False) -> None:
    """A fresh run folder with the run's config (``run_config.yaml``) and ``fit`` command (``command.txt``);
    with ``reuse``, a folder of the same config and command is kept: a finished run's (``spec.reuse``), or an
    unfinished one's with a checkpoint, to be continued from it (``spec.resume``)."""
    text = header + yaml.safe_dump(config, sort_keys=False)
    command = "lightning-sfl " + shlex.join(spec.fit_args) + "\n"
    if reuse and run_config.is_file() and (spec.run_dir / "command.txt").is_file():
        if run_config.read_text() == text and (spec.run_dir / "command.txt").read_text() == command:
            if (spec.run_dir / DONE_MARKER).exists():
                spec.reuse = True
                return
            if (spec.run_dir / LOG_SUBDIR / "checkpoints" / "last.ckpt").is_file():
                spec.resume = True
                return
    if spec.run_dir.exists():
        shutil.rmtree(spec.run_dir)
    spec.run_dir.mkdir(parents=True)
    run_config.write_text(text)
    (spec.run_dir / "command.txt").write_text(command)


def plan_runs(
    configs: Sequence[str | os.PathLike],
    methods: Sequence[str],
    seeds: Sequence[int],
    out: Path,
    overrides: Sequence[str] = (),
    write: bool = True,
    reuse: bool = False,
    wandb: bool = True,
) -> Plan:
    """Resolve methods, write one ``run_config.yaml`` per run (if ``write``: ``out`` is made first, a one-line
    :class:`~lightning_sfl.errors.ConfigError` if it cannot be) and build the ``fit`` arguments (with a W&B run
    if ``wandb``)."""
    if len(set(methods)) != len(methods):
        raise ValueError(f"duplicate methods in {list(methods)}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"duplicate seeds in {list(seeds)}")
    check_overrides(overrides)
    base = resolve_config(configs, non_model_overrides(overrides))
    out = Path(out).absolute()
    runs, classes, dropped, configs_of = [], {}, {}, {}
    for method in methods:  # every config resolved and its run built (so checked) before any folder is written
        cls = resolve_method(method)
        configs_of[method], dropped[method] = method_config(configs, base, cls, overrides, check=write)
        classes[method] = class_path(cls)
    if write:
        from lightning_sfl.trials.folders import create_output_folder

        create_output_folder("--out", out)
    for method in methods:
        header = f"# generated by lightning-sfl compare: method {method}, from {', '.join(map(str, configs))}\n"
        for seed in seeds:
            run_dir = out / "runs" / _dir_name(method) / f"seed{seed}"
            run_config = run_dir / "run_config.yaml"
            env = wandb_env(configs_of[method], seed, out.name) if wandb else {}
            spec = RunSpec(method, seed, run_dir, fit_args(run_config, seed, run_dir, wandb), env=env)
            if write:
                _write_run_dir(spec, run_config, configs_of[method], header, reuse)
            runs.append(spec)
    return Plan(runs, classes, dropped, base, configs_of)
