"""``lightning-sfl sweep``: W&B sweep files run offline (:mod:`.space`: the file as data; :mod:`.run`: the runner)."""

from lightning_sfl.sweep.run import Sweep, main, trial_metric
from lightning_sfl.sweep.space import check_sweep, expand_command, grid_points, optuna_space, sample

__all__ = ["Sweep", "check_sweep", "expand_command", "grid_points", "main", "optuna_space", "sample", "trial_metric"]
