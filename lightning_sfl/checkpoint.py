"""Safe checkpoint checks: a checkpoint is read with ``torch.load(weights_only=True)`` (no code runs while
loading) and must hold a lightning_sfl model; anything else is a one-line ``ConfigError``."""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import torch

from lightning_sfl.errors import ConfigError

#: ``ckpt_path`` values that Lightning resolves itself.
SPECIAL = ("last", "best", "hpc", "registry")


def check_checkpoint(path: str | os.PathLike, expected_class: str | None = None) -> dict:
    """Load ``path`` safely and check it is a lightning_sfl checkpoint (of ``expected_class`` if given). A folder is
    a one-line error naming the checkpoints in it (:func:`folder_contents`)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"ckpt_path={str(path)!r} is a folder, not a checkpoint file ({folder_contents(p)})")
    if not p.is_file():
        raise ConfigError(f"ckpt_path={str(path)!r} does not exist")
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated zip, not a torch file, or objects that need arbitrary code
        text = str(err).strip()
        reason = text.splitlines()[0].split(". ")[0] if text else type(err).__name__
        raise ConfigError(
            f"ckpt_path={str(path)!r} cannot be loaded safely (truncated or foreign file): {reason}"
        ) from err
    state = ckpt.get("state_dict") if isinstance(ckpt, dict) else None
    if not isinstance(state, dict) or not any(k.startswith("client.net.") for k in state):
        raise ConfigError(f"ckpt_path={str(path)!r} is not a lightning_sfl checkpoint (no client/server halves)")
    written_by = (ckpt.get("lightning_sfl") or {}).get("algorithm") or (ckpt.get("hyper_parameters") or {}).get(
        "_class_path"
    )
    expected = _algorithm_name(expected_class) if expected_class else None
    if expected and written_by and _algorithm_name(written_by, trusted=False) != expected:
        raise ConfigError(f"ckpt_path={str(path)!r} was written by {written_by}, not {expected}")
    return ckpt


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
    from lightning_sfl.algorithms.state import algorithm_path

    module, _, name = path.rpartition(".")
    library = {cls.__name__: cls for cls in ALGORITHMS.values()}
    if module.startswith("lightning_sfl") and name in library:
        return algorithm_path(library[name])
    if trusted:
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
