"""Tweaks of the training process itself (not of the simulation): the interpreter's exit without module teardown
(:mod:`~lightning_sfl.process.fast_exit`), Lightning's logging without redundant metric moves
(:mod:`~lightning_sfl.process.fast_logging`), and freed memory kept for reuse (:mod:`~lightning_sfl.process.memory`)."""
