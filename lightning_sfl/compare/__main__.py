"""``python -m lightning_sfl.compare ...``: the same as ``lightning-sfl compare ...``."""

from lightning_sfl.compare import main

main()
