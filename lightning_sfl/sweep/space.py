"""A W&B sweep file as data: its checks, its parameter space and its commands (pure functions, no training).

Parameters follow W&B's definitions (``value``, ``values`` with optional ``probabilities``, ``distribution`` with
``min``/``max``, ``q``, ``mu``/``sigma``); a parameter without ``distribution`` is ``constant`` (``value``),
``categorical`` (``values``), ``int_uniform`` (integer ``min``/``max``) or ``uniform`` (float ``min``/``max``), as
W&B infers it. Note W&B's ``log_uniform`` takes ``min``/``max`` as natural logarithms; ``log_uniform_values`` takes
the values themselves.

>>> space = {"lr": {"distribution": "log_uniform_values", "min": 0.001, "max": 0.1}, "T": {"values": [1, 5]}}
>>> point = sample(space, random_generator(seed=0, trial=3))
>>> 0.001 <= point["lr"] <= 0.1 and point["T"] in (1, 5)
True
>>> grid_points({"a": {"values": [1, 2]}, "b": {"value": "x"}})
[{'a': 1, 'b': 'x'}, {'a': 2, 'b': 'x'}]
>>> expand_command(["lightning-sfl", "fit", "${args}"], {"model.lr": 0.1, "data.seed": 2})
['lightning-sfl', 'fit', '--model.lr=0.1', '--data.seed=2']

A sweep never tries one parameter set twice: :func:`point_key` says when two sets are the same, :func:`space_size`
how many sets a space holds (``None``: too many to run out of), :func:`finite_points` lists them.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import numpy as np

from lightning_sfl.errors import ConfigError

METHODS = ("grid", "random", "bayes")
GOALS = ("maximize", "minimize")
DISTRIBUTIONS = (
    "constant",
    "categorical",
    "categorical_w_probabilities",
    "int_uniform",
    "uniform",
    "q_uniform",
    "log_uniform",
    "log_uniform_values",
    "q_log_uniform",
    "q_log_uniform_values",
    "inv_log_uniform",
    "inv_log_uniform_values",
    "normal",
    "q_normal",
    "log_normal",
    "q_log_normal",
)


def distribution_of(name: str, spec: dict[str, Any]) -> str:
    """The parameter's distribution: given, or inferred as W&B does; one-line error for what W&B would reject."""
    if not isinstance(spec, dict):
        raise ConfigError(f"parameter {name!r} must be a mapping (value, values or distribution), got {spec!r}")
    if "parameters" in spec:
        raise ConfigError(f"parameter {name!r}: nested parameters are not supported; use dotted names (data.seed)")
    dist = spec.get("distribution")
    if dist is None:
        if "value" in spec:
            dist = "constant"
        elif "values" in spec:
            dist = "categorical_w_probabilities" if "probabilities" in spec else "categorical"
        elif "min" in spec and "max" in spec:
            dist = "int_uniform" if all(isinstance(spec[k], int) for k in ("min", "max")) else "uniform"
        else:
            raise ConfigError(f"parameter {name!r} needs value, values, or min and max")
    if dist not in DISTRIBUTIONS:
        raise ConfigError(f"parameter {name!r}: distribution={dist!r} is not one of: {', '.join(DISTRIBUTIONS)}")
    needs = {"constant": ("value",), "categorical": ("values",), "categorical_w_probabilities": ("values",)}
    for key in needs.get(dist, ("min", "max") if "normal" not in dist else ()):
        if key not in spec:
            raise ConfigError(f"parameter {name!r}: distribution {dist} needs {key!r}")
    if "min" in spec and "max" in spec and not spec["min"] <= spec["max"]:
        raise ConfigError(f"parameter {name!r}: min={spec['min']} must be <= max={spec['max']}")
    if dist.endswith("_values") and spec["min"] <= 0:
        raise ConfigError(f"parameter {name!r}: {dist} needs min > 0, got {spec['min']}")
    return dist


def check_sweep(sweep: Any) -> dict[str, Any]:
    """The sweep file's content, checked: one-line errors naming the key and what is allowed."""
    if not isinstance(sweep, dict):
        found = "an empty file" if sweep is None else f"a YAML {type(sweep).__name__}"
        raise ConfigError(f"a sweep file must be a YAML mapping (method, metric, parameters, command), found {found}")
    if sweep.get("method") not in METHODS:
        raise ConfigError(f"method={sweep.get('method')!r} is not one of: {', '.join(METHODS)}")
    metric = sweep.get("metric") or {}
    if sweep["method"] == "bayes" and not metric.get("name"):
        raise ConfigError("metric.name is required for method bayes (the metric it optimises)")
    if metric and metric.get("goal", "minimize") not in GOALS:
        raise ConfigError(f"metric.goal={metric.get('goal')!r} is not one of: {', '.join(GOALS)}")
    params = sweep.get("parameters")
    if not isinstance(params, dict) or not params:
        raise ConfigError("parameters must be a non-empty mapping of parameter name -> its values")
    for name, spec in params.items():
        dist = distribution_of(name, spec)
        if sweep["method"] == "grid" and dist not in ("constant", "categorical", "categorical_w_probabilities"):
            raise ConfigError(f"parameter {name!r}: method grid needs value or values, not distribution {dist}")
    command = sweep.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(c, (str, int, float)) for c in command):
        raise ConfigError("command must be a list, e.g. [lightning-sfl, fit, --config, configs/x.yaml, ${args}]")
    cap = sweep.get("run_cap")
    if cap is not None and (not isinstance(cap, int) or cap < 1):
        raise ConfigError(f"run_cap={cap!r} must be a whole number >= 1")
    return sweep


def grid_points(params: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every combination of the ``values`` (W&B's order: the first parameter varies slowest)."""
    names = list(params)
    choices = [[spec["value"]] if "value" in spec else list(spec["values"]) for spec in params.values()]
    return [dict(zip(names, combo)) for combo in itertools.product(*choices)]


def point_key(point: dict[str, Any]) -> str:
    """What identifies a parameter set (the same values, whatever their order; a value read back from a sweep's JSON
    record is the value drawn).

    >>> point_key({"b": 1, "a": 0.5}) == point_key({"a": 0.5, "b": 1})
    True
    """
    return json.dumps(point, sort_keys=True, default=str)


def distinct(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``points`` without the repeats of an earlier one (a grid whose ``values`` repeat a value), in order.

    >>> distinct([{"a": 1}, {"a": 2}, {"a": 1}])
    [{'a': 1}, {'a': 2}]
    """
    seen: set[str] = set()
    kept = []
    for point in points:
        if point_key(point) not in seen:
            seen.add(point_key(point))
            kept.append(point)
    return kept


def _finite_choices(name: str, spec: dict[str, Any]) -> list[Any] | None:
    """The values a parameter can take, each once, if they are few enough to list (constant, values with a non-zero
    probability, int_uniform); ``None`` for the others.

    >>> _finite_choices("x", {"values": [1, 2, 1]})
    [1, 2]
    """
    dist = distribution_of(name, spec)
    if dist == "constant":
        return [spec["value"]]
    if dist in ("categorical", "categorical_w_probabilities"):
        p = spec.get("probabilities") or [1] * len(spec["values"])
        kept = [v for v, w in zip(spec["values"], p) if w > 0]
        return list({json.dumps(v, sort_keys=True, default=str): v for v in kept}.values())  # (a repeated value once)
    if dist == "int_uniform" and spec["max"] - spec["min"] < 1_000_000:
        return list(range(spec["min"], spec["max"] + 1))
    return None


def space_size(params: dict[str, dict[str, Any]]) -> int | None:
    """How many parameter sets the space holds, if every parameter takes listable values (see
    :func:`finite_points`); ``None`` otherwise (a continuous distribution: no end).

    >>> space_size({"a": {"values": [1, 2, 3]}, "b": {"min": 1, "max": 2}, "c": {"value": 0}})
    6
    >>> space_size({"a": {"values": [1, 2]}, "lr": {"min": 0.1, "max": 1.0}}) is None
    True
    """
    size = 1
    for name, spec in params.items():
        choices = _finite_choices(name, spec)
        if choices is None:
            return None
        size *= len(choices)
    return size


def finite_points(params: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every parameter set of a space whose :func:`space_size` is known, in grid order."""
    choices = [_finite_choices(name, spec) for name, spec in params.items()]
    if any(c is None for c in choices):
        raise ValueError("the space has a continuous parameter: its points cannot be listed")
    return [dict(zip(params, combo)) for combo in itertools.product(*choices)]


def random_generator(seed: int, trial: int) -> np.random.Generator:
    """The generator of trial ``trial``: the same trial draws the same values in a resumed sweep."""
    return np.random.default_rng([seed, trial])


def _quantize(x: float, q: float) -> float:
    return float(np.round(x / q) * q)


def sample(params: dict[str, dict[str, Any]], rng: np.random.Generator) -> dict[str, Any]:
    """One random point of the space (W&B's ``random`` method)."""
    out: dict[str, Any] = {}
    for name, spec in params.items():
        dist = distribution_of(name, spec)
        lo, hi, q = spec.get("min"), spec.get("max"), spec.get("q", 1)
        mu, sigma = spec.get("mu", 0.0), spec.get("sigma", 1.0)
        if dist == "constant":
            value = spec["value"]
        elif dist in ("categorical", "categorical_w_probabilities"):
            p = spec.get("probabilities")
            value = spec["values"][int(rng.choice(len(spec["values"]), p=p))]
        elif dist == "int_uniform":
            value = int(rng.integers(lo, hi + 1))
        elif dist in ("uniform", "q_uniform"):
            value = float(rng.uniform(lo, hi))
        elif dist in ("log_uniform", "q_log_uniform"):
            value = math.exp(rng.uniform(lo, hi))
        elif dist in ("log_uniform_values", "q_log_uniform_values"):
            value = math.exp(rng.uniform(math.log(lo), math.log(hi)))
        elif dist == "inv_log_uniform":
            value = math.exp(-rng.uniform(lo, hi))
        elif dist == "inv_log_uniform_values":
            value = 1.0 / math.exp(rng.uniform(math.log(1.0 / hi), math.log(1.0 / lo)))
        elif dist in ("normal", "q_normal"):
            value = float(rng.normal(mu, sigma))
        else:  # log_normal, q_log_normal
            value = math.exp(rng.normal(mu, sigma))
        out[name] = _quantize(value, q) if dist.startswith("q_") else value
    return out


def optuna_space(params: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """W&B's space as optuna distributions (for ``bayes``): ``(distributions, constants)``."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    dists: dict[str, Any] = {}
    constants: dict[str, Any] = {}
    for name, spec in params.items():
        dist = distribution_of(name, spec)
        lo, hi = spec.get("min"), spec.get("max")
        if dist == "constant":
            constants[name] = spec["value"]
        elif dist == "categorical":
            dists[name] = CategoricalDistribution(spec["values"])
        elif dist == "int_uniform":
            dists[name] = IntDistribution(lo, hi)
        elif dist == "uniform":
            dists[name] = FloatDistribution(lo, hi)
        elif dist == "q_uniform":
            dists[name] = FloatDistribution(lo, hi, step=spec.get("q", 1))
        elif dist == "log_uniform_values":
            dists[name] = FloatDistribution(lo, hi, log=True)
        elif dist == "log_uniform":
            dists[name] = FloatDistribution(math.exp(lo), math.exp(hi), log=True)
        else:
            raise ConfigError(
                f"parameter {name!r}: distribution {dist} is not supported with method bayes here; use uniform, "
                "q_uniform, int_uniform, log_uniform(_values) or values (or method random)"
            )
    return dists, constants


def expand_command(command: list[Any], params: dict[str, Any], program: str | None = None) -> list[str]:
    """The trial's command line, W&B's macros replaced: ``${args}`` (``--name=value``), ``${args_no_hyphens}``
    (``name=value``), ``${args_json}``, ``${program}``; ``${env}`` and ``${interpreter}`` are dropped (the trial
    runs with this interpreter)."""
    out: list[str] = []
    for token in map(str, command):
        if token == "${args}":
            out += [f"--{k}={_format(v)}" for k, v in params.items()]
        elif token == "${args_no_hyphens}":
            out += [f"{k}={_format(v)}" for k, v in params.items()]
        elif token == "${args_json}":
            out.append(json.dumps(params))
        elif token == "${program}":
            if program is None:
                raise ConfigError("command uses ${program} but the sweep has no program")
            out.append(program)
        elif token not in ("${env}", "${interpreter}"):
            out.append(token)
    return out


def _format(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, dict, bool)) or value is None else str(value)


#: The last part of options whose value is where a trial writes (a fit's run folders, checkpoints and logs; an
#: attack's or a comparison's ``--out``; ``--run_name``): a sweep file may name them inside the trial's folder only.
WRITTEN_OPTIONS = ("default_root_dir", "dirpath", "save_dir", "out", "run_name")


def file_arguments(sweep: dict[str, Any]) -> list[str]:
    """Every argument a trial of ``sweep`` can be given by the file: its command, with ``${args}`` as each listed value
    of each parameter (``--name=value``; values drawn from a distribution are numbers) and ``${program}``; what
    :func:`check_written_paths` and :func:`~lightning_sfl.known.check_named_code` read.

    >>> file_arguments({"command": ["lightning-sfl", "fit", "${args}"], "parameters": {"model.lr": {"values": [1, 2]}}})
    ['lightning-sfl', 'fit', '--model.lr=1', '--model.lr=2']
    """
    listed = {name: _finite_choices(name, spec) or [] for name, spec in sweep["parameters"].items()}
    out: list[str] = []
    for token in map(str, sweep["command"]):
        if token in ("${args}", "${args_no_hyphens}", "${args_json}"):
            dash = "" if token == "${args_no_hyphens}" else "--"
            out += [f"{dash}{name}={_format(v)}" for name, values in listed.items() for v in values]
        elif token == "${program}" and sweep.get("program") is not None:
            out.append(str(sweep["program"]))
        elif token not in ("${env}", "${interpreter}", "${program}"):
            out.append(token)
    return out


def check_written_paths(tokens: list[str], where: str) -> None:
    """A one-line :class:`~lightning_sfl.errors.ConfigError` naming ``where`` (the sweep file) if an argument it gives
    names where a trial writes (:data:`WRITTEN_OPTIONS`) outside the trial's folder: an absolute path or one with a
    ``..`` part (a file from someone else never makes the tool write outside the folder the user chose).

    >>> check_written_paths(["fit", "--trainer.default_root_dir=runs"], "sweep='s.yaml'")
    >>> check_written_paths(["fit", "--trainer.default_root_dir", "/tmp/x"], "sweep='s.yaml'")
    Traceback (most recent call last):
    ...
    lightning_sfl.errors.ConfigError: sweep='s.yaml': --trainer.default_root_dir='/tmp/x' must be a folder inside the \
trial's (not absolute, no '..'): a sweep file writes nowhere else
    """
    from pathlib import PurePosixPath

    for i, token in enumerate(tokens):
        option, _, value = token.partition("=")
        if not _ and i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            value = tokens[i + 1]
        if not option.lstrip("-") or option.lstrip("-").split(".")[-1] not in WRITTEN_OPTIONS or not value:
            continue
        path = PurePosixPath(value)
        if path.is_absolute() or ".." in path.parts or value.startswith("~"):
            raise ConfigError(
                f"{where}: {option}={value!r} must be a folder inside the trial's (not absolute, no '..'): a sweep "
                "file writes nowhere else"
            )
