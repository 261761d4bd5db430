"""Offline checker for W&B sweep configs (``sweeps/*.yaml``), written for this project.

The rules follow W&B's documented sweep-configuration keys (https://docs.wandb.ai/models/sweeps/sweep-config-keys),
plus a few stricter ones of our own, marked "(ours)": things W&B would accept but that would silently do the wrong
thing here. It is a pre-flight check only; the server validates a config again on ``wandb sweep``.

``validate_sweep(config)`` returns one message per problem (an empty list: valid). ``distribution(spec)`` names the
distribution a parameter uses, with W&B's defaults when ``distribution`` is not given.
"""

from __future__ import annotations

import math
import re

METHODS = ("grid", "random", "bayes")
GOALS = ("minimize", "maximize")
# Top-level keys: the documented ones, plus ``controller`` (``{type: local}`` runs the search on the client).
TOP_LEVEL_KEYS = {
    "program",
    "command",
    "method",
    "metric",
    "parameters",
    "name",
    "description",
    "project",
    "entity",
    "early_terminate",
    "run_cap",
    "controller",
}
STRING_KEYS = ("program", "name", "description", "project", "entity")
METRIC_KEYS = {"name", "goal", "target"}
HYPERBAND_KEYS = {"type", "min_iter", "max_iter", "s", "eta", "strict"}

# distribution -> (keys it needs, keys it may have besides ``distribution``)
DISTRIBUTIONS: dict[str, tuple[set[str], set[str]]] = {
    "constant": ({"value"}, set()),
    "categorical": ({"values"}, {"probabilities"}),
    "int_uniform": ({"min", "max"}, set()),
    "uniform": ({"min", "max"}, set()),
    "q_uniform": ({"min", "max"}, {"q"}),
    "log_uniform_values": ({"min", "max"}, set()),
    "q_log_uniform_values": ({"min", "max"}, {"q"}),
    "inv_log_uniform_values": ({"min", "max"}, set()),
    "normal": (set(), {"mu", "sigma"}),
    "q_normal": (set(), {"mu", "sigma", "q"}),
    "log_normal": (set(), {"mu", "sigma"}),
    "q_log_normal": (set(), {"mu", "sigma", "q"}),
}
# Older forms whose min/max are exponents (e.g. log_uniform: min -9.2 for 1e-4); the *_values forms take the values.
EXPONENT_FORMS = {
    "log_uniform": "log_uniform_values",
    "q_log_uniform": "q_log_uniform_values",
    "inv_log_uniform": "inv_log_uniform_values",
}
GRID_DISTRIBUTIONS = {"constant", "categorical"}  # grid search enumerates listed values only (ours: no int ranges)
POSITIVE_MIN = {"log_uniform_values", "q_log_uniform_values", "inv_log_uniform_values"}

# Whole-item macros the agent expands in ``command``; any other ``${...}`` item expands to nothing (it is dropped).
COMMAND_MACROS = {
    "env",
    "interpreter",
    "program",
    "args",
    "args_no_equals",
    "args_no_hyphens",
    "args_no_boolean_flags",
    "args_json",
    "args_json_file",
    "args_append_hydra",
    "args_override_hydra",
}
DEFAULT_COMMAND = ["${env}", "${interpreter}", "${program}", "${args}"]
ENVVAR = re.compile(r"\$\{envvar:[A-Z0-9_]*\}")  # ${envvar:NAME}: replaced by $NAME anywhere in an item
MACRO = re.compile(r"\$\{[^}]*\}")


def _is_number(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _number_error(where: str, key: str, x) -> str:
    hint = (
        " (YAML 1.1 reads 1e-3 as text: write 1.0e-3)"
        if isinstance(x, str) and re.fullmatch(r"[-+.\d]+e[-+]?\d+", x)
        else ""
    )
    return f"{where}: `{key}` must be a number, got {x!r}{hint}"


def distribution(spec: dict) -> str | None:
    """The distribution a parameter spec uses: its ``distribution``, else W&B's default for the keys it has
    (``value`` -> constant, ``values`` -> categorical, integer ``min``/``max`` -> int_uniform, other numbers ->
    uniform); None if none applies."""
    if "distribution" in spec:
        return spec["distribution"]
    if "value" in spec:
        return "constant"
    if "values" in spec:
        return "categorical"
    if "min" in spec and "max" in spec:
        return "int_uniform" if _is_int(spec["min"]) and _is_int(spec["max"]) else "uniform"
    return None


def _check_parameter(name: str, spec, method) -> list[str]:
    where = f"parameter {name!r}"
    if not isinstance(spec, dict):
        return [f"{where}: must be a mapping such as {{values: [...]}}, got {spec!r}"]
    if "parameters" in spec:  # a nested group: {parameters: {inner: spec, ...}}
        if extra := sorted(set(spec) - {"parameters"}):
            return [f"{where}: a nested `parameters` group cannot have other keys ({extra})"]
        return _check_parameters(spec["parameters"], method, prefix=f"{name}.")

    forms = [form for form in ("value", "values") if form in spec]
    if "min" in spec or "max" in spec:
        forms.append("min/max")
    if len(forms) > 1:
        return [f"{where}: use exactly one of `value`, `values` or a distribution, not {' and '.join(forms)}"]

    kind = distribution(spec)
    if kind is None:
        return [f"{where}: needs `value`, `values`, `min` and `max`, or a `distribution`"]
    if not isinstance(kind, str):
        return [f"{where}: `distribution` must be a name such as 'uniform', got {kind!r}"]
    if kind in EXPONENT_FORMS:
        return [f"{where}: distribution {kind!r} takes log-space bounds; use {EXPONENT_FORMS[kind]!r} (ours)"]
    if kind not in DISTRIBUTIONS:
        return [f"{where}: unknown distribution {kind!r} (known: {', '.join(DISTRIBUTIONS)})"]

    errors = []
    needed, optional = DISTRIBUTIONS[kind]
    if missing := sorted(needed - set(spec)):
        errors.append(f"{where}: distribution {kind!r} needs {', '.join(f'`{k}`' for k in missing)}")
    if extra := sorted(set(spec) - needed - optional - {"distribution"}):
        errors.append(f"{where}: unexpected key(s) {', '.join(f'`{k}`' for k in extra)} for distribution {kind!r}")
    if method == "grid" and kind not in GRID_DISTRIBUTIONS:
        errors.append(f"{where}: grid search takes only `value` or `values`, not distribution {kind!r}")
    if errors:
        return errors

    if kind == "categorical":
        errors += _check_values(where, spec, method)
    for key in ("min", "max", "mu", "sigma", "q"):
        if key in spec and not _is_number(spec[key]):
            errors.append(_number_error(where, key, spec[key]))
    if errors:
        return errors
    if "min" in spec:
        low, high = spec["min"], spec["max"]
        if kind == "int_uniform" and not (_is_int(low) and _is_int(high)):
            errors.append(f"{where}: int_uniform needs integer `min` and `max`, got {low!r} and {high!r}")
        if not low < high:
            errors.append(f"{where}: `min` ({low!r}) must be less than `max` ({high!r})")
        if kind in POSITIVE_MIN and low <= 0:
            errors.append(f"{where}: {kind} needs `min` > 0, got {low!r}")
    for key in ("sigma", "q"):
        if key in spec and spec[key] <= 0:
            errors.append(f"{where}: `{key}` must be > 0, got {spec[key]!r}")
    return errors


def _check_values(where: str, spec: dict, method) -> list[str]:
    values = spec["values"]
    if not isinstance(values, list) or not values:
        return [f"{where}: `values` must be a non-empty list, got {values!r}"]
    errors = []
    if len({repr(v) for v in values}) < len(values):  # (ours) a repeated value repeats runs or skews the sampling
        errors.append(f"{where}: `values` has duplicates: {values!r}")
    if "probabilities" in spec:
        probabilities = spec["probabilities"]
        if method == "grid":
            errors.append(f"{where}: `probabilities` apply to random search only, not grid")
        elif (
            not isinstance(probabilities, list)
            or len(probabilities) != len(values)
            or not all(_is_number(p) and 0 <= p <= 1 for p in probabilities)
            or not math.isclose(sum(probabilities), 1.0)
        ):
            errors.append(f"{where}: `probabilities` must be one number in [0, 1] per value, summing to 1")
    return errors


def _check_parameters(parameters, method, prefix: str = "") -> list[str]:
    if not isinstance(parameters, dict) or not parameters:
        return [f"`{prefix}parameters` must be a non-empty mapping of parameter names to specs"]
    errors = []
    for name, spec in parameters.items():
        # (ours) names become `--name=value` arguments and W&B config keys
        if not isinstance(name, str) or not name or re.search(r"\s", name):
            errors.append(f"parameter {name!r}: names must be non-empty strings without whitespace")
            continue
        errors += _check_parameter(prefix + name, spec, method)
    return errors


def _check_metric(metric) -> list[str]:
    if not isinstance(metric, dict):
        return [f"`metric` must be a mapping {{name: ..., goal: minimize|maximize}}, got {metric!r}"]
    errors = []
    if not isinstance(metric.get("name"), str) or not metric["name"]:
        errors.append("`metric.name` is required: the name of a logged metric")
    if "goal" in metric and metric["goal"] not in GOALS:
        errors.append(f"`metric.goal` must be minimize or maximize, got {metric['goal']!r}")
    if "target" in metric and not _is_number(metric["target"]):
        errors.append(_number_error("metric", "target", metric["target"]))
    if extra := sorted(set(metric) - METRIC_KEYS):
        errors.append(f"`metric`: unexpected key(s) {extra} (allowed: name, goal, target)")
    return errors


def _check_early_terminate(early) -> list[str]:
    if not isinstance(early, dict) or early.get("type") != "hyperband":
        return [f"`early_terminate` must be a mapping with `type: hyperband`, got {early!r}"]
    errors = []
    if extra := sorted(set(early) - HYPERBAND_KEYS):
        errors.append(f"`early_terminate`: unexpected key(s) {extra}")
    if "min_iter" not in early and "max_iter" not in early:
        errors.append("`early_terminate`: hyperband needs `min_iter` or `max_iter` (with `s`)")
    if "max_iter" in early and "min_iter" not in early and "s" not in early:
        errors.append("`early_terminate`: `max_iter` needs `s`, the number of brackets")
    for key in ("min_iter", "max_iter", "s"):
        if key in early and not (_is_int(early[key]) and early[key] >= 1):
            errors.append(f"`early_terminate.{key}` must be an integer >= 1, got {early[key]!r}")
    if "eta" in early and not (_is_number(early["eta"]) and early["eta"] > 1):
        errors.append(f"`early_terminate.eta` must be a number > 1, got {early['eta']!r}")
    if "strict" in early and not isinstance(early["strict"], bool):
        errors.append(f"`early_terminate.strict` must be true or false, got {early['strict']!r}")
    return errors


def _check_command(command) -> list[str]:
    if not isinstance(command, list) or not command:
        return [f"`command` must be a non-empty list of strings, got {command!r}"]
    errors = []
    for i, item in enumerate(command):
        if not isinstance(item, str):
            errors.append(f"`command[{i}]` must be a string, got {item!r} (quote it in YAML)")
            continue
        rest = ENVVAR.sub("", item)
        for macro in MACRO.findall(rest):
            if macro != rest:
                errors.append(f"`command[{i}]`: {macro} is only expanded as a whole item, not inside {item!r}")
            elif macro[2:-1] not in COMMAND_MACROS:
                errors.append(f"`command[{i}]`: unknown macro {macro} (the agent would drop it)")
    return errors


def validate_sweep(config) -> list[str]:
    """Problems with a W&B sweep config, one message each; an empty list means it passes."""
    if not isinstance(config, dict):
        return [f"a sweep config is a mapping, got {type(config).__name__}"]
    errors = [f"unknown top-level key {key!r}" for key in config if key not in TOP_LEVEL_KEYS]
    for key in STRING_KEYS:
        if key in config and not isinstance(config[key], str):
            errors.append(f"`{key}` must be a string, got {config[key]!r}")

    method = config.get("method")
    if "method" not in config:
        errors.append("`method` is required (grid, random or bayes)")
    elif method not in METHODS:
        errors.append(f"`method` must be one of grid, random, bayes, got {method!r}")

    if "metric" in config:
        errors += _check_metric(config["metric"])
    elif method == "bayes":
        errors.append("`metric` is required for bayes search")
    if "early_terminate" in config:
        errors += _check_early_terminate(config["early_terminate"])
        if "metric" not in config:
            errors.append("`early_terminate` needs a `metric` to compare runs by")

    if "parameters" not in config:
        errors.append("`parameters` is required")
    else:
        errors += _check_parameters(config["parameters"], method)

    if "command" in config:
        errors += _check_command(config["command"])
    command = config.get("command", DEFAULT_COMMAND)
    if isinstance(command, list) and "${program}" in command and "program" not in config:
        errors.append("`program` is required: the command runs ${program} (the default command does)")

    if "run_cap" in config and not (_is_int(config["run_cap"]) and config["run_cap"] >= 1):
        errors.append(f"`run_cap` must be an integer >= 1, got {config['run_cap']!r}")
    if "controller" in config and config["controller"] not in ({"type": "cloud"}, {"type": "local"}):
        errors.append(f"`controller` must be {{type: cloud}} or {{type: local}}, got {config['controller']!r}")
    return errors
