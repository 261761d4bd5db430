"""Dataset downloads that fail in one line and leave nothing behind.

:func:`download_into` runs a torchvision downloader in a fresh folder ``<root>/.<name>-download-*`` and moves what it
fetched into ``root`` only when it succeeded. When it fails (no network, a server that refuses or answers an error, a
file that fails torchvision's md5 check, Ctrl-C) the folder is removed with whatever it holds (a half-written archive),
so are the folders the download created for ``root``, and the failure is one
:class:`~lightning_sfl.errors.DatasetNotFoundError` line: that downloading failed, why in a few words
(:func:`failure_reason`) and how to proceed (where to place the files).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import tempfile
import urllib.error
from collections.abc import Callable, Sequence
from pathlib import Path

from lightning_sfl.errors import DatasetNotFoundError

__all__ = ["download_into", "ensure_files", "failure_reason"]

_NO_NAME = (  # how the resolver's failures read: no network, or no DNS
    "Name or service not known",
    "Temporary failure in name resolution",
    "nodename nor servname",
    "getaddrinfo failed",
    "No address associated with hostname",
)
_UNREACHABLE = ("Network is unreachable", "No route to host")
_NO_NETWORK_ERRNOS = (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN)


def _chain(err: BaseException) -> list[BaseException]:
    """``err``, its causes and contexts, and the reasons of the ``URLError``s among them, in that order."""
    found: list[BaseException] = []
    todo: list[BaseException | None] = [err]
    while todo:
        e = todo.pop(0)
        if e is None or any(e is f for f in found):
            continue
        found.append(e)
        reason = getattr(e, "reason", None) if isinstance(e, urllib.error.URLError) else None
        todo += [reason if isinstance(reason, BaseException) else None, e.__cause__, e.__context__]
    return found


def failure_reason(err: BaseException) -> str:
    """Why a download failed, in a few words: no network, the server refused the connection or answered an HTTP error,
    the connection timed out, the file failed its integrity check, no permission or no space to write; else the
    error's type and first line. Read from the exceptions (``err``'s chain) and, for torchvision's downloaders that
    keep only the text of the errors (MNIST's mirrors), from the text.

    >>> failure_reason(urllib.error.URLError(socket.gaierror(-2, "Name or service not known")))
    'no network (the server name could not be resolved)'
    >>> failure_reason(urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")))
    'the server refused the connection'
    >>> failure_reason(RuntimeError("Error downloading t10k-images-idx3-ubyte.gz:\\nTried http://a/, got:\\n"
    ...                             "HTTP Error 404: Not Found\\n"))
    'the server answered HTTP 404 Not Found'
    >>> failure_reason(RuntimeError("File not found or corrupted."))
    'the downloaded file failed its integrity check (md5)'
    """
    chain = _chain(err)
    for e in chain:
        if isinstance(e, urllib.error.HTTPError):
            return f"the server answered HTTP {e.code} {e.reason}".rstrip()
        if isinstance(e, socket.gaierror):
            return "no network (the server name could not be resolved)"
        if isinstance(e, OSError) and e.errno in _NO_NETWORK_ERRNOS:
            return "no network (the server could not be reached)"
        if isinstance(e, ConnectionRefusedError):
            return "the server refused the connection"
        if isinstance(e, ConnectionError):
            return "the server dropped the connection"
        if isinstance(e, TimeoutError):
            return "the connection timed out"
        if isinstance(e, PermissionError):
            return f"no permission to write in {os.path.dirname(e.filename) if e.filename else 'the data folder'}"
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            return "no space left on the disk"
    text = "\n".join(str(e) for e in chain)
    http = re.search(r"HTTP Error (\d+): ([^\n>]*)", text)
    if any(s in text for s in _NO_NAME):
        return "no network (the server name could not be resolved)"
    if any(s in text for s in _UNREACHABLE):
        return "no network (the server could not be reached)"
    if "Connection refused" in text:
        return "the server refused the connection"
    if http:
        return f"the server answered HTTP {http.group(1)} {http.group(2).strip()}".rstrip()
    if "timed out" in text:
        return "the connection timed out"
    if re.search(r"not found or corrupted|md5|checksum", text, re.IGNORECASE):
        return "the downloaded file failed its integrity check (md5)"
    first = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {first}"[:200] if first else type(err).__name__


def _outermost_missing(folder: Path) -> Path | None:
    """The outermost of ``folder`` and its parents that does not exist (what ``mkdir(parents=True)`` creates first),
    ``None`` when ``folder`` exists."""
    missing = None
    for path in (folder, *folder.parents):
        if path.exists():
            break
        missing = path
    return missing


def _remove_empty(folder: Path, up_to: Path) -> None:
    """Remove ``folder`` and its parents up to ``up_to`` (included) while they are empty."""
    for path in (folder, *folder.parents):
        try:
            path.rmdir()
        except OSError:
            return
        if path == up_to:
            return


def _move_into(source: Path, target: Path) -> None:
    """Move everything under ``source`` to the same place under ``target`` (files replace files; folders merge)."""
    for entry in source.iterdir():
        there = target / entry.name
        if entry.is_dir() and not entry.is_symlink() and there.is_dir():
            _move_into(entry, there)
        else:
            os.replace(entry, there)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or one without hard links
        shutil.copy2(source, target)


def download_into(name: str, root: Path, fetch: Callable[[Path], object], how: str, reuse: Sequence[str] = ()) -> None:
    """Run ``fetch(folder)`` (a torchvision download into ``folder``) in a new folder under ``root`` and move what it
    wrote into ``root``. On failure nothing is left (neither what was fetched nor the folders made for ``root``) and a
    one-line :class:`~lightning_sfl.errors.DatasetNotFoundError` says so: ``downloading <name> failed: <why>; <how>``
    (``how``: what to do instead, naming where the files go). ``reuse``: files under ``root`` (relative paths, e.g. an
    archive placed there) that ``fetch`` finds in its folder as well (linked, else copied): torchvision checks their
    sums and fetches them only if they fail."""
    created = _outermost_missing(root)
    staging: Path | None = None
    done = False
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-download-", dir=root))
        for relative in reuse:
            if (root / relative).is_file():
                (staging / relative).parent.mkdir(parents=True, exist_ok=True)
                _link_or_copy(root / relative, staging / relative)
        fetch(staging)
        _move_into(staging, root)
        done = True
    except Exception as err:  # network, HTTP, integrity, permission, disk: all end here in one line
        raise DatasetNotFoundError(f"downloading {name} failed: {failure_reason(err)}; {how}") from err
    finally:  # also on Ctrl-C
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if not done and created is not None:
            _remove_empty(root, created)


def ensure_files(
    name: str,
    root: Path,
    paths: list[Path],
    download: bool,
    fetch: Callable[[Path], object],
    how: str,
    reuse: Sequence[str] = (),
) -> None:
    """Raise a one-line :class:`~lightning_sfl.errors.DatasetNotFoundError` for the first missing path; with
    ``download``, first ``fetch(folder)`` (torchvision's download into ``folder``) by :func:`download_into`: a failed
    download is one line too (why, and ``how`` to place the files instead) and leaves nothing in ``root``; ``reuse``:
    files under ``root`` the download may use (:func:`download_into`)."""
    missing = [p for p in paths if not p.exists()]
    if missing and download:
        download_into(name, root, fetch, how, reuse)
        missing = [p for p in paths if not p.exists()]
    if missing:
        raise DatasetNotFoundError(
            f"{name} not found: expected {missing[0]}; pass --data.download=true to download it "
            f"(or place the files there)"
        )
