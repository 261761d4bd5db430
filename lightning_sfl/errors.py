"""Errors that the command line reports as one line (no traceback).

``ConfigError`` is raised at construction time for a bad argument: its message names the argument, the value
and what is allowed. ``DatasetNotFoundError`` names the missing path. ``NonFiniteError`` stops training when a
loss or activation is NaN/Inf, naming the round, local iteration and clients; the command line adds which checkpoint
it kept (the previous round's, untouched) or that none was written yet.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tempfile
from pathlib import Path

from typing_extensions import override

from lightning_sfl.help_text import PlainHelp, PlainHelpFormatter


class ConfigError(ValueError):
    """A bad setting, found when the run is constructed."""


class DatasetNotFoundError(ConfigError, FileNotFoundError):
    """Dataset files are missing and downloading is off (or impossible)."""


class NonFiniteError(RuntimeError):
    """A NaN or Inf appeared in training."""


class RunInterrupted(Exception):
    """A run stopped by Ctrl-C or SIGTERM after Lightning saved what it could; ``exit_code`` is the shell's for the
    signal (130 for SIGINT, 143 for SIGTERM), so that a cluster's scheduler sees a preempted job, not a finished one."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


REPORTED = (ConfigError, NonFiniteError)


def whole_number(name: str, value, low: int = 1) -> int:
    """``value`` as an ``int`` if it is a whole number ``>= low``, else a one-line :class:`ConfigError` naming ``name``.

    >>> whole_number("inversion_every", 5.0)
    5
    >>> whole_number("inversion_every", 0)
    Traceback (most recent call last):
    ...
    lightning_sfl.errors.ConfigError: inversion_every=0 must be a whole number >= 1
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value or value < low:
        raise ConfigError(f"{name}={value!r} must be a whole number >= {low}")
    return int(value)


#: The largest seed numpy, scikit-learn and Lightning's ``seed_everything`` accept (seeds are in ``[0, 2**32 - 1]``).
MAX_SEED = 2**32 - 1


def seed_number(name: str, value) -> int:
    """``value`` as an ``int`` if it is a seed numpy accepts (a whole number in ``[0, 2**32 - 1]``), else a one-line
    :class:`ConfigError` naming ``name``.

    >>> seed_number("data.seed", -1)
    Traceback (most recent call last):
    ...
    lightning_sfl.errors.ConfigError: data.seed=-1 must be a whole number in [0, 4294967295]
    """
    whole = not isinstance(value, bool) and isinstance(value, int | float) and int(value) == value
    if not (whole and 0 <= value <= MAX_SEED):
        raise ConfigError(f"{name}={value!r} must be a whole number in [0, {MAX_SEED}]")
    return int(value)


def check_output_folder(name: str, folder: str | os.PathLike | None) -> None:
    """A one-line :class:`ConfigError` unless ``folder`` (option ``name``) can be a folder to write in: not a file, and
    creatable and writable, found by trying (the folders it lacks are made and a file is written in it, then all of it
    is removed again: ``os.access`` answers "writable" to root even where nothing can be written, e.g. ``/proc``).

    >>> import tempfile
    >>> check_output_folder("out", Path(tempfile.mkdtemp()) / "new" / "run")
    >>> check_output_folder("out", __file__)
    Traceback (most recent call last):
    ...
    lightning_sfl.errors.ConfigError: out=... is a file, not a folder
    """
    if not folder:
        return
    path = Path(folder).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{name}={str(folder)!r} is a file, not a folder")
    missing = [p for p in (path, *path.absolute().parents) if not p.exists()]
    made: list[Path] = []
    try:
        for parent in reversed(missing):
            parent.mkdir()
            made.append(parent)
        probe, probe_path = tempfile.mkstemp(dir=path, prefix=".lightning-sfl-write-test-")
        os.close(probe)
        os.unlink(probe_path)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(folder) else ""
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"{name}={str(folder)!r} cannot be written: {reason.lower()}{where}") from None
    finally:
        for parent in reversed(made):
            with contextlib.suppress(OSError):
                parent.rmdir()


def name_inside(parent: str | os.PathLike, name: str, what: str) -> Path:
    """``parent / name`` for a ``name`` read from a file (a sweep's ``name``, a method's folder): a one-line
    :class:`ConfigError` naming ``what`` when it is absolute, has a ``..`` part, or leads (symlinks followed) outside
    ``parent``: a file from someone else never makes the tool write outside the folder the user chose.

    >>> name_inside("runs/sweeps", "lr", "name"), name_inside("runs/sweeps", "a/b", "name")
    (PosixPath('runs/sweeps/lr'), PosixPath('runs/sweeps/a/b'))
    >>> name_inside("runs/sweeps", "../../x", "sweep name")
    Traceback (most recent call last):
    ...
    lightning_sfl.errors.ConfigError: sweep name='../../x' must be a name inside runs/sweeps (not absolute, no '..')
    """
    text = str(name)
    inside = Path(parent) / text
    escapes = not text or Path(text).is_absolute() or ".." in Path(text).parts or text.startswith("~")
    if not escapes:
        base = Path(parent).resolve()
        escapes = not inside.resolve().is_relative_to(base)
    if escapes:
        raise ConfigError(f"{what}={text!r} must be a name inside {parent} (not absolute, no '..')")
    return inside


#: Environment variables a run reads as whole numbers -> what they are (for the one line a bad value gets).
ENV_NUMBERS = {
    "RANK": "the process's rank among a run's processes, from 0",
    "LOCAL_RANK": "the process's rank on its node, from 0",
    "NODE_RANK": "the node's number, from 0",
    "SLURM_PROCID": "the SLURM task's rank, from 0",
    "WORLD_SIZE": "the number of processes of the run, from 1",
    "MASTER_PORT": "the first node's port for the run's rendezvous, 1-65535",
}


def env_number(name: str, default: int | None = None, low: int = 0, high: int | None = None) -> int | None:
    """The environment variable ``name`` as a whole number in ``[low, high]`` (``default`` when unset or empty); a value
    that is not is a one-line :class:`ConfigError` naming the variable and what it takes.

    >>> os.environ["LIGHTNING_SFL_DOCTEST"] = "two"
    >>> env_number("LIGHTNING_SFL_DOCTEST", 0)
    Traceback (most recent call last):
    ...
    lightning_sfl.errors.ConfigError: environment variable LIGHTNING_SFL_DOCTEST='two' must be a whole number >= 0
    >>> del os.environ["LIGHTNING_SFL_DOCTEST"]
    """
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        limits = f"in [{low}, {high}]" if high is not None else f">= {low}"
        what = f" ({ENV_NUMBERS[name]})" if name in ENV_NUMBERS else ""
        raise ConfigError(f"environment variable {name}={text!r} must be a whole number {limits}{what}")
    return value


def machine_memory() -> int | None:
    """Bytes of memory this process may use: the machine's (``/proc/meminfo``), or its control group's limit when lower
    (a container's, a SLURM job's); ``None`` where neither can be read."""
    limits = []
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                limits.append(int(line.split()[1]) * 1024)
    for name in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            text = Path(name).read_text().strip()
            if text != "max" and int(text) < 1 << 60:
                limits.append(int(text))
    return min(limits) if limits else None


def size_text(num_bytes: float) -> str:
    """``num_bytes`` in binary units.

    >>> size_text(58_800_000_000_000), size_text(1536), size_text(12)
    ('53.5 TiB', '1.5 KiB', '12 B')
    """
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(num_bytes) < 1024 or unit == "PiB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024
    raise AssertionError("unreachable")


def check_memory(what: str, needed: float, lower: str, available: int | None = None) -> None:
    """A one-line :class:`ConfigError` before an allocation of ``needed`` bytes (``what``: in words, with its sizes)
    that this machine's memory (:func:`machine_memory`, or ``available``) cannot hold; ``lower``: the options that
    make it smaller.

    >>> check_memory("the data (10 rows)", 400, "--data.num_clients", available=1 << 30)
    >>> check_memory("the data", 2 << 40, "--data.num_clients", available=24 << 30)
    Traceback (most recent call last):
    ...
    lightning_sfl.errors.ConfigError: the data: 2.0 TiB needed; this machine has 24.0 GiB of memory: lower \
--data.num_clients
    """
    available = machine_memory() if available is None else available
    if available is not None and needed > available:
        raise ConfigError(
            f"{what}: {size_text(needed)} needed; this machine has {size_text(available)} of memory: lower {lower}"
        )


def out_of_memory_line(exc: BaseException) -> str | None:
    """One line for an allocation that failed (``MemoryError``, numpy's, torch's CPU or CUDA allocator), with what it
    asked for and the machine's memory; ``None`` for other errors."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    cuda = type(exc).__name__ == "OutOfMemoryError"
    if not (isinstance(exc, MemoryError) or cuda or "DefaultCPUAllocator: not enough memory" in text
            or "can't allocate memory" in text):  # fmt: skip
        return None
    memory = machine_memory()
    has = f"; this machine has {size_text(memory)} of memory" if memory and not cuda else ""
    return f"out of memory: {text}{has} (lower the setting's sizes: clients, rows, clients per round, the model)"


def yaml_problem(err: Exception) -> str:
    """What is wrong in a YAML text, in one line, with its place.

    >>> import yaml
    >>> try:
    ...     yaml.safe_load("a: [1, 2\\nb: 3")
    ... except yaml.YAMLError as err:
    ...     yaml_problem(err)
    "expected ',' or ']', but got ':' at line 2, column 2"
    """
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or " ".join(str(err).split())
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else problem


class OneLineArgumentParser(argparse.ArgumentParser):
    """``argparse``'s parser whose errors are one ``error:`` line and exit code 2, like ``fit``'s (no usage dump),
    which takes no abbreviated option names, and whose ``--help`` shows no Sphinx markup
    (:class:`~lightning_sfl.help_text.PlainHelp`)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        given = kwargs.get("formatter_class")
        kwargs["formatter_class"] = given if given and issubclass(given, PlainHelp) else PlainHelpFormatter
        super().__init__(*args, **kwargs)

    @override
    def error(self, message: str):
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def reported_cause(exc: BaseException) -> BaseException | None:
    """The first error in ``exc``'s cause/context chain that the CLI reports as one line, else ``None``."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, REPORTED):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def parser_error_line(text: str) -> str:
    """jsonargparse's (multi-line) message in one line: ``--data.num_clients: Expected a int. Got value: abc``; an
    option the chosen class does not take names the class and how to list its options.

    >>> parser_error_line('Parser key "model":\\n  Does not validate ...\\n    - Problem with given class_path '
    ...                   "'lightning_sfl.algorithms.SCALA':\\n        Option 'nosuch' is not accepted\\n ...")
    '--model.nosuch: not an option of SCALA (its options: lightning-sfl fit --model.help SCALA)'
    """
    unknown = re.search(r"Problem with given class_path '([\w.]+)':\s*Option '([\w.]+)\+?' is not accepted", text)
    group = re.match(r'Parser key "([^"]+)":', text)
    if unknown and group:
        cls = unknown.group(1).rpartition(".")[2]
        return (
            f"--{group.group(1)}.{unknown.group(2)}: not an option of {cls} (its options: lightning-sfl fit "
            f"--{group.group(1)}.help {cls})"
        )
    keys = re.findall(r'Parser key "([^"]+)":', text)
    key = ".".join(dict.fromkeys(keys)) if keys else None  # --model: ... Parser key "lr": -> --model.lr
    rest = re.split(r'Parser key "[^"]+":', text)[-1] if keys else text
    expected = _expected_values(rest)
    if expected is not None:
        rest = expected
    else:
        rest = re.split(r"\n\s*- Expected a <class 'NoneType'>|\n\s*Given value type", rest)[0]
        rest = " ".join(line.strip().lstrip("- ") for line in rest.splitlines() if line.strip())
        rest = re.sub(r"<class '(?:[\w]+\.)*(\w+)'>", r"\1", rest)
    line = f"--{key}: {rest}" if key else rest
    return line if len(line) <= 300 else line[:297] + "..."


_TYPE_WORDS = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "a string",
               "NoneType": "null", "Path": "a path", "dict": "a mapping", "list": "a list"}  # fmt: skip
_TYPE = r"typing\.Literal\[[^\]]*\]|<class '[\w.]+'>"


def _expected_values(message: str) -> str | None:
    """jsonargparse's "Expected a <class 'int'>. Got value: x" (or a Union's subtypes) in words: ``expected a whole
    number or null; got '1e2'``; ``None`` for any other message.

    >>> _expected_values("Expected a <class 'int'>. Got value: abc")
    "expected a whole number; got 'abc'"
    >>> _expected_values("Does not validate against any of the Union subtypes\\n Subtypes: [<class 'int'>, "
    ...                  "<class 'NoneType'>]\\n Errors: ...\\n Given value type: <class 'str'>\\n Given value: 1e2")
    "expected a whole number or null; got '1e2'"
    """
    union = re.search(r"Subtypes: \[(.*)\]", message)
    if union and "Given value type: <class 'jsonargparse" not in message:
        types = re.findall(_TYPE, union.group(1))
    else:  # (a class's option: its own type, not the alternatives of the class itself)
        types = re.findall(r"Expected a (" + _TYPE + ")", re.split(r"\n\s*- Expected a <class 'NoneType'>", message)[0])
    given = re.search(r"Given value: (.*)", message) if union else None
    if given is None or "NestedArg" in given.group(1):
        given = re.search(r"Got value: (.*)", message)
    if not types or given is None:
        return None
    values: list[str] = []
    words: list[str] = []
    for kind in types:
        literal = re.fullmatch(r"typing\.Literal\[(.*)\]", kind)
        if literal:
            values += [v.strip().strip("'\"") for v in literal.group(1).split(",")]
        else:
            name = re.fullmatch(r"<class '(?:[\w]+\.)*(\w+)'>", kind).group(1)
            words.append(_TYPE_WORDS.get(name, f"a {name}"))
    words = ([f"one of {', '.join(dict.fromkeys(values))}"] if values else []) + list(dict.fromkeys(words))
    if len(words) > 1:
        words = [w.replace("true or false", "true, false") for w in words]
    said = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
    return f"expected {said}; got {given.group(1).strip()!r}"
