"""Privacy of split learning: how much the activations at the cut leak, and SCALA-PE's defence.

* :mod:`lightning_sfl.privacy.metrics`: per-image MSE, SSIM and PSNR, and SCALA-PE's regulariser ``R``;
* :mod:`lightning_sfl.privacy.inversion`: the inversion decoders (simulated and attacker) and the per-client pieces.

``lightning-sfl attack`` (a model-inversion attack on any checkpoint) is the command :mod:`lightning_sfl.attack`, built
on these. Nothing is imported here, so that ``lightning-sfl attack --help`` loads neither torch nor Lightning.
"""
