"""Safe checkpoint checks: a checkpoint is read with ``torch.load(weights_only=True)`` (no code runs while
loading) and must hold a lightning_sfl model; anything else is a one-line ``ConfigError``."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import torch

from lightning_sfl.errors import ConfigError

#: ``ckpt_path`` values that Lightning resolves itself.
SPECIAL = ("last", "best", "hpc", "registry")


def check_checkpoint(path: str | os.PathLike, expected_class: str | None = None) -> dict:
    """Load ``path`` safely and check it is a lightning_sfl checkpoint (of ``expected_class`` if given)."""
    p = Path(path)
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
