"""The output folder of a command that runs trials (``compare --out``, ``sweep --out``), made for real before anything
is written into it: whether a folder can be made is found by making it (``os.access`` answers "writable" to root for
any folder, ``/proc`` included), and a folder that cannot be made is one ``error:`` line with nothing left behind."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from lightning_sfl.errors import ConfigError, check_output_folder

__all__ = ["create_output_folder"]


def create_output_folder(name: str, folder: str | os.PathLike) -> Path:
    """Create ``folder`` (option ``name``) and its missing parents, after
    :func:`~lightning_sfl.errors.check_output_folder`'s checks; a one-line :class:`~lightning_sfl.errors.ConfigError`
    naming the option if it cannot be made, the folders made for it removed again. Returns the folder.

    >>> import tempfile
    >>> create_output_folder("--out", Path(tempfile.mkdtemp()) / "a" / "b").is_dir()
    True
    >>> create_output_folder("--out", "/proc/nope/x")
    Traceback (most recent call last):
    ...
    lightning_sfl.errors.ConfigError: --out='/proc/nope/x' cannot be written: no such file or directory (/proc/nope)
    """
    check_output_folder(name, folder)
    path = Path(folder).expanduser()
    missing = [p for p in (path, *path.absolute().parents) if not p.exists()]  # the deepest first
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        for made in missing:
            with contextlib.suppress(OSError):
                made.rmdir()
        where = f": {err.filename}" if err.filename else ""
        raise ConfigError(f"{name}={str(folder)!r} cannot be created ({err.strerror or err}{where})") from None
    return path
