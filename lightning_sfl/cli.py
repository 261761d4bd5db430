"""Console script ``lightning-sfl``: ``fit``, ``validate`` and ``test`` (LightningCLI, in
:mod:`lightning_sfl.lightning_cli`) and ``compare`` (:mod:`lightning_sfl.compare`).

Run the main job (SCALA on scikit-learn's bundled digits, offline)::

    lightning-sfl fit --config configs/digits/scala.yaml

This module only dispatches; it imports neither side until a subcommand needs it, so ``compare`` (which runs
``fit`` through :mod:`lightning_sfl.lightning_cli`) and this entry point import no module in a circle.
"""

from __future__ import annotations

import sys


def main(args: list[str] | None = None) -> None:
    """Entry point of ``lightning-sfl`` (``python -m lightning_sfl.cli`` too)."""
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] == ["compare"]:
        from lightning_sfl.compare import main as compare_main

        compare_main(argv[1:])
        return
    from lightning_sfl.lightning_cli import run

    run(args)


if __name__ == "__main__":
    main()
