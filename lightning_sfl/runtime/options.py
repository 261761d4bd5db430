"""The base's options, checked before anything is built: each bad value one
:class:`~lightning_sfl.errors.ConfigError` line naming the option and what it allows."""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from lightning_sfl.errors import ConfigError
from lightning_sfl.runtime.stacked_bank import BANK_KINDS

__all__ = ["MissingClassFloor", "check_training_options", "check_unused", "checked_floor", "option_defaults"]


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
    :func:`~lightning_sfl.losses.log_prior`); 0 until set, checked when set (:func:`checked_floor`)."""

    def __get__(self, method, owner=None) -> float:
        return self if method is None else method.__dict__.get("_missing_class_floor", 0.0)

    def __set__(self, method, value: float) -> None:
        method.__dict__["_missing_class_floor"] = checked_floor(value)


def option_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The keyword arguments ``cls(...)`` accepts: its ``__init__`` parameters and, while an ``__init__`` takes
    ``**kwargs``, those of the next ``__init__`` up the MRO (how ``SCALA(**kwargs)`` reaches the base), each as its
    nearest definition (a subclass's default wins)."""
    found: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        if klass is object or "__init__" not in vars(klass):
            continue
        params = list(inspect.signature(klass.__init__).parameters.values())[1:]
        for p in params:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                found.setdefault(p.name, p)
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return found


def option_defaults(cls: type) -> dict[str, object]:
    """The default of each keyword argument ``cls(...)`` accepts (:func:`option_parameters`).

    >>> from lightning_sfl.algorithms import FedYogi
    >>> option_defaults(FedYogi)["server_lr"], option_defaults(FedYogi)["beta2"]
    (0.01, 0.99)
    """
    return {name: p.default for name, p in option_parameters(cls).items()}


def check_unused(unused: Mapping[str, str], values: Mapping, defaults: Mapping) -> None:
    """A one-line :class:`~lightning_sfl.errors.ConfigError` for the first option of ``unused`` (option -> why the
    method has no use for it) that ``values`` sets to other than its default: an option that would change nothing.

    >>> unused = {"split_point": "FedAvg has no server half"}
    >>> check_unused(unused, {"split_point": "s2"}, {"split_point": "s2"})
    >>> check_unused(unused, {"split_point": "s3"}, {"split_point": "s2"})
    Traceback (most recent call last):
    ...
    lightning_sfl.errors.ConfigError: split_point='s3' changes nothing: FedAvg has no server half
    """
    for option, why in unused.items():
        if option in values and values[option] != defaults.get(option):
            raise ConfigError(f"{option}={values[option]!r} changes nothing: {why}")
