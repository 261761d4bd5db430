"""The command-line options that choose how trials run, shared by ``compare`` and ``sweep``: ``--launcher``,
``--isolate`` (``--launcher isolate``) and ``--slurm KEY=VALUE ...`` (submitit's parameters)."""

from __future__ import annotations

import argparse

from .pool import LAUNCHERS

__all__ = ["LAUNCHER_OPTIONS", "add_launcher_arguments", "launcher_of", "slurm_parameters"]

#: The options :func:`add_launcher_arguments` adds (they change how trials run, never their results).
LAUNCHER_OPTIONS = ("--launcher", "--isolate", "--slurm")


def add_launcher_arguments(parser: argparse.ArgumentParser) -> None:
    choices = "; ".join(f"{name}: {what}" for name, what in LAUNCHERS.items())
    parser.add_argument("--launcher", choices=list(LAUNCHERS), default="warm", help=f"how trials run ({choices})")
    parser.add_argument(
        "--isolate", action="store_true", help="each trial in a process of its own (--launcher isolate)"
    )
    parser.add_argument(
        "--slurm",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="submitit parameters for --launcher slurm, e.g. slurm_partition=gpu timeout_min=60 gpus_per_node=1",
    )


def launcher_of(args: argparse.Namespace) -> str:
    """``--launcher``, or ``isolate`` for ``--isolate``; a contradiction is an error (one line)."""
    if args.isolate and args.launcher not in ("warm", "isolate"):
        raise ValueError(f"--isolate contradicts --launcher {args.launcher}: give one of them")
    if args.slurm and args.launcher not in ("slurm", "submitit-local"):
        raise ValueError("--slurm sets submitit's parameters: it needs --launcher slurm (or submitit-local)")
    return "isolate" if args.isolate else args.launcher


def slurm_parameters(pairs: list[str]) -> dict:
    """``["slurm_partition=gpu", "timeout_min=60"]`` -> ``{"slurm_partition": "gpu", "timeout_min": 60}`` (numbers
    as numbers).

    >>> slurm_parameters(["slurm_partition=gpu", "timeout_min=60", "mem_gb=7.5"])
    {'slurm_partition': 'gpu', 'timeout_min': 60, 'mem_gb': 7.5}
    """
    params = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise ValueError(f"--slurm {pair!r} is not KEY=VALUE (e.g. slurm_partition=gpu timeout_min=60)")
        for kind in (int, float):
            try:
                params[key] = kind(value)
                break
            except ValueError:
                continue
        else:
            params[key] = value
    return params
