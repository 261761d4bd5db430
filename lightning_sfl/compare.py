"""``lightning-sfl compare``: train several methods over several seeds and tabulate the results.

::

    lightning-sfl compare --config configs/digits/scala.yaml --methods scala fedavg --seeds 0 1 2 \\
        --out docs/results/digits --target_acc 0.9 --overrides --data.alpha=1 --trainer.max_epochs=50

Every method × seed is one ``fit`` run on the same (merged) config. For each run the model section of the config
is rewritten for that method: ``class_path`` becomes the method's class and only the ``init_args`` its
constructor accepts (its own parameters plus, through ``**kwargs``, those of its parent classes) are kept, so
e.g. SCALA's ``concat_activations`` is dropped for FedAvg; the same holds for ``--model.*`` overrides. The seed
sets both ``--seed_everything`` and ``--data.seed``, so for a given seed all methods train on identical client
shards and identical per-round client and minibatch draws.

Outputs in ``--out``: ``metrics.csv`` (per-round metrics of every run), ``results.md`` (one row per method) and
``accuracy.png`` (test accuracy vs round, mean over seeds with a min-max band). Each run lives in
``runs/<method>/seed<seed>/``: ``run_config.yaml`` (the generated config), ``command.txt`` (the equivalent
``lightning-sfl fit`` command), ``log.txt`` (output, ``--jobs > 1`` only) and ``logs/`` (Lightning's
``metrics.csv`` and resolved ``config.yaml``; checkpoints are deleted unless ``--keep_checkpoints``).

The aggregation (:func:`read_lightning_metrics`, :func:`summarize`, :func:`format_table`,
:func:`accuracy_curves`) is pure and works on plain per-round records, without training.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib
import inspect
import io
import math
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ACC_KEY = "test/acc"
ROUND_BYTES_KEY = "comm/total_bytes"
CUM_BYTES_KEY = "comm/cumulative_bytes"
#: Arguments the runner sets itself for every run; overriding them would break the comparison.
RESERVED_OVERRIDES = ("seed_everything", "data.seed", "trainer.logger", "trainer.default_root_dir", "config")
#: Model arguments filled in from the data module by the CLI (not listed in the settings).
LINKED_MODEL_ARGS = ("num_classes", "input_shape")
#: Folder of a run's Lightning logs (``metrics.csv``, resolved ``config.yaml``, checkpoints) inside its run folder.
LOG_SUBDIR = "logs"
FIT_FLAGS = ("--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false")


# ====================================================================== per-round records (pure)
def _to_float(value: str | None) -> float | None:
    if value is None or value == "":
        return None
    try:
        return float(value)
    except ValueError:
        return None


def read_lightning_metrics(path: str | os.PathLike) -> list[dict[str, float]]:
    """Per-round records from a Lightning ``CSVLogger`` ``metrics.csv``.

    Lightning writes the evaluation metrics (``test/acc``, ``round``, …) and the epoch-level training metrics
    (``comm/*``, ``train/*``) of one round in separate rows; they are merged by round (``round`` when logged,
    else ``epoch + 1``). Returns ``[{"round": r, "<logged name>": value, ...}]`` sorted by round, without the
    ``step``/``epoch`` bookkeeping columns.
    """
    by_round: dict[int, dict[str, float]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            values = {k: v for k, v in ((k, _to_float(v)) for k, v in row.items() if k) if v is not None}
            if "round" in values and math.isfinite(values["round"]):
                r = int(round(values["round"]))
            elif "epoch" in values:
                r = int(values["epoch"]) + 1
            else:
                continue
            record = by_round.setdefault(r, {})
            record.update({k: v for k, v in values.items() if k not in ("round", "epoch", "step")})
    return [{"round": r, **by_round[r]} for r in sorted(by_round)]


def divergence_round(records: Sequence[dict[str, float]]) -> int | None:
    """First round with a non-finite training loss or test accuracy, ``None`` if there is none."""
    for rec in records:
        for key, value in rec.items():
            if ((key.startswith("train/") and "loss" in key) or key == ACC_KEY) and not math.isfinite(value):
                return int(rec["round"])
    return None


@dataclass
class RunResult:
    """One ``fit`` run: its per-round records and, if it crashed, the error message."""

    method: str
    seed: int
    records: list[dict[str, float]] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def acc_records(self) -> list[dict[str, float]]:
        return [r for r in self.records if ACC_KEY in r]

    @property
    def diverged_at(self) -> int | None:
        return divergence_round(self.records)

    @property
    def status(self) -> str:
        """``failed`` (crashed or nothing evaluated), ``diverged`` (finished, non-finite values) or ``ok``."""
        if self.error is not None or not self.acc_records:
            return "failed"
        return "diverged" if self.diverged_at is not None else "ok"

    @property
    def completed(self) -> bool:
        return self.status != "failed"


def final_acc(records: Sequence[dict[str, float]]) -> float:
    """Test accuracy after the last evaluated round."""
    return [r for r in records if ACC_KEY in r][-1][ACC_KEY]


def best_acc(records: Sequence[dict[str, float]]) -> float:
    """Best test accuracy over the rounds (NaN rounds ignored; NaN if all are)."""
    accs = [r[ACC_KEY] for r in records if ACC_KEY in r and math.isfinite(r[ACC_KEY])]
    return max(accs) if accs else math.nan


def rounds_to_target(records: Sequence[dict[str, float]], target: float) -> int | None:
    """First round whose test accuracy is ``>= target``; ``None`` if never reached."""
    for rec in records:
        if ACC_KEY in rec and rec[ACC_KEY] >= target:
            return int(rec["round"])
    return None


def total_bytes(records: Sequence[dict[str, float]]) -> float | None:
    """Bytes exchanged over the whole run: the last ``comm/cumulative_bytes`` (else the sum of per-round)."""
    cumulative = [r[CUM_BYTES_KEY] for r in records if CUM_BYTES_KEY in r]
    if cumulative:
        return cumulative[-1]
    per_round = [r[ROUND_BYTES_KEY] for r in records if ROUND_BYTES_KEY in r]
    return sum(per_round) if per_round else None


# ====================================================================== summary rows (pure)
def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    if not values:
        raise ValueError("mean_std of no values")
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else 0.0)


@dataclass
class MethodSummary:
    """The numbers of one table row; statistics are over the completed runs (``ok`` or ``diverged``)."""

    method: str
    seeds: list[int]
    final_acc: list[float]
    best_acc: list[float]
    rounds_to_target: list[int | None]
    total_bytes: list[float]
    rounds: list[int]
    failures: list[tuple[int, str]]
    diverged: list[tuple[int, int]]

    @property
    def n_completed(self) -> int:
        return len(self.final_acc)


def summarize(results: Iterable[RunResult], target_acc: float | None = None) -> list[MethodSummary]:
    """One :class:`MethodSummary` per method, in order of first appearance."""
    by_method: dict[str, list[RunResult]] = {}
    for res in results:
        by_method.setdefault(res.method, []).append(res)
    rows = []
    for method, runs in by_method.items():
        runs = sorted(runs, key=lambda r: r.seed)
        done = [r for r in runs if r.completed]
        failures = []
        for r in runs:
            if not r.completed:
                failures.append((r.seed, r.error or "no test accuracy was logged"))
        rows.append(
            MethodSummary(
                method=method,
                seeds=[r.seed for r in runs],
                final_acc=[final_acc(r.records) for r in done],
                best_acc=[best_acc(r.records) for r in done],
                rounds_to_target=[rounds_to_target(r.records, target_acc) for r in done] if target_acc else [],
                total_bytes=[b for b in (total_bytes(r.records) for r in done) if b is not None],
                rounds=[int(r.acc_records[-1]["round"]) for r in done],
                failures=failures,
                diverged=[(r.seed, r.diverged_at) for r in done if r.diverged_at is not None],
            )
        )
    return rows


# ====================================================================== formatting (pure)
def format_bytes(n: float) -> str:
    """Bytes as megabytes with one decimal, 1 MB = 10**6 B: ``12_345_678 -> '12.3 MB'``."""
    return f"{n / 1e6:.1f} MB"


def format_acc(values: Sequence[float]) -> str:
    """Accuracies (fractions) as ``'mean ± std'`` in percent with 2 decimals; ``'—'`` for none."""
    if not values:
        return "—"
    mean, std = mean_std([100.0 * v for v in values])
    return f"{mean:.2f} ± {std:.2f}"


def format_rounds(values: Sequence[int | None]) -> str:
    """Mean round over the seeds reaching the target; ``' (k/n seeds)'`` if not all do, ``'—'`` if none."""
    reached = [v for v in values if v is not None]
    if not reached:
        return "—"
    text = f"{statistics.fmean(reached):.1f}"
    return text if len(reached) == len(values) else f"{text} ({len(reached)}/{len(values)} seeds)"


def _percent(target: float) -> str:
    return f"{100 * target:g}%"


def table_header(target_acc: float | None) -> list[str]:
    cols = ["method", "runs", "final test acc (%)", "best test acc (%)"]
    if target_acc is not None:
        cols.append(f"rounds to ≥ {_percent(target_acc)}")
    return [*cols, "total comm (MB)", "notes"]


def summary_cells(row: MethodSummary, target_acc: float | None) -> list[str]:
    """The cells of one table row (see :func:`table_header`)."""
    cells = [f"`{row.method}`", f"{row.n_completed}/{len(row.seeds)}", format_acc(row.final_acc)]
    cells.append(format_acc(row.best_acc))
    if target_acc is not None:
        cells.append(format_rounds(row.rounds_to_target))
    cells.append(format_bytes(statistics.fmean(row.total_bytes)) if row.total_bytes else "—")
    notes = []
    if row.failures:
        notes.append("failed: seed " + ", ".join(str(s) for s, _ in row.failures))
    if row.diverged:
        notes.append("diverged: seed " + ", ".join(str(s) for s, _ in row.diverged))
    cells.append("; ".join(notes))
    return cells


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def format_table(rows: Sequence[MethodSummary], target_acc: float | None = None) -> str:
    """Markdown table, one row per method."""
    header = table_header(target_acc)
    lines = [_md_row(header), "|" + "|".join("---" for _ in header) + "|"]
    lines += [_md_row(summary_cells(r, target_acc)) for r in rows]
    return "\n".join(lines)


def accuracy_curves(results: Iterable[RunResult]) -> dict[str, dict[str, list[float]]]:
    """Per method (completed runs only): ``round``, ``mean``, ``min``, ``max`` test accuracy and ``n`` runs
    per round (rounds evaluated by at least one run; NaN values ignored)."""
    per_method: dict[str, dict[int, list[float]]] = {}
    for res in results:
        if not res.completed:
            continue
        rounds = per_method.setdefault(res.method, {})
        for rec in res.acc_records:
            if math.isfinite(rec[ACC_KEY]):
                rounds.setdefault(int(rec["round"]), []).append(rec[ACC_KEY])
    curves = {}
    for method, rounds in per_method.items():
        order = sorted(rounds)
        curves[method] = {
            "round": [float(r) for r in order],
            "mean": [statistics.fmean(rounds[r]) for r in order],
            "min": [min(rounds[r]) for r in order],
            "max": [max(rounds[r]) for r in order],
            "n": [float(len(rounds[r])) for r in order],
        }
    return curves


def describe_data(data: dict[str, Any]) -> str:
    """Short description of a data setting: ``'digits, K=20, quantity α=2, ρ=0.25, B=64'``."""
    if not data:
        return "unknown setting"
    skew = {"quantity": ("α", "alpha"), "dirichlet": ("β", "beta"), "shards": ("shards/client", "shards_per_client")}
    part = str(data.get("partition", "?"))
    if part in skew and skew[part][1] in data:
        part = f"{part} {skew[part][0]}={data[skew[part][1]]}"
    bits = [str(data.get("dataset", "?"))]
    bits += [f"K={data['num_clients']}"] if "num_clients" in data else []
    bits.append(part)
    bits += [f"ρ={data['participation']}"] if "participation" in data else []
    bits += [f"B={data['batch_size']}"] if "batch_size" in data else []
    return ", ".join(bits)


# ====================================================================== configs and run plan
def resolve_method(name: str) -> type:
    """A registered name (``lightning_sfl.algorithms.ALGORITHMS``) or a dotted class path."""
    from lightning_sfl.algorithms import ALGORITHMS, SplitFedAlgorithm

    if name in ALGORITHMS:
        return ALGORITHMS[name]
    module, _, attr = name.rpartition(".")
    cls = None
    if module:
        with contextlib.suppress(ImportError, AttributeError):
            cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, SplitFedAlgorithm)):
        raise ValueError(
            f"unknown method {name!r}: not one of {', '.join(ALGORITHMS)} nor the path of a SplitFedAlgorithm class"
        )
    return cls


def class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def init_parameters(cls: type) -> set[str]:
    """Keyword arguments ``cls(...)`` accepts: its ``__init__`` parameters and, while an ``__init__`` takes
    ``**kwargs``, those of the next ``__init__`` up the MRO (how ``SCALA(**kwargs)`` reaches the base)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is object:
            break
        if "__init__" not in vars(klass):
            continue
        params = list(inspect.signature(klass.__init__).parameters.values())[1:]
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names


def deep_merge(base: dict, other: dict) -> dict:
    """``other`` merged into a copy of ``base`` (nested dicts merged, everything else replaced)."""
    out = dict(base)
    for key, value in other.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def load_configs(paths: Sequence[str | os.PathLike]) -> dict:
    """The YAML configs merged in order (later ones win), like repeated ``--config``."""
    merged: dict = {}
    for path in paths:
        with open(path) as f:
            loaded = yaml.safe_load(f) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"config {path} is not a mapping")
        if isinstance(loaded.get("model"), str):  # `model: SCALA` short form
            loaded["model"] = {"class_path": loaded["model"]}
        if (
            isinstance(loaded.get("model"), dict)
            and "class_path" in loaded["model"]
            and isinstance(merged.get("model"), dict)
            and merged["model"].get("class_path") != loaded["model"]["class_path"]
        ):
            merged["model"] = {}  # a new class: earlier init_args belonged to the old one
        merged = deep_merge(merged, loaded)
    return merged


def method_config(base: dict, cls: type) -> tuple[dict, list[str]]:
    """``base`` with its model section rewritten for ``cls``; also the ``init_args`` dropped as not accepted."""
    model = base.get("model") or {}
    init_args = dict(model.get("init_args") or {}) if isinstance(model, dict) else {}
    accepted = init_parameters(cls)
    kept = {k: v for k, v in init_args.items() if k in accepted}
    dropped = [k for k in init_args if k not in accepted]
    return {**base, "model": {"class_path": class_path(cls), "init_args": kept}}, dropped


def group_overrides(tokens: Sequence[str]) -> list[list[str]]:
    """Split override tokens into options: ``['--a=1', '--b', '2'] -> [['--a=1'], ['--b', '2']]``."""
    items: list[list[str]] = []
    for tok in tokens:
        if tok.startswith("--") or not items:
            items.append([tok])
        else:
            items[-1].append(tok)
    return items


def _override_key(item: Sequence[str]) -> str:
    return item[0].removeprefix("--").split("=", 1)[0]


def check_overrides(tokens: Sequence[str]) -> None:
    """Reject overrides of what the runner sets itself (seeds, the method, the logger, the configs)."""
    for item in group_overrides(tokens):
        if not item[0].startswith("--"):
            raise ValueError(f"override {item[0]!r} is not an option (expected --key=value or --key value)")
        key = _override_key(item)
        if key in ("model", "model.class_path") or any(key == r or key.startswith(r + ".") for r in RESERVED_OVERRIDES):
            raise ValueError(
                f"--{key} cannot be overridden: the runner sets the method (--methods), the seeds (--seeds, used for "
                "--seed_everything and --data.seed), the logger and output folders, and the configs (--config)"
            )


def method_overrides(tokens: Sequence[str], cls: type) -> tuple[list[str], list[str]]:
    """The override tokens that apply to ``cls``, and the ``--model.*`` options dropped as not accepted."""
    accepted = init_parameters(cls)
    kept: list[str] = []
    dropped: list[str] = []
    for item in group_overrides(tokens):
        key = _override_key(item)
        if key.startswith("model."):
            name = key.removeprefix("model.").removeprefix("init_args.").split(".")[0]
            if name not in accepted:
                dropped.append(" ".join(item))
                continue
        kept.extend(item)
    return kept, dropped


@dataclass
class RunSpec:
    method: str
    seed: int
    run_dir: Path
    fit_args: list[str]


def _dir_name(method: str) -> str:
    return re.sub(r"[^\w.-]", "_", method)


def fit_args(run_config: Path, overrides: Sequence[str], seed: int, run_dir: Path) -> list[str]:
    """Arguments of ``lightning-sfl fit`` for one run (CSV logger into ``run_dir``, no progress bar)."""
    return [
        "fit",
        "--config",
        str(run_config),
        *overrides,
        f"--seed_everything={seed}",
        f"--data.seed={seed}",
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.save_dir={run_dir}",
        "--trainer.logger.name=",
        f"--trainer.logger.version={LOG_SUBDIR}",
        f"--trainer.default_root_dir={run_dir}",
        *FIT_FLAGS,
    ]


@dataclass
class Plan:
    runs: list[RunSpec]
    classes: dict[str, str]  # method -> class path
    dropped: dict[str, list[str]]  # method -> dropped config init_args and overrides
    base: dict


def plan_runs(
    configs: Sequence[str | os.PathLike],
    methods: Sequence[str],
    seeds: Sequence[int],
    out: Path,
    overrides: Sequence[str] = (),
    write: bool = True,
) -> Plan:
    """Resolve methods, write one ``run_config.yaml`` per run (if ``write``) and build the ``fit`` arguments."""
    if len(set(methods)) != len(methods):
        raise ValueError(f"duplicate methods in {list(methods)}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"duplicate seeds in {list(seeds)}")
    check_overrides(overrides)
    base = load_configs(configs)
    out = Path(out).absolute()
    runs, classes, dropped = [], {}, {}
    for method in methods:
        cls = resolve_method(method)
        config, dropped_args = method_config(base, cls)
        kept_overrides, dropped_overrides = method_overrides(overrides, cls)
        classes[method] = class_path(cls)
        dropped[method] = [f"model.init_args.{k}" for k in dropped_args] + dropped_overrides
        for seed in seeds:
            run_dir = out / "runs" / _dir_name(method) / f"seed{seed}"
            run_config = run_dir / "run_config.yaml"
            if write:
                if run_dir.exists():
                    shutil.rmtree(run_dir)
                run_dir.mkdir(parents=True)
                with open(run_config, "w") as f:
                    f.write(
                        f"# generated by lightning-sfl compare: method {method}, from {', '.join(map(str, configs))}\n"
                    )
                    yaml.safe_dump(config, f, sort_keys=False)
            args = fit_args(run_config, kept_overrides, seed, run_dir)
            runs.append(RunSpec(method, seed, run_dir, args))
            if write:
                (run_dir / "command.txt").write_text("lightning-sfl " + shlex.join(args) + "\n")
    return Plan(runs, classes, dropped, base)


# ====================================================================== running
class _Tee(io.TextIOBase):
    """Writes to a stream and keeps a copy (to recover jsonargparse's ``error:`` line on SystemExit)."""

    def __init__(self, stream, copy: io.StringIO) -> None:
        self.stream, self.copy = stream, copy

    def write(self, s: str) -> int:
        self.copy.write(s)
        return self.stream.write(s)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


_ERROR_LINE = re.compile(r"^(?:[\w.]+(?:Error|Exception|Interrupt)\b.*|.*\berror:.*)$")


def error_from_output(text: str) -> str | None:
    """The last exception or ``error:`` line of a run's output."""
    lines = [ln.strip() for ln in text.splitlines() if _ERROR_LINE.match(ln.strip())]
    return lines[-1][:500] if lines else None


def _collect(spec: RunSpec, error: str | None, seconds: float, keep_checkpoints: bool) -> RunResult:
    metrics = spec.run_dir / LOG_SUBDIR / "metrics.csv"
    records = []
    if metrics.exists():
        try:
            records = read_lightning_metrics(metrics)
        except (OSError, csv.Error) as exc:
            error = error or f"could not read {metrics}: {exc}"
    if not keep_checkpoints:
        shutil.rmtree(spec.run_dir / LOG_SUBDIR / "checkpoints", ignore_errors=True)
    return RunResult(spec.method, spec.seed, records, error, seconds)


def run_in_process(spec: RunSpec, keep_checkpoints: bool = False) -> RunResult:
    """Train one run in this process; an exception (or a parser exit) is recorded as the run's error."""
    from lightning_sfl.cli import SFLCLI

    captured = io.StringIO()
    error = None
    start = time.perf_counter()
    try:
        with contextlib.redirect_stderr(_Tee(sys.stderr, captured)):
            SFLCLI(args=spec.fit_args)
    except SystemExit as exc:
        if exc.code not in (0, None):
            error = error_from_output(captured.getvalue()) or f"exited with code {exc.code}"
    except Exception as exc:  # a method may crash; the comparison goes on
        error = f"{type(exc).__name__}: {exc}"[:500]
    return _collect(spec, error, time.perf_counter() - start, keep_checkpoints)


def run_subprocess(spec: RunSpec, keep_checkpoints: bool = False) -> RunResult:
    """Train one run as ``lightning-sfl fit ... --torch_threads 1`` in a child process (output in ``log.txt``)."""
    cmd = [sys.executable, "-m", "lightning_sfl.cli", *spec.fit_args, "--torch_threads=1"]
    start = time.perf_counter()
    log_path = spec.run_dir / "log.txt"
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
    error = None
    if proc.returncode != 0:
        detail = error_from_output(log_path.read_text(errors="replace"))
        error = detail or f"exit code {proc.returncode} (see {log_path})"
    return _collect(spec, error, time.perf_counter() - start, keep_checkpoints)


def _report(i: int, n: int, res: RunResult) -> None:
    what = res.status
    if res.completed:
        what += f", final test acc {final_acc(res.records):.4f} after {res.acc_records[-1]['round']:.0f} rounds"
    else:
        what += f": {res.error or 'no test accuracy was logged'}"
    print(f"[compare {i}/{n}] {res.method} seed {res.seed}: {what} ({res.seconds:.1f} s)", flush=True)


def execute(runs: Sequence[RunSpec], jobs: int = 1, keep_checkpoints: bool = False) -> list[RunResult]:
    """All runs, in order: in this process for ``jobs == 1``, else ``jobs`` child processes at a time."""
    if jobs < 1:
        raise ValueError(f"jobs={jobs} must be >= 1")
    n = len(runs)
    if jobs == 1:
        results = []
        for i, spec in enumerate(runs, 1):
            results.append(run_in_process(spec, keep_checkpoints))
            _report(i, n, results[-1])
        return results
    done = 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_subprocess, spec, keep_checkpoints) for spec in runs]
        results = []
        for fut in futures:
            results.append(fut.result())
            done += 1
            _report(done, n, results[-1])
    return results


# ====================================================================== outputs
def write_metrics_csv(results: Sequence[RunResult], path: Path) -> None:
    """One row per run and round: method, seed, status, round, test_acc, round_bytes, cumulative_bytes and
    every other logged metric under its logged name."""
    fixed = {"test_acc": ACC_KEY, "round_bytes": ROUND_BYTES_KEY, "cumulative_bytes": CUM_BYTES_KEY}
    extra = sorted(
        {k for res in results for rec in res.records for k in rec} - set(fixed.values()) - {"round"},
        key=lambda k: (k.rstrip("0123456789"), int(re.search(r"\d*$", k).group() or -1)),
    )
    header = ["method", "seed", "status", "round", *fixed, *extra]
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for res in results:
            for rec in res.records:
                values = [rec.get(fixed[k], rec.get(k)) for k in fixed] + [rec.get(k) for k in extra]
                writer.writerow(
                    [res.method, res.seed, res.status, int(rec["round"]), *["" if v is None else v for v in values]]
                )


def read_metrics_csv(path: Path) -> list[RunResult]:
    """The runs of a ``metrics.csv`` written by :func:`write_metrics_csv` (failed runs without rows are lost)."""
    runs: dict[tuple[str, int], RunResult] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["method"], int(row["seed"]))
            res = runs.setdefault(key, RunResult(*key))
            rec = {"round": float(row["round"])}
            names = {"test_acc": ACC_KEY, "round_bytes": ROUND_BYTES_KEY, "cumulative_bytes": CUM_BYTES_KEY}
            for k, v in row.items():
                if k not in ("method", "seed", "status", "round") and (value := _to_float(v)) is not None:
                    rec[names.get(k, k)] = value
            res.records.append(rec)
    return list(runs.values())


def plot_accuracy(results: Sequence[RunResult], path: Path, title: str, target_acc: float | None = None) -> None:
    """Test accuracy (%) vs round per method: mean over seeds, shaded min-max band."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(8, 5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    curves = accuracy_curves(results)
    for method, c in curves.items():
        n = int(max(c["n"]))
        (line,) = ax.plot(c["round"], [100 * v for v in c["mean"]], label=f"{method} ({n} seed{'s' * (n != 1)})")
        if n > 1:
            lo, hi = [100 * v for v in c["min"]], [100 * v for v in c["max"]]
            ax.fill_between(c["round"], lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    if target_acc is not None:
        ax.axhline(
            100 * target_acc, color="grey", linestyle="--", linewidth=0.8, label=f"target {_percent(target_acc)}"
        )
    if not curves:
        ax.text(0.5, 0.5, "no completed runs", ha="center", va="center", transform=ax.transAxes)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if curves or target_acc is not None:
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)


def _resolved_config(run_dir: Path) -> dict:
    path = run_dir / LOG_SUBDIR / "config.yaml"  # written by LightningCLI: the fully resolved config of the run
    if not path.exists():
        path = run_dir / "run_config.yaml"
    if not path.exists():
        return {}
    with open(path) as f:
        return yaml.safe_load(f) or {}


def _fmt_value(v: Any) -> str:
    return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()


def _settings(plan: Plan, results: Sequence[RunResult]) -> tuple[dict, dict, dict[str, dict]]:
    """(data, trainer, model init_args per method) from the resolved configs, completed runs first."""
    status = {(r.method, r.seed): r.completed for r in results}
    specs = sorted(plan.runs, key=lambda s: not status.get((s.method, s.seed), False))  # stable: completed first
    data, trainer, models = {}, {}, {}
    for spec in specs:
        cfg = _resolved_config(spec.run_dir)
        if not cfg:
            continue
        if not data and cfg.get("data"):
            data, trainer = dict(cfg["data"]), dict(cfg.get("trainer") or {})
        if spec.method not in models:
            models[spec.method] = dict((cfg.get("model") or {}).get("init_args") or {})
    if not data:
        data, trainer = dict(plan.base.get("data") or {}), dict(plan.base.get("trainer") or {})
    return data, trainer, models


def command_line(args: argparse.Namespace) -> str:
    """The ``lightning-sfl compare`` command that reproduces ``args``."""
    parts = ["lightning-sfl", "compare"]
    for cfg in args.config:
        parts += ["--config", str(cfg)]
    parts += ["--methods", *args.methods, "--seeds", *map(str, args.seeds), "--out", str(args.out)]
    if args.target_acc is not None:
        parts += ["--target_acc", f"{args.target_acc:g}"]
    if args.jobs != 1:
        parts += ["--jobs", str(args.jobs)]
    if args.keep_checkpoints:
        parts.append("--keep_checkpoints")
    if args.overrides:
        parts += ["--overrides", *args.overrides]
    return shlex.join(parts)


def results_markdown(
    args: argparse.Namespace, plan: Plan, results: Sequence[RunResult], rows: Sequence[MethodSummary]
) -> str:
    data, trainer, models = _settings(plan, results)
    title = describe_data(data)
    shown_data = {k: v for k, v in data.items() if k not in ("seed", "root", "download")}
    lines = [
        f"# Comparison: {title}",
        "",
        "Produced by:",
        "",
        "```bash",
        command_line(args),
        "```",
        "",
        "## Settings",
        "",
        f"- configs: {', '.join(f'`{c}`' for c in args.config)}",
        "- data: " + ", ".join(f"{k}={_fmt_value(v)}" for k, v in shown_data.items()),
        f"- rounds (`trainer.max_epochs`): {trainer.get('max_epochs', '?')}",
        f"- seeds: {', '.join(map(str, args.seeds))} (each sets `--seed_everything` and `--data.seed`: for a given "
        "seed every method sees the same client shards and the same per-round client and minibatch draws)",
        f"- overrides: {' '.join(f'`{o}`' for o in args.overrides) if args.overrides else 'none'}",
        f"- target accuracy: {_percent(args.target_acc) if args.target_acc is not None else 'none'}",
        "- methods:",
    ]
    for method, path in plan.classes.items():
        init = {k: v for k, v in models.get(method, {}).items() if k not in LINKED_MODEL_ARGS}
        line = f"  - `{method}` (`{path}`): " + (", ".join(f"{k}={_fmt_value(v)}" for k, v in init.items()) or "—")
        if plan.dropped.get(method):
            line += "; not accepted by this class, dropped: " + ", ".join(f"`{d}`" for d in plan.dropped[method])
        lines.append(line)
    lines += [
        "",
        "## Results",
        "",
        format_table(rows, args.target_acc),
        "",
        "runs: completed/started. Over the completed runs (diverged ones included): final = test accuracy after "
        "the last round, best = maximum over rounds, mean ± sample std over seeds"
        + (
            "; rounds to target = first round with test accuracy ≥ target, mean over the seeds reaching it"
            if args.target_acc is not None
            else ""
        )
        + "; total comm = bytes exchanged over the whole run (last `comm/cumulative_bytes`), mean over seeds, "
        "1 MB = 10^6 B.",
    ]
    notes = []
    for row in rows:
        notes += [f"- `{row.method}` seed {s}: failed: {msg}" for s, msg in row.failures]
        notes += [f"- `{row.method}` seed {s}: diverged (non-finite values from round {r})" for s, r in row.diverged]
    if notes:
        lines += ["", "## Failures and divergences", "", *notes]
    lines += [
        "",
        "Files: `metrics.csv` (per-round metrics of every run), `accuracy.png` (test accuracy vs round, mean over "
        "seeds, band: min-max), `runs/<method>/seed<seed>/` (`command.txt`: the equivalent `lightning-sfl fit` "
        "command; `run_config.yaml`: its config; `logs/`: Lightning's `metrics.csv` and resolved `config.yaml`).",
        "",
    ]
    return "\n".join(lines)


# ====================================================================== command line
OPTIONS = ("--config", "--methods", "--seeds", "--out", "--target_acc", "--jobs", "--overrides", "--keep_checkpoints")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lightning-sfl compare",
        description="Train several split-FL methods over several seeds on one config; write metrics.csv, "
        "results.md (one row per method) and accuracy.png into --out.",
        epilog="Overrides are passed to every `lightning-sfl fit` run; they run up to the next compare option (or "
        "give them after `--`). `--model.*` overrides a method's class does not accept are dropped for it.",
    )
    parser.add_argument(
        "--config", action="append", required=True, metavar="YAML", help="base config (repeat to merge several)"
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        default=None,
        metavar="NAME",
        help="registered names (lightning_sfl.algorithms.ALGORITHMS) or class paths; default: all registered",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], metavar="SEED", help="seeds (default: 0)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--target_acc", type=float, default=None, help="test accuracy (fraction) to reach")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="parallel runs as child `lightning-sfl fit --torch_threads 1` processes (1: in this process); "
        "methods given as class paths must then be importable by those processes",
    )
    parser.add_argument("--keep_checkpoints", action="store_true", help="keep each run's checkpoints")
    parser.add_argument(
        "--overrides", nargs="*", default=[], metavar="ARG", help='fit options, e.g. --overrides "--data.alpha=1"'
    )
    return parser


def split_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Separate the override tokens (which look like options) from the compare options.

    Overrides are the tokens after ``--overrides`` up to the next compare option, plus everything after ``--``;
    ``--overrides=X`` works too. A token with spaces (``"--data.alpha 1"``) is split like a shell would.
    """
    argv = list(argv)
    tail: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, tail = argv[:i], argv[i + 1 :]
    rest, raw = [], []
    collecting = False
    for tok in argv:
        name = tok.split("=", 1)[0]
        if name == "--overrides":
            collecting = True
            if "=" in tok:
                raw.append(tok.split("=", 1)[1])
        elif collecting and name not in OPTIONS and tok not in ("-h", "--help"):
            raw.append(tok)
        else:
            collecting = False
            rest.append(tok)
    return rest, [t for tok in [*raw, *tail] for t in shlex.split(tok)]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    rest, overrides = split_overrides(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(rest)
    args.overrides = overrides
    if args.methods is None:
        from lightning_sfl.algorithms import ALGORITHMS

        args.methods = list(ALGORITHMS)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs} must be >= 1")
    if args.target_acc is not None and not 0 < args.target_acc <= 1:
        parser.error(f"--target_acc {args.target_acc} must be a fraction in (0, 1]")
    try:
        check_overrides(overrides)
        for m in args.methods:
            resolve_method(m)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def run_compare(args: argparse.Namespace) -> list[MethodSummary]:
    """Plan, run, and write ``metrics.csv``, ``results.md`` and ``accuracy.png``; return the summary rows."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = plan_runs(args.config, args.methods, args.seeds, out, args.overrides)
    n_m, n_s = len(args.methods), len(args.seeds)
    print(f"[compare] {len(plan.runs)} runs ({n_m} method{'s' * (n_m != 1)} × {n_s} seed{'s' * (n_s != 1)}) -> {out}")
    for method, dropped in plan.dropped.items():
        if dropped:
            print(f"[compare] {method}: not accepted by {plan.classes[method]}, dropped: {', '.join(dropped)}")
    results = execute(plan.runs, args.jobs, args.keep_checkpoints)
    rows = summarize(results, args.target_acc)
    write_metrics_csv(results, out / "metrics.csv")
    (out / "results.md").write_text(results_markdown(args, plan, results, rows))
    data, _, _ = _settings(plan, results)
    seeds = f"{len(args.seeds)} seed{'s' * (len(args.seeds) != 1)}"
    plot_accuracy(results, out / "accuracy.png", f"Test accuracy: {describe_data(data)} ({seeds})", args.target_acc)
    print(format_table(rows, args.target_acc))
    print(f"[compare] wrote {out / 'results.md'}, {out / 'metrics.csv'}, {out / 'accuracy.png'}")
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """``lightning-sfl compare ...``; exits with status 1 when no run completed."""
    rows = run_compare(parse_args(argv))
    if not any(r.n_completed for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
