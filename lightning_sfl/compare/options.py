"""The ``lightning-sfl compare`` command line: its parser, the split of the ``fit`` overrides from the compare
options, validation (:func:`parse_args`) and the inverse, the command that reproduces parsed arguments
(:func:`command_line`)."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from lightning_sfl.errors import MAX_SEED, OneLineArgumentParser, check_output_folder
from lightning_sfl.trials.options import LAUNCHER_OPTIONS, add_launcher_arguments, launcher_of, slurm_parameters

from .config import check_overrides, resolve_method

OPTIONS = (
    "--config",
    "--methods",
    "--seeds",
    "--out",
    "--target_acc",
    "--jobs",
    "--overrides",
    "--keep_checkpoints",
    "--reuse",
    "--add",
    "--wandb",
    *LAUNCHER_OPTIONS,
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="lightning-sfl compare",
        description="Train several split-FL methods over several seeds on one config; write metrics.csv, "
        "results.md (one row per method) and accuracy.png into --out.",
        epilog="Overrides are passed to every `lightning-sfl fit` run; they run up to the next compare option (or "
        "give them after `--`). `--model.*` overrides a method's class does not accept are dropped for it.",
    )
    parser.add_argument(
        "--config", action="append", required=True, metavar="YAML", help="base config (repeat to merge several)"
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        default=None,
        metavar="NAME",
        help="registered names (lightning_sfl.algorithms.ALGORITHMS) or class paths; default: every registered method "
        "of the synchronous families, split and fl (name the asynchronous ones, which count rounds differently, and "
        "the semi-supervised ones, which need --data.labelled_per_class)",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], metavar="SEED", help="seeds (default: 0)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument(
        "--target_acc",
        type=float,
        nargs="+",
        default=None,
        metavar="FRACTION",
        help="test accuracies (fractions) to reach: rounds, simulated time and traffic until each",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs at the same time, each with --torch_threads 1 when > 1 (in warm workers that import once; see "
        "--launcher); methods given as class paths must be importable by the workers",
    )
    add_launcher_arguments(parser)
    parser.add_argument("--keep_checkpoints", action="store_true", help="keep each run's checkpoints")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="do not run again the runs of --out that finished with the same config and command "
        "(delete a run's folder to redo it), continue those that did not finish from their last checkpoint; "
        "the report covers all runs",
    )
    parser.add_argument(
        "--add",
        action="store_true",
        help="add --methods to the comparison already in --out (made by the same command but for the methods): "
        "the other methods' runs in its metrics.csv are kept, not run again, and the report covers all",
    )
    parser.add_argument(
        "--wandb",
        choices=["true", "false"],
        default="true",
        help="log each run, and the comparison itself, as a W&B run (offline unless W&B's own switches, WANDB_MODE or "
        "`wandb online`, say otherwise; each run also keeps its CSV log, which the comparison reads); false: CSV only",
    )
    parser.add_argument(
        "--overrides", nargs="*", default=[], metavar="ARG", help='fit options, e.g. --overrides "--data.alpha=1"'
    )
    return parser


def split_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Separate the override tokens (which look like options) from the compare options.

    Overrides are the tokens after ``--overrides`` up to the next compare option, plus everything after ``--``;
    ``--overrides=X`` works too. A token with spaces (``"--data.alpha 1"``) is split like a shell would.
    """
    argv = list(argv)
    tail: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, tail = argv[:i], argv[i + 1 :]
    rest, raw = [], []
    collecting = False
    for tok in argv:
        name = tok.split("=", 1)[0]
        if name == "--overrides":
            collecting = True
            if "=" in tok:
                raw.append(tok.split("=", 1)[1])
        elif collecting and name not in OPTIONS and tok not in ("-h", "--help"):
            raw.append(tok)
        else:
            collecting = False
            rest.append(tok)
    return rest, [t for tok in [*raw, *tail] for t in shlex.split(tok)]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    rest, overrides = split_overrides(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(rest)
    args.overrides = overrides
    args.wandb = args.wandb == "true"
    if args.methods is None:
        from lightning_sfl.algorithms.registry import SYNCHRONOUS, names

        args.methods = list(names(family=SYNCHRONOUS))
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs} must be >= 1")
    for seed in args.seeds:
        if not 0 <= seed <= MAX_SEED:
            parser.error(f"--seeds {seed} must be in [0, {MAX_SEED}] (numpy's seeds)")
    for target in args.target_acc or []:
        if not 0 < target <= 1:
            parser.error(f"--target_acc {target:g} must be a fraction in (0, 1]")
    try:
        args.launcher = launcher_of(args)
        args.slurm_parameters = slurm_parameters(args.slurm)
        check_overrides(overrides)
        for m in args.methods:
            resolve_method(m)
        check_output_folder("--out", args.out)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def methods_of(command: str) -> list[str]:
    """The ``--methods`` of a ``lightning-sfl compare`` command.

    >>> methods_of("lightning-sfl compare --methods a b --seeds 0")
    ['a', 'b']
    """
    tokens = shlex.split(command)
    start = tokens.index("--methods") + 1 if "--methods" in tokens else len(tokens)
    end = next((i for i in range(start, len(tokens)) if tokens[i].startswith("--")), len(tokens))
    return tokens[start:end]


def without_methods(command: str) -> list[str]:
    """The tokens of a ``lightning-sfl compare`` command minus ``--methods ...``, ``--jobs N``, ``--wandb X`` and the
    launcher's options (which change no run's results).

    >>> without_methods("lightning-sfl compare --methods a b --seeds 0 --jobs 2 --out x --wandb false")
    ['lightning-sfl', 'compare', '--seeds', '0', '--out', 'x']
    """
    tokens, kept, i = shlex.split(command), [], 0
    while i < len(tokens):
        if tokens[i] in ("--jobs", "--launcher", "--wandb"):
            i += 2
        elif tokens[i] == "--isolate":
            i += 1
        elif tokens[i] == "--slurm":
            i += 1
            while i < len(tokens) and not tokens[i].startswith("--"):
                i += 1
        elif tokens[i] == "--methods":
            i += 1
            while i < len(tokens) and not tokens[i].startswith("--"):
                i += 1
        else:
            kept.append(tokens[i])
            i += 1
    return kept


def command_line(args: argparse.Namespace) -> str:
    """The ``lightning-sfl compare`` command that reproduces ``args``."""
    parts = ["lightning-sfl", "compare"]
    for cfg in args.config:
        parts += ["--config", str(cfg)]
    parts += ["--methods", *args.methods, "--seeds", *map(str, args.seeds), "--out", str(args.out)]
    if args.target_acc is not None:
        parts += ["--target_acc", *(f"{t:g}" for t in args.target_acc)]
    if args.jobs != 1:
        parts += ["--jobs", str(args.jobs)]
    if args.launcher != "warm":
        parts += ["--launcher", args.launcher]
    if args.slurm:
        parts += ["--slurm", *args.slurm]
    if args.keep_checkpoints:
        parts.append("--keep_checkpoints")
    if not getattr(args, "wandb", True):
        parts += ["--wandb", "false"]
    if args.overrides:
        parts += ["--overrides", *args.overrides]
    return shlex.join(parts)
