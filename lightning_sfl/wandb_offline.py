"""Read what an offline W&B run actually stored: history, summary, config, metric definitions and media.

An offline run (``WANDB_MODE=offline`` or ``WandbLogger(offline=True)``) lives in
``<save_dir>/wandb/offline-run-<time>-<id>/``::

    run-<id>.wandb       the transaction log: every record the SDK sent to wandb-core, in order
    files/media/...      tables (``*.table.json``), images (``*.png``), ... referenced by history rows

wandb 0.31 no longer ships a Python reader of the transaction log (``wandb.sdk.internal.datastore`` went with the
Python backend; wandb-core reads it in Go, ``wandb leet inspect`` prints it). Its format is unchanged: a 7-byte
file header (``":W&B"``, magic ``0xBEE1``, version 0) followed by LevelDB-log framing (32 KiB blocks; each chunk
has a header ``crc32: u32 LE, length: u16 LE, type: u8`` with type FULL/FIRST/MIDDLE/LAST; block tails shorter
than a header are zero padding; the CRC is ``zlib.crc32(data, crc32(bytes([type])))``). Each reassembled
payload is one serialized ``wandb.proto.wandb_internal_pb2.Record``. This module implements that framing
(:func:`iter_log_payloads`, checksums verified) and decodes the records with wandb's own protobuf classes.

Example::

    from lightning_sfl.wandb_offline import read_offline_run

    run = read_offline_run("runs")  # a save_dir (latest offline run), a run directory or a .wandb file
    run.keys()                      # every key that appears in a history row
    [row["test/acc"] for row in run.rows_with("test/acc")]
    ref = run.last("per_class/table")  # {"_type": "table-file", "path": "media/table/...", ...}
    table = run.load_table(ref)     # {"columns": [...], "data": [[...], ...]}
    run.summary["test/acc"], run.config["lr"], run.media_files
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from wandb.proto import wandb_internal_pb2 as pb

__all__ = ["OfflineRun", "find_offline_runs", "iter_log_payloads", "read_offline_run", "read_records"]

_FILE_HEADER = struct.Struct("<4sHB")  # ident, magic, version
_FILE_IDENT, _FILE_MAGIC, _FILE_VERSION = b":W&B", 0xBEE1, 0
_CHUNK_HEADER = struct.Struct("<IHB")  # crc32, length, type
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_TYPE_CRC = {t: zlib.crc32(bytes([t])) for t in (_FULL, _FIRST, _MIDDLE, _LAST)}


def iter_log_payloads(path: str | Path) -> Iterator[bytes]:
    """The payloads (serialized ``Record`` messages) of a ``.wandb`` transaction log, in order.

    A log cut short by a killed process ends at its last complete record; a bad header, checksum or chunk
    sequence raises ``ValueError``.
    """
    data = Path(path).read_bytes()
    if len(data) < _FILE_HEADER.size:
        raise ValueError(f"{path}: too short for a W&B transaction log")
    ident, magic, version = _FILE_HEADER.unpack_from(data, 0)
    if (ident, magic, version) != (_FILE_IDENT, _FILE_MAGIC, _FILE_VERSION):
        raise ValueError(f"{path}: not a W&B transaction log (header {ident!r}, {magic:#x}, {version})")
    pos, pending = _FILE_HEADER.size, None
    while True:
        left_in_block = _BLOCK - pos % _BLOCK
        if left_in_block < _CHUNK_HEADER.size:  # block trailer: zero padding
            pos += left_in_block
        if pos + _CHUNK_HEADER.size > len(data):
            return
        crc, length, kind = _CHUNK_HEADER.unpack_from(data, pos)
        if crc == 0 and length == 0 and kind == 0:  # preallocated / zeroed tail
            return
        start = pos + _CHUNK_HEADER.size
        if start + length > len(data):
            return  # truncated last record
        chunk = data[start : start + length]
        if kind not in _TYPE_CRC:
            raise ValueError(f"{path}: unknown chunk type {kind} at byte {pos}")
        if zlib.crc32(chunk, _TYPE_CRC[kind]) != crc:
            raise ValueError(f"{path}: checksum mismatch at byte {pos}")
        pos = start + length
        if kind == _FULL:
            if pending is not None:
                raise ValueError(f"{path}: FULL chunk inside a fragmented record at byte {pos}")
            yield chunk
        elif kind == _FIRST:
            pending = bytearray(chunk)
        elif pending is None:
            raise ValueError(f"{path}: chunk type {kind} without a FIRST chunk at byte {pos}")
        else:
            pending += chunk
            if kind == _LAST:
                yield bytes(pending)
                pending = None


def read_records(path: str | Path) -> list[pb.Record]:
    """Every ``Record`` of a ``.wandb`` transaction log."""
    records = []
    for payload in iter_log_payloads(path):
        record = pb.Record()
        record.ParseFromString(payload)
        records.append(record)
    return records


def _json(text: str) -> Any:
    return json.loads(text) if text else None


def _history_value(item: pb.HistoryItem) -> Any:
    """A history item's value: the typed oneof (wandb >= 0.25) or the legacy ``value_json``."""
    case = item.WhichOneof("value")
    if case is None:
        return _json(item.value_json)
    if case == "none":
        return None
    if case == "json":
        return _json(item.json)
    return getattr(item, case)


def _path(item) -> list[str]:
    return [item.key] if item.key else list(item.nested_key)


def _set(target: dict, path: list[str], value: Any) -> None:
    for part in path[:-1]:
        child = target.get(part)
        if not isinstance(child, dict):
            child = target[part] = {}
        target = child
    target[path[-1]] = value


def _remove(target: dict, path: list[str]) -> None:
    for part in path[:-1]:
        target = target.get(part)
        if not isinstance(target, dict):
            return
    target.pop(path[-1], None)


@dataclass
class OfflineRun:
    """The decoded content of one offline run.

    Attributes:
        run_dir: the ``offline-run-*`` directory.
        records: every ``Record`` of the transaction log, in order.
        history: one dict per history row (``run.log`` call), nested keys rebuilt (a table reference is a
            dict with ``_type``, ``path``, ``nrows``, ...).
        summary: the final run summary (all summary updates and removals applied in order).
        config: the final run config (the run record's config, then every config update and removal).
        metrics: the ``define_metric`` records as dicts (``name`` or ``glob_name``, ``step_metric``, ...).
        media_files: paths relative to ``files/`` of everything under ``files/media/``, sorted.
    """

    run_dir: Path
    records: list[pb.Record]
    history: list[dict[str, Any]]
    summary: dict[str, Any]
    config: dict[str, Any]
    metrics: list[dict[str, Any]]
    media_files: list[str] = field(default_factory=list)

    def keys(self) -> set[str]:
        """Every top-level key that appears in at least one history row."""
        return {k for row in self.history for k in row}

    def rows_with(self, key: str) -> list[dict[str, Any]]:
        """The history rows that contain ``key``, in order."""
        return [row for row in self.history if key in row]

    def last(self, key: str) -> Any:
        """The value of ``key`` in its last history row (``KeyError`` if never logged)."""
        rows = self.rows_with(key)
        if not rows:
            raise KeyError(key)
        return rows[-1][key]

    @property
    def tables(self) -> list[str]:
        return [p for p in self.media_files if p.endswith(".table.json")]

    @property
    def images(self) -> list[str]:
        return [p for p in self.media_files if p.endswith(".png")]

    def file(self, relative: str) -> Path:
        """A run file by its path relative to ``files/`` (as history references write it)."""
        return self.run_dir / "files" / relative

    def load_table(self, ref: dict[str, Any] | str) -> dict[str, Any]:
        """The JSON of a logged ``wandb.Table``, from its history reference or its relative path."""
        relative = ref if isinstance(ref, str) else ref["path"]
        return json.loads(self.file(relative).read_text())


def find_offline_runs(save_dir: str | Path) -> list[Path]:
    """The ``offline-run-*`` directories under ``save_dir`` (or ``save_dir/wandb``), oldest first."""
    save_dir = Path(save_dir)
    runs = [p for base in (save_dir, save_dir / "wandb") for p in base.glob("offline-run-*") if p.is_dir()]
    return sorted(set(runs), key=lambda p: p.name)


def _resolve(path: Path) -> tuple[Path, Path]:
    """``(run_dir, log_file)`` for a ``.wandb`` file, a run directory or a save dir (latest run)."""
    if path.is_file():
        return path.parent, path
    logs = sorted(path.glob("run-*.wandb"))
    if not logs:
        runs = find_offline_runs(path)
        if not runs:
            raise FileNotFoundError(f"no offline W&B run (run-*.wandb) in or under {path}")
        return _resolve(runs[-1])
    if len(logs) > 1:
        raise ValueError(f"{path} holds several transaction logs: {[p.name for p in logs]}")
    return path, logs[0]


def read_offline_run(path: str | Path) -> OfflineRun:
    """Decode an offline run: ``path`` is a run directory, its ``.wandb`` file, or a save dir (latest run)."""
    run_dir, log_file = _resolve(Path(path))
    records = read_records(log_file)
    history: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    config: dict[str, Any] = {}
    metrics: list[dict[str, Any]] = []

    def apply(target: dict, update, remove) -> None:
        for item in update:
            _set(target, _path(item), _json(item.value_json))
        for item in remove:
            _remove(target, _path(item))

    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row: dict[str, Any] = {}
            for item in record.history.item:
                _set(row, _path(item), _history_value(item))
            history.append(row)
        elif kind == "summary":
            apply(summary, record.summary.update, record.summary.remove)
        elif kind == "config":
            apply(config, record.config.update, record.config.remove)
        elif kind == "run":
            apply(config, record.run.config.update, record.run.config.remove)
            apply(summary, record.run.summary.update, record.run.summary.remove)
        elif kind == "metric":
            metrics.append(MessageToDict(record.metric, preserving_proto_field_name=True))
    media = run_dir / "files" / "media"
    media_files = sorted(p.relative_to(run_dir / "files").as_posix() for p in media.rglob("*") if p.is_file())
    return OfflineRun(run_dir, records, history, summary, config, metrics, media_files)
