"""A run's checkpoints: each written whole or not at all, the previous round's kept beside the latest
(:class:`RoundCheckpoint`), and what a damaged one means (:func:`damage`, :func:`resume_point`).

- A checkpoint is written to ``<file>.partial``, flushed to the disk (``fsync``), then renamed over its name, and the
  folder is flushed: a kill or a power cut while it is written leaves the previous checkpoint as it was.
- With the defaults (``--checkpoint.save_top_k 1``, no ``monitor``) the previous round's checkpoint stays beside the
  latest until the next one is written: a latest checkpoint damaged afterwards (a disk that filled, a copy cut short)
  still leaves the round before it.
- ``fit --ckpt_path last`` of a run whose ``last.ckpt`` is damaged (truncated, empty, a link to a missing file) resumes
  from the newest intact checkpoint of the run and says so in one line; the damaged file is kept aside as
  ``<name>.damaged`` (nothing is deleted). With none intact it stops with one line: it never trains from round 0 into
  a run's existing logs. A ``last.ckpt`` that links out of its folder is refused, not followed.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint
from typing_extensions import override

from lightning_sfl.errors import ConfigError

__all__ = [
    "Resume", "RoundCheckpoint", "damage", "damaged_line", "durable_replace", "newest_intact", "resume_point",
    "round_checkpoints",
]  # fmt: skip

#: What a checkpoint file is written to before it is renamed over its name.
PARTIAL = ".partial"
#: What a damaged checkpoint is renamed to when a run resumes from an earlier one (kept, not deleted).
DAMAGED = ".damaged"


def durable_replace(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Rename ``source`` over ``target`` (in one folder) once its bytes are on the disk, and flush the folder, so that
    ``target`` is always either the old file or the whole new one."""
    with open(source, "rb") as f:
        os.fsync(f.fileno())
    os.replace(source, target)
    with contextlib.suppress(OSError):  # (a file system without folder handles)
        folder = os.open(os.path.dirname(os.path.abspath(target)), os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def _epoch_step(path: Path) -> tuple[int, int]:
    epoch, step = re.search(r"epoch=(\d+)", path.name), re.search(r"step=(\d+)", path.name)
    return int(epoch.group(1)) if epoch else -1, int(step.group(1)) if step else -1


def round_checkpoints(folder: str | os.PathLike) -> list[Path]:
    """The round checkpoints (``epoch=<e>-step=<s>*.ckpt``, regular files) in ``folder``, the latest first.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> for name in ("epoch=1-step=10.ckpt", "epoch=10-step=55.ckpt", "last.ckpt", "epoch=9-step=50.ckpt.partial"):
    ...     _ = (folder / name).write_text("")
    >>> [p.name for p in round_checkpoints(folder)]
    ['epoch=10-step=55.ckpt', 'epoch=1-step=10.ckpt']
    """
    found = [p for p in Path(folder).glob("epoch=*.ckpt") if p.is_file() and not p.is_symlink()]
    return sorted(found, key=lambda p: (*_epoch_step(p), p.stat().st_mtime), reverse=True)


def _loads(path: Path) -> str | None:
    """Why ``path`` cannot be read as a checkpoint (its archive, memory-mapped: no tensor is read), or ``None``."""
    import zipfile

    import torch

    if not zipfile.is_zipfile(path):  # (a truncated archive has lost its index, at the end of the file)
        return "is damaged (truncated, or not a checkpoint: no whole archive)"
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError:  # whole, but it holds objects only code could make: never loaded (not damage)
        return "is foreign (it holds objects that only code could make: not loaded)"
    except Exception as err:  # truncated zip, not a torch file
        text = str(err).strip()
        reason = f": {text.splitlines()[0].split('. ')[0]}" if text else ""
        return f"is damaged (truncated, or not a checkpoint{reason})"
    if not isinstance(loaded, dict) or "state_dict" not in loaded:
        return "is not a checkpoint of a run (no state_dict)"
    return None


def damage(path: str | os.PathLike) -> str | None:
    """Why the checkpoint ``path`` (a file, or a link such as ``last.ckpt``) cannot be used, in words, or ``None`` if
    it can: a link to a missing file (dangling), a link out of its folder (foreign: not followed), an empty file, a
    truncated or foreign one.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> (folder / "last.ckpt").symlink_to("epoch=3-step=20.ckpt")
    >>> damage(folder / "last.ckpt")
    'is a dangling link (to epoch=3-step=20.ckpt, which does not exist)'
    >>> _ = (folder / "empty.ckpt").write_bytes(b"")
    >>> damage(folder / "empty.ckpt")
    'is damaged (empty: 0 bytes)'
    """
    path = Path(path)
    if path.is_symlink():
        target = Path(os.readlink(path))
        resolved = (path.parent / target).resolve()
        if resolved.parent != path.parent.resolve():
            return f"is a link out of its folder (to {target}): not followed"
        if not resolved.exists():
            return f"is a dangling link (to {target}, which does not exist)"
    if not path.exists():
        return "is missing"
    if not path.is_file():
        return "is not a file"
    if path.stat().st_size == 0:
        return "is damaged (empty: 0 bytes)"
    return _loads(path)


def newest_intact(folder: str | os.PathLike, but: Path | None = None) -> Path | None:
    """The latest round checkpoint of ``folder`` that can be read (other than ``but``), or ``None``."""
    skip = but.resolve() if but is not None and but.exists() else None
    return next((p for p in round_checkpoints(folder) if p.resolve() != skip and damage(p) is None), None)


def damaged_line(path: Path, why: str, shown: str) -> str:
    """What a command says of a checkpoint it cannot use (``shown``: how it names it): what is wrong (``why``, from
    :func:`damage`) and the newest intact checkpoint beside it, if any (the one to give with ``--ckpt_path``)."""
    intact = newest_intact(path.parent, but=path)
    beside = (f"the newest intact checkpoint beside it is {intact.name} ({_rounds(intact)}): give it with --ckpt_path"
              if intact is not None else "no intact checkpoint is beside it")  # fmt: skip
    return f"{shown} {why}; {beside}"


def _rounds(path: Path) -> str:
    epoch = _epoch_step(path)[0]
    return f"round {epoch + 1}" if epoch >= 0 else path.name


@dataclass(frozen=True)
class Resume:
    """What ``fit --ckpt_path last`` resumes from in a run's checkpoint folder (:func:`resume_point`): ``intact``, the
    checkpoint (``last.ckpt`` itself when it can be used); ``why``: what is wrong with ``last.ckpt`` when it cannot
    (then :meth:`mend` points it at ``intact``)."""

    last: Path
    intact: Path
    why: str | None = None

    def line(self, shown: str) -> str | None:
        """``resuming runs/…: last.ckpt is damaged (…); from round 7's checkpoint (epoch=6-step=35.ckpt)``, or
        ``None``."""
        if self.why is None:
            return None
        return f"resuming {shown}: last.ckpt {self.why}; from {_rounds(self.intact)}'s checkpoint ({self.intact.name})"

    def mend(self) -> None:
        """Point ``last.ckpt`` at ``intact``, the damaged file kept as ``<name>.damaged`` (out of the way of the round's
        new checkpoint, not deleted), and drop what a killed process wrote in part (``*.partial``). Once every setting
        is checked, by the process that holds the run folder."""
        folder = self.last.parent
        for partial in folder.glob(f"*{PARTIAL}"):  # written in part by a process that was killed: never a checkpoint
            partial.unlink(missing_ok=True)
        if self.why is None:
            return
        target = self.last.resolve() if self.last.exists() else None
        if target is not None and target.parent == folder.resolve() and target != self.intact.resolve():
            target.rename(target.with_name(target.name + DAMAGED))
        self.last.unlink(missing_ok=True)
        self.last.symlink_to(self.intact.name)


def resume_point(last: Path, shown: str) -> Resume | None:
    """What ``fit --ckpt_path last`` resumes from, given the run's ``last.ckpt`` (read only: :meth:`Resume.mend` makes
    it so): ``last`` itself if it can be used; else, if it is damaged or missing, the newest intact checkpoint beside
    it; ``None`` when the folder holds no checkpoint at all (no round finished). A one-line
    :class:`~lightning_sfl.errors.ConfigError` when ``last`` is damaged and none is intact, or when ``last`` links out
    of its folder. ``shown``: the run folder, as the lines name it."""
    folder = last.parent
    if not (last.exists() or last.is_symlink()):
        intact = newest_intact(folder)
        return None if intact is None else Resume(last, intact, "is missing")
    why = damage(last)
    if why is None:
        return Resume(last, last)
    if "out of its folder" in why:
        raise ConfigError(f"{shown}: checkpoints/last.ckpt {why}; remove it, or give a checkpoint with --ckpt_path")
    intact = newest_intact(folder, but=last)
    if intact is None:
        raise ConfigError(
            f"{shown}: checkpoints/last.ckpt {why}, and no intact checkpoint of the run is left: nothing to resume "
            "(start a new run without --ckpt_path last, or give a checkpoint with --ckpt_path)"
        )
    return Resume(last, intact, why)


class RoundCheckpoint(ModelCheckpoint):
    """Lightning's :class:`~lightning.pytorch.callbacks.ModelCheckpoint` (every option of ``--checkpoint.*``), with
    each checkpoint written whole or not at all (:func:`durable_replace` of ``<file>.partial``) and, with
    ``save_top_k=1`` and no ``monitor`` (the defaults), the previous round's checkpoint kept until the next is written
    (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._previous_round: str | None = None  # the round checkpoint kept beside the latest

    @override
    def _save_checkpoint(self, trainer, filepath: str) -> None:
        """Lightning's, written to ``<file>.partial`` first and renamed over ``filepath`` once on the disk (the first
        process writes; every process waits until it has)."""
        from weakref import proxy

        partial = f"{filepath}{PARTIAL}"
        trainer.save_checkpoint(partial, self.save_weights_only)
        if trainer.is_global_zero:
            durable_replace(partial, filepath)
        trainer.strategy.barrier("RoundCheckpoint.save")
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.after_save_checkpoint(proxy(self))

    @property
    @override
    def state_key(self) -> str:
        """Lightning's key of the callback's state in a checkpoint, as ``ModelCheckpoint``'s (checkpoints written
        before, and by it, resume with their state)."""
        return "ModelCheckpoint" + super().state_key.removeprefix(type(self).__qualname__)

    @property
    def _keeps_previous(self) -> bool:
        return self.monitor is None and self.save_top_k == 1

    @override
    def _remove_checkpoint(self, trainer, filepath: str) -> None:
        """The round checkpoint Lightning replaces stays until the next one replaces it (the one before goes)."""
        if not self._keeps_previous or Path(filepath).name.startswith(self.CHECKPOINT_NAME_LAST):
            super()._remove_checkpoint(trainer, filepath)
            return
        held, self._previous_round = self._previous_round, filepath
        if held and held != filepath and os.path.abspath(held) != os.path.abspath(self.best_model_path):
            super()._remove_checkpoint(trainer, held)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "previous_round": self._previous_round}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Lightning's, and the previous round's checkpoint; a run folder that was moved (copied, renamed) since the
        checkpoint was written has its checkpoints where it is now: the paths the state names are taken there (else
        Lightning would keep none, warn, and write ``last-v1.ckpt`` beside the run's ``last.ckpt``)."""
        old = state_dict.get("dirpath")
        if old and self.dirpath and os.path.abspath(old) != os.path.abspath(self.dirpath):
            state_dict = {key: _moved(value, str(old), str(self.dirpath)) for key, value in state_dict.items()}
            state_dict["dirpath"] = self.dirpath
        super().load_state_dict(state_dict)
        if state_dict.get("dirpath", self.dirpath) == self.dirpath:
            self._previous_round = state_dict.get("previous_round")


def _moved(value, old: str, new: str):
    """``value`` (a path, or a dict keyed by paths) with a path in the folder ``old`` taken to the folder ``new``.

    >>> _moved({"/a/run/checkpoints/e.ckpt": 1}, "/a/run/checkpoints", "/b/run/checkpoints")
    {'/b/run/checkpoints/e.ckpt': 1}
    """
    if isinstance(value, dict):
        return {_moved(k, old, new): v for k, v in value.items()}
    if isinstance(value, str) and value and os.path.dirname(os.path.abspath(value)) == os.path.abspath(old):
        return os.path.join(new, os.path.basename(value))
    return value
