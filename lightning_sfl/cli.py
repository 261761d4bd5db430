"""Console script ``lightning-sfl``: ``fit``, ``validate`` and ``test`` (LightningCLI, in
:mod:`lightning_sfl.lightning_cli`), ``compare`` (:mod:`lightning_sfl.compare`), ``sweep``
(:mod:`lightning_sfl.sweep`), ``attack`` (:mod:`lightning_sfl.attack`) and ``cuts`` (:mod:`lightning_sfl.cuts`).

Run the main job (SCALA on scikit-learn's bundled digits, offline)::

    lightning-sfl fit --config configs/digits/scala.yaml

This module only dispatches; it imports neither side until a subcommand needs it (``lightning-sfl --help`` loads
neither torch nor Lightning), so ``compare`` (which runs ``fit`` through :mod:`lightning_sfl.lightning_cli`) and
this entry point import no module in a circle.
"""

from __future__ import annotations

import sys

from lightning_sfl.errors import ConfigError

#: Subcommand -> one line of help, in the order ``--help`` lists them.
COMMANDS: dict[str, str] = {
    "fit": "train a method (every option: lightning-sfl fit --help)",
    "validate": "evaluate the global model of a checkpoint (--ckpt_path) on the test split",
    "test": "the same evaluation as validate, under Lightning's test stage",
    "compare": "train several methods x seeds on identical client shards and tabulate the results",
    "sweep": "run the trials of a W&B sweep file offline, without a W&B server (grid, random, bayes)",
    "attack": "model-inversion attack on a checkpoint's activations: MSE, SSIM and PSNR of the reconstructions",
    "cuts": "per cut point of a model: client half size, activation size and FLOPs on each side",
}

USAGE = f"""usage: lightning-sfl {{{",".join(COMMANDS)}}} ...

Split federated learning under label skew, on PyTorch Lightning.

subcommands:
""" + "".join(f"  {name:<10}{text}\n" for name, text in COMMANDS.items())


def main(args: list[str] | None = None) -> None:
    """Entry point of ``lightning-sfl`` (``python -m lightning_sfl.cli`` too)."""
    argv = sys.argv[1:] if args is None else list(args)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        if not argv:
            raise SystemExit(2)
        return
    if argv[0] not in COMMANDS and not argv[0].startswith("-"):
        print(f"error: unknown subcommand {argv[0]!r}; choose from: {', '.join(COMMANDS)}", file=sys.stderr)
        raise SystemExit(2)
    try:
        _dispatch(argv, args)
    except ConfigError as exc:  # (one raised before a subcommand's own handling: a setting of the environment)
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _dispatch(argv: list[str], args: list[str] | None) -> None:
    """Run the subcommand ``argv[0]`` with the rest of ``argv`` (``args``: as :func:`main` was given them)."""
    from lightning_sfl.process.memory import retain_freed_memory
    from lightning_sfl.process.quiet import quiet_dependencies

    retain_freed_memory()  # a training process reuses its freed memory (no page faults on bank-sized gradients)
    quiet_dependencies()  # no warning a user can do nothing about (each filter says why)
    if argv[0] != "sweep":  # (a sweep's trials are commands of their own, which load them)
        from lightning_sfl.plugins import load_plugins

        load_plugins()  # installed methods by name (--model NAME), before any argument is read
    if argv[0] == "compare":
        from lightning_sfl.compare import main as compare_main

        compare_main(argv[1:])
        return
    if argv[0] == "sweep":
        from lightning_sfl.sweep import main as sweep_main

        sweep_main(argv[1:])
        return
    if argv[0] == "attack":
        from lightning_sfl.attack import main as attack_main

        attack_main(argv[1:])
        return
    if argv[0] == "cuts":
        from lightning_sfl.cuts import main as cuts_main

        cuts_main(argv[1:])
        return
    if "lightning" not in sys.modules:  # W&B's worker imports W&B while this process imports Lightning (its
        from lightning_sfl.wandb.process import prestart_for  # WandbLogger takes it); with Lightning imported already

        prestart_for(argv[1:])  # there is nothing to overlap: a worker starts when a run logs, not for a bad input
    from lightning_sfl.lightning_cli import run

    run(args)


def console_main() -> None:
    """The ``lightning-sfl`` console script (and ``python -m lightning_sfl.cli``): :func:`main`, then the process
    ends without the interpreter's teardown of Lightning's modules (most of a second; see
    :mod:`lightning_sfl.process.fast_exit`). An exception other than ``SystemExit`` ends it the usual way."""
    from lightning_sfl.process.fast_exit import exit_code, exit_without_teardown, teardown_wanted

    if teardown_wanted():
        main()
        return
    try:
        main()
    except SystemExit as exc:
        exit_without_teardown(exit_code(exc))
    exit_without_teardown(0)


def without_working_folder() -> None:
    """``python -m lightning_sfl.cli`` (and ``python -m lightning_sfl``) as the console script: Python puts the working
    folder first on ``sys.path`` for ``-m``, where a module of a run folder or a downloaded checkpoint's folder would
    be found by a class path; it is taken off. A module of your own is importable as for the console script: installed,
    or on ``PYTHONPATH`` (``PYTHONPATH=. lightning-sfl fit --model my_methods.Prox``)."""
    import os

    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]


if __name__ == "__main__":
    without_working_folder()
    console_main()
