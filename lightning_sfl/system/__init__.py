"""The simulated system: exact communication bytes (:mod:`~lightning_sfl.system.comm`), FLOPs
(:mod:`~lightning_sfl.system.flops`), the wireless channel (:mod:`~lightning_sfl.system.channel`), the system models
that turn them into simulated time (:mod:`~lightning_sfl.system.timing`, :mod:`~lightning_sfl.system.wireless`,
:mod:`~lightning_sfl.system.devices`), and
the gradient dissimilarity of Assumption 3 (:mod:`~lightning_sfl.system.dissimilarity`)."""
