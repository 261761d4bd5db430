"""Privacy of split learning: how much the activations at the cut leak, and the defences.

* :mod:`lightning_sfl.privacy.metrics`: per-image MSE, SSIM and PSNR, and SCALA-PE's regulariser ``R``;
* :mod:`lightning_sfl.privacy.inversion`: the inversion decoders (simulated and attacker) and the per-client pieces;
* :mod:`lightning_sfl.privacy.unsplit`: UnSplit, inversion without data or the client's weights;
* :mod:`lightning_sfl.privacy.hijacking`: FSHA's critic and gradient penalty (the method is
  :class:`~lightning_sfl.algorithms.fsha.FSHA`);
* :mod:`lightning_sfl.privacy.splitguard`: SplitGuard's score, the clients' detector of a hijacking server (the probe
  is the callback :class:`~lightning_sfl.callbacks.splitguard.SplitGuard`);
* :mod:`lightning_sfl.privacy.defences`: NoPeek's distance correlation and noise on the activations (applied to every
  split method's clients by :mod:`lightning_sfl.defences`);
* :mod:`lightning_sfl.privacy.progress`: the attacks' progress on a terminal (quiet otherwise).

``lightning-sfl attack`` (``--attack inversion|unsplit`` on any split checkpoint) is the command
:mod:`lightning_sfl.attack`, built on these. Nothing is imported here, so that ``lightning-sfl attack --help`` loads
neither torch nor Lightning.
"""
