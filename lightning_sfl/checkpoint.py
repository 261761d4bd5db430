"""Safe checkpoint checks: a checkpoint is read with ``torch.load(weights_only=True)`` (no code runs while
loading) and must hold a lightning_sfl model, and every class path its hyperparameters hold must be one the library
knows (:mod:`lightning_sfl.known`: never imported on the checkpoint's word); anything else is a one-line
``ConfigError``."""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import torch

from lightning_sfl.errors import ConfigError
from lightning_sfl.known import known_class, safe_hyperparameters
from lightning_sfl.run_checkpoints import damage, damaged_line

#: ``ckpt_path`` values that Lightning resolves itself.
SPECIAL = ("last", "best", "hpc", "registry")


def check_checkpoint(path: str | os.PathLike, expected_class: str | None = None) -> dict:
    """Load ``path`` safely and check it is a lightning_sfl checkpoint (of ``expected_class`` if given). A folder is
    a one-line error naming the checkpoints in it (:func:`folder_contents`)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"ckpt_path={str(path)!r} is a folder, not a checkpoint file ({folder_contents(p)})")
    if p.is_symlink() and not p.exists():
        raise ConfigError(damaged_line(p, damage(p), f"ckpt_path={str(path)!r}"))
    if not p.is_file():
        raise ConfigError(f"ckpt_path={str(path)!r} does not exist")
    why = damage(p)
    if why is not None and why.startswith("is damaged"):  # (what is intact beside it is named)
        raise ConfigError(damaged_line(p, why, f"ckpt_path={str(path)!r}"))
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:  # objects that need arbitrary code, or damage past the archive's index
        text = str(err).strip()
        reason = text.splitlines()[0].split(". ")[0] if text else type(err).__name__
        raise ConfigError(
            f"ckpt_path={str(path)!r} cannot be loaded safely (truncated or foreign file): {reason}"
        ) from err
    state = ckpt.get("state_dict") if isinstance(ckpt, dict) else None
    if not isinstance(state, dict) or not any(k.startswith("client.net.") for k in state):
        raise ConfigError(f"ckpt_path={str(path)!r} is not a lightning_sfl checkpoint (no client/server halves)")
    hparams = ckpt.get("hyper_parameters") or {}
    written_by = (ckpt.get("lightning_sfl") or {}).get("algorithm") or hparams.get("_class_path")
    expected = _algorithm_name(expected_class) if expected_class else None
    if expected and written_by and _algorithm_name(written_by, trusted=False) != expected:
        raise ConfigError(f"ckpt_path={str(path)!r} was written by {written_by}, not {expected}")
    # every class path it holds is one the library knows (never imported on its word: known.py)
    where = f"ckpt_path={str(path)!r}"
    options = {k: v for k, v in hparams.items() if not k.startswith("_")}
    ckpt["hyper_parameters"] = {**hparams, **safe_hyperparameters(options, where)}
    return ckpt


def checkpoint_method(ckpt: dict):
    """The library's class of the method that wrote ``ckpt`` (a registered method, or one the command line imported;
    :func:`~lightning_sfl.known.known_class`: never imported on the checkpoint's word), or ``None``."""
    from lightning_sfl.algorithms import ALGORITHMS, SplitFedAlgorithm

    recorded = (ckpt.get("lightning_sfl") or {}).get("algorithm") or (ckpt.get("hyper_parameters") or {}).get(
        "_class_path"
    )
    return known_class(str(recorded), SplitFedAlgorithm, {cls.__name__: cls for cls in ALGORITHMS.values()})


def checkpoints_in(folder: Path) -> list[str]:
    """The checkpoint files in ``folder``, or else in its ``checkpoints/`` (a run folder's), as paths relative to
    ``folder``: ``last.ckpt`` first, then the later rounds first.

    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> (run / "checkpoints").mkdir()
    >>> for name in ("epoch=9-step=50.ckpt", "last.ckpt", "epoch=10-step=55.ckpt"):
    ...     _ = (run / "checkpoints" / name).write_text("")
    >>> checkpoints_in(run)
    ['checkpoints/last.ckpt', 'checkpoints/epoch=10-step=55.ckpt', 'checkpoints/epoch=9-step=50.ckpt']
    """

    def order(path: Path) -> tuple:
        epoch = re.search(r"epoch=(\d+)", path.name)
        return path.name != "last.ckpt", -int(epoch.group(1)) if epoch else 0, path.name

    for where in (folder, folder / "checkpoints"):
        found = sorted((p for p in where.glob("*.ckpt") if p.is_file()), key=order) if where.is_dir() else []
        if found:
            return [str(p.relative_to(folder)) for p in found]
    return []


def folder_contents(folder: Path, shown: int = 3) -> str:
    """What :func:`check_checkpoint` says of a folder given as a checkpoint: the first ``shown`` checkpoints in it.

    >>> import tempfile
    >>> folder_contents(Path(tempfile.mkdtemp()))
    'it holds no .ckpt file'
    """
    found = checkpoints_in(folder)
    if not found:
        return "it holds no .ckpt file"
    more = f" and {len(found) - shown} more" if len(found) > shown else ""
    return f"it holds {', '.join(found[:shown])}{more}"


def _algorithm_name(path: str, trusted: bool = True) -> str:
    """``path`` as checkpoints record it (``lightning_sfl.SCALA`` and ``lightning_sfl.algorithms.SCALA`` are one
    class). A name read from a checkpoint (``trusted=False``) is only looked up in the library, never imported."""
    from lightning_sfl.algorithms import ALGORITHMS
    from lightning_sfl.algorithms.registry import algorithm_path

    module, _, name = path.rpartition(".")
    library = {cls.__name__: cls for cls in ALGORITHMS.values()}
    if module.startswith("lightning_sfl") and name in library:
        return algorithm_path(library[name])
    if trusted:  # (the command line's own --model: imported by its parsing already)
        try:
            return algorithm_path(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError, ValueError):
            return path
    return path


#: Hyperparameters renamed since checkpoints were first written: method -> {old name: new} (SCALA-PE's regulariser's
#: options became ``inversion_*`` options of every split method, which then became the options of a defence).
RENAMED_HPARAMS = {
    "SCALAPE": {"gamma": "inversion_gamma", "threshold": "inversion_threshold", "regulariser": "inversion_regulariser"}
}


#: Semi-SFL's options its baselines' checkpoints carry from before the baselines had a base of their own.
SEMI_SFL_ONLY_OPTIONS = ("temperature", "proj_dim", "proj_hidden", "queue_size", "contrastive")


def legacy_hyperparameters(cls, hparams: dict) -> dict:
    """The hyperparameters of a checkpoint of ``cls`` as its constructor takes them now: old names renamed, the
    defence options every method had before defences were parts as ``defences``
    (:func:`~lightning_sfl.defences.from_legacy_options`), and the options the method has no use for left out
    (``unused_options``: they changed nothing, and are refused now at other than their defaults)."""
    from lightning_sfl.algorithms.split_method import SplitMethod
    from lightning_sfl.defences import from_legacy_options

    renamed = RENAMED_HPARAMS.get(cls.__name__, {})
    hparams = {renamed.get(k, k): v for k, v in hparams.items()}
    default = cls.default_defences() if issubclass(cls, SplitMethod) else []
    hparams = from_legacy_options(hparams, default)
    accepted = inspect_parameters(cls)
    if not hparams.get("defences") and "defences" not in accepted:
        hparams.pop("defences", None)  # a method without the option (FedAvg) had them all off
    for name in SEMI_SFL_ONLY_OPTIONS:  # Semi-SFL's, held by its baselines until they had a base of their own
        if name not in accepted:
            hparams.pop(name, None)
    for name in getattr(cls, "unused_options", dict)():  # they changed nothing, and are refused now at non-defaults
        hparams.pop(name, None)
    return hparams


def inspect_parameters(cls) -> set[str]:
    """The constructor arguments of ``cls`` and its bases (through ``**kwargs``)."""
    import inspect

    return {n for c in cls.__mro__ if "__init__" in vars(c) for n in inspect.signature(c.__init__).parameters}


#: The data options that decide the model's shape (its classes, its input): what a checkpoint's data must repeat.
SHAPE_OPTIONS = ("dataset", "binary_class", "image_size", "labelled_per_class")


def check_fits_data(ckpt: dict, where: str, num_classes: int, input_shape, data_options: dict) -> None:
    """A one-line :class:`ConfigError` (naming ``where``, the checkpoint) when the model of ``ckpt`` was trained for
    other classes or inputs than this configuration's data gives (``num_classes``, ``input_shape``): it names what
    differs and the data options the fit had that this configuration does not (from the checkpoint's record of its
    data module, compared with ``data_options``), before any weight is loaded.

    >>> ckpt = {"hyper_parameters": {"num_classes": 2, "input_shape": [1, 8, 8]},
    ...         "datamodule_hyper_parameters": {"dataset": "digits", "binary_class": 3}}
    >>> check_fits_data(ckpt, "ckpt_path='a.ckpt'", 10, (1, 8, 8), {"dataset": "digits", "binary_class": None})
    Traceback (most recent call last):
    ...
    lightning_sfl.errors.ConfigError: ckpt_path='a.ckpt': the checkpoint has 2 classes (--data.binary_class 3 at fit); \
this configuration has 10 classes: give the fit's data options
    """
    hparams = ckpt.get("hyper_parameters") or {}
    had_classes, had_shape = hparams.get("num_classes"), hparams.get("input_shape")
    had, now = [], []
    if had_classes is not None and int(had_classes) != int(num_classes):
        had.append(f"{had_classes} classes")
        now.append(f"{num_classes} classes")
    if had_shape is not None and tuple(had_shape) != tuple(input_shape):
        had.append(f"inputs {list(had_shape)}")
        now.append(f"inputs {list(input_shape)}")
    if not had:
        return
    fit = {k: v for k, v in (ckpt.get("datamodule_hyper_parameters") or {}).items() if not k.startswith("_")}
    differ = [k for k in fit if k in data_options and fit[k] != data_options[k]]
    shown = [k for k in differ if k in SHAPE_OPTIONS] or differ
    at_fit = f" ({', '.join(f'--data.{k} {fit[k]}' for k in shown)} at fit)" if shown else ""
    raise ConfigError(
        f"{where}: the checkpoint has {' and '.join(had)}{at_fit}; this configuration has {' and '.join(now)}: give "
        "the fit's data options"
    )
