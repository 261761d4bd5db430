"""Read what an offline W&B run actually stored: history, summary, config, metric definitions and media.

An offline run (``WANDB_MODE=offline`` or ``WandbLogger(offline=True)``) lives in
``<save_dir>/wandb/offline-run-<time>-<id>/``::

    run-<id>.wandb       the transaction log: every record the SDK sent to wandb-core, in order
    files/media/...      tables (``*.table.json``), images (``*.png``), ... referenced by history rows

The transaction log is read by W&B's own reader, ``wandb leet inspect --json`` (wandb-core; one JSON object per
record, ``{"num", "type", <type>: {...}}``), not by a parser of the file format of our own. What this module relies
on from that output (pinned by ``tests/integration/test_wandb_offline.py``): a ``run`` record with ``run_id`` and the
initial ``config.update``; ``history`` records whose ``item`` maps each key to its JSON value, a logged object (a table)
flattened into ``<key>.<field>`` entries (``<key>._type``, ``<key>.path``, ...); ``summary`` records with
``update``; ``config`` records with ``update`` (a nested key as its dotted path, ``_wandb.visualize.<chart>``);
``metric`` records (``name`` or ``glob_name``, ``step_metric``, ``options``). A log cut short by a killed process
reads up to its last complete record.

Example::

    from lightning_sfl.wandb.offline import read_offline_run

    run = read_offline_run("runs")  # a save_dir (latest offline run), a run directory or a .wandb file
    run.keys()                      # every key that appears in a history row
    [row["test/acc"] for row in run.rows_with("test/acc")]
    ref = run.last("per_class/table")  # {"_type": "table-file", "path": "media/table/...", ...}
    table = run.load_table(ref)     # {"columns": [...], "data": [[...], ...]}
    run.summary["test/acc"], run.config["lr"], run.media_files
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["OfflineRun", "find_offline_runs", "inspect_log", "read_offline_run"]


def inspect_log(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a ``.wandb`` transaction log (or of the run directory holding one) as W&B's own reader,
    ``wandb leet inspect --json``, prints it: ``[{"num": 1, "type": "header", "header": {...}}, ...]``."""
    cmd = [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False, timeout=300)
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise ValueError(f"wandb leet inspect could not read {path}: {detail}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _nest_objects(flat: dict[str, Any]) -> dict[str, Any]:
    """A history row or summary as W&B shows it: a logged object's ``<key>.<field>`` entries (those of a key with
    a ``<key>._type``) gathered into one dict under ``<key>``; every other key (dots included, as in
    ``dissimilarity/client.0.weight``) kept as it is."""
    objects = {k[: -len("._type")] for k in flat if k.endswith("._type")}
    out: dict[str, Any] = {}
    for key, value in flat.items():
        owner = next((o for o in objects if key.startswith(o + ".")), None)
        if owner is None:
            out[key] = value
        else:
            out.setdefault(owner, {})[key[len(owner) + 1 :]] = value
    return out


def _apply(target: dict[str, Any], change: dict[str, Any] | None, nested_paths: bool = False) -> None:
    """A summary or config change (``update``: values by key; ``remove``: keys) applied to ``target``. With
    ``nested_paths`` (config) a dotted key is the path of a nested key, as the reader prints one (W&B's
    ``_wandb.visualize.<chart>``), and dict values merge into dicts."""
    change = change or {}
    for key, value in (change.get("update") or {}).items():
        *parents, leaf = key.split(".") if nested_paths else [key]
        node = target
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        old = node.get(leaf)
        if isinstance(old, dict) and isinstance(value, dict):
            _apply(old, {"update": value})
        else:
            node[leaf] = value
    removed = change.get("remove") or []
    for key in removed if isinstance(removed, list) else list(removed):
        target.pop(key if isinstance(key, str) else ".".join(key.get("nested_key") or [key.get("key", "")]), None)


@dataclass
class OfflineRun:
    """The decoded content of one offline run.

    Attributes:
        run_dir: the ``offline-run-*`` directory.
        records: every record of the transaction log, in order, as ``wandb leet inspect --json`` prints it.
        history: one dict per history row (``run.log`` call), nested keys rebuilt (a table reference is a
            dict with ``_type``, ``path``, ``nrows``, ...).
        summary: the final run summary (all summary updates and removals applied in order).
        config: the final run config (the run record's config, then every config update and removal).
        metrics: the ``define_metric`` records as dicts (``name`` or ``glob_name``, ``step_metric``, ...).
        media_files: paths relative to ``files/`` of everything under ``files/media/``, sorted.
    """

    run_dir: Path
    records: list[dict[str, Any]]
    history: list[dict[str, Any]]
    summary: dict[str, Any]
    config: dict[str, Any]
    metrics: list[dict[str, Any]]
    media_files: list[str] = field(default_factory=list)

    @property
    def run(self) -> dict[str, Any]:
        """The first ``run`` record (``run_id``, ``project``, ``tags``, ``run_group``, the initial ``config``, ...)."""
        return next(r["run"] for r in self.records if r["type"] == "run")

    @property
    def run_id(self) -> str:
        """The W&B run id."""
        return self.run["run_id"]

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
    """Read an offline run: ``path`` is a run directory, its ``.wandb`` file, or a save dir (latest run)."""
    run_dir, log_file = _resolve(Path(path))
    records = inspect_log(log_file)
    history: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    config: dict[str, Any] = {}
    metrics: list[dict[str, Any]] = []
    for record in records:
        kind = record.get("type")
        body = record.get(kind) or {}
        if kind == "history":
            history.append(_nest_objects(body.get("item") or {}))
        elif kind == "summary":
            _apply(summary, body)
        elif kind == "config":
            _apply(config, body, nested_paths=True)
        elif kind == "run":
            _apply(config, body.get("config"), nested_paths=True)
            _apply(summary, body.get("summary"))
        elif kind == "metric":
            metrics.append(body)
    media = run_dir / "files" / "media"
    media_files = sorted(p.relative_to(run_dir / "files").as_posix() for p in media.rglob("*") if p.is_file())
    return OfflineRun(run_dir, records, history, _nest_objects(summary), config, metrics, media_files)
