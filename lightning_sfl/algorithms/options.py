"""The base's options, checked before anything is built: each bad value one
:class:`~lightning_sfl.errors.ConfigError` line naming the option and what it allows."""

from __future__ import annotations

from lightning_sfl.algorithms.stacked_bank import BANK_KINDS
from lightning_sfl.errors import ConfigError

__all__ = ["MissingClassFloor", "check_training_options", "checked_floor"]


def check_training_options(
    local_iters: int, lr: float, momentum: float, weight_decay: float, client_bank: str, nesterov: bool
) -> None:
    """The local iterations, the SGD settings and the client bank's kind, checked."""
    if local_iters < 1:
        raise ConfigError(f"local_iters={local_iters} must be >= 1")
    if not lr > 0:
        raise ConfigError(f"lr={lr} must be > 0")
    if not 0 <= momentum < 1:  # at 1 and above the momentum buffer never forgets: SGD diverges
        raise ConfigError(f"momentum={momentum} must be in [0, 1)")
    if weight_decay < 0:
        raise ConfigError(f"weight_decay={weight_decay} must be >= 0")
    if client_bank not in BANK_KINDS:
        raise ConfigError(f"client_bank={client_bank!r} is not one of: {', '.join(BANK_KINDS)}")
    if not isinstance(nesterov, bool) or (nesterov and momentum == 0):
        raise ConfigError(f"nesterov={nesterov!r} must be true or false, and true needs momentum > 0")


def checked_floor(value: float) -> float:
    """``missing_class_floor`` of the logit-adjusting methods, checked: ``0`` (missing classes leave the softmax) or a
    positive floor (public code's finite version)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"missing_class_floor={value!r} must be a number >= 0 (0: missing classes get -inf logits)")
    return float(value)


class MissingClassFloor:
    """The ``missing_class_floor`` attribute: floor of the log-priors of the logit-adjusting losses (``0``:
    ``log 0 = −∞``, a class a client lacks leaves the softmax; ``> 0``: public code's finite version; see
    :func:`~lightning_sfl.algorithms.losses.log_prior`); 0 until set, checked when set (:func:`checked_floor`)."""

    def __get__(self, method, owner=None) -> float:
        return self if method is None else method.__dict__.get("_missing_class_floor", 0.0)

    def __set__(self, method, value: float) -> None:
        method.__dict__["_missing_class_floor"] = checked_floor(value)
