"""W&B sweep files (``sweeps/*.yaml``): valid sweep configs whose runs the CLI accepts, checked offline.

* Schema: the installed wandb ships no offline sweep-config validator (that lives in the optional ``sweeps``
  package, ``wandb[sweeps]``, which needs ``jsonschema``; neither is installed, and the server validates on
  ``wandb sweep``). So the files are checked against W&B's own JSON schema, vendored unchanged as
  ``sweeps/schema/sweep_config.schema.json``, by the small draft-07 validator below (a test fails if the schema
  uses a keyword it does not implement), plus the checks that package makes in code: ``min < max``, probabilities,
  no deprecated distributions, grid-compatible parameter types, and a metric for bayes.
* Commands: each parameter set becomes argv through wandb's own agent code (``Agent._command_run`` with the process
  launch replaced by a recorder), so ``${args}`` expands exactly as under ``wandb agent`` (``--name=value``).
* Values: every grid combination, and seeded samples of random/bayes sweeps, are parsed by the CLI with
  ``--print_config``; the printed config must hold the sampled values, the data module must accept it, the partition
  must give every client data, and the cut point must exist in the model.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import re
from functools import cache
from pathlib import Path

import pytest
import torch
import yaml

from lightning_sfl.cli import SFLCLI, main
from lightning_sfl.data import FederatedDataModule, load_dataset, partition
from lightning_sfl.models.split import split_model
from lightning_sfl.models.zoo import build_model

REPO = Path(__file__).resolve().parents[1]
SWEEPS = sorted((REPO / "sweeps").glob("*.yaml"))
SCHEMA = json.loads((REPO / "sweeps/schema/sweep_config.schema.json").read_text())
ONLINE_OVERLAY = REPO / "sweeps/overlays/wandb_online.yaml"
RANDOM_SAMPLES = 4  # parameter sets drawn from each random/bayes sweep
# Datasets whose files are not here: (classes, input shape, training-set size); their training labels are balanced.
DATASET_META = {"cifar10": (10, (3, 32, 32), 50_000)}

# The SCALA paper's studies (§5.2-5.4, appendices G and H): sweep file -> {parameter: values (list) or value}.
BOTH_SKEWS = {"data.partition": ["quantity", "dirichlet"], "data.alpha": 2, "data.beta": 0.1}
PAPER_STUDIES = {
    "cifar10_participation.yaml": {"data.participation": [0.05, 0.1, 0.2, 0.5], **BOTH_SKEWS},
    "cifar10_num_clients_k10_k20.yaml": {"data.num_clients": [10, 20], "data.participation": 0.5, **BOTH_SKEWS},
    "cifar10_num_clients_k50_k100.yaml": {"data.num_clients": [50, 100], "data.participation": 0.1, **BOTH_SKEWS},
    "cifar10_local_iters.yaml": {"model.local_iters": [1, 5, 10, 20], "trainer.max_epochs": 200, **BOTH_SKEWS},
    "cifar10_split_point_quantity.yaml": {
        "model.split_point": ["s1", "s2", "s3", "s4", "s5"],
        "data.partition": "quantity",
        "data.alpha": [2, 4],
    },
    "cifar10_split_point_dirichlet.yaml": {
        "model.split_point": ["s1", "s2", "s3", "s4", "s5"],
        "data.partition": "dirichlet",
        "data.beta": [0.05, 0.1],
    },
    "cifar10_quantity_skew.yaml": {"data.partition": "quantity", "data.alpha": [2, 4]},
    "cifar10_dirichlet_skew.yaml": {"data.partition": "dirichlet", "data.beta": [0.05, 0.1]},
    "cifar10_lr.yaml": {"model.lr": [0.001, 0.003, 0.01, 0.03, 0.1], **BOTH_SKEWS},
}


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _ids(path: Path) -> str:
    return path.name


# ------------------------------------------------------------------ W&B's JSON schema (draft-07 subset it uses)
_TYPES = {
    "object": lambda x: isinstance(x, dict),
    "array": lambda x: isinstance(x, list),
    "string": lambda x: isinstance(x, str),
    "boolean": lambda x: isinstance(x, bool),
    "null": lambda x: x is None,
    "number": lambda x: isinstance(x, int | float) and not isinstance(x, bool),
    "integer": lambda x: (isinstance(x, int) and not isinstance(x, bool)) or (isinstance(x, float) and x.is_integer()),
}
_FORMATS = {"float": lambda x: isinstance(x, float), "integer": lambda x: isinstance(x, int)}  # as in wandb/sweeps
VALIDATED_KEYWORDS = set(
    "$ref type enum format minimum exclusiveMinimum pattern required minProperties properties additionalProperties "
    "propertyNames dependencies minItems items anyOf oneOf".split()
)
ANNOTATIONS = set("$schema $id $comment title description default definitions examples".split())


def _same(a, b) -> bool:
    return a is b if isinstance(a, bool) or isinstance(b, bool) else a == b


def _schema_errors(x, schema: dict, where: str = "config") -> list[str]:
    """Draft-07 validation of ``x`` against ``schema`` (a node of :data:`SCHEMA`); one message per violation."""
    if "$ref" in schema:
        node = SCHEMA
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        return _schema_errors(x, node, where)
    if "type" in schema:
        types = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
        if not any(_TYPES[t](x) for t in types):
            return [f"{where}: {x!r} is not of type {'/'.join(types)}"]
    errors = []
    if "enum" in schema and not any(_same(x, e) for e in schema["enum"]):
        errors.append(f"{where}: {x!r} is not one of {schema['enum']}")
    if schema.get("format") in _FORMATS and not _FORMATS[schema["format"]](x):
        errors.append(f"{where}: {x!r} is not a {schema['format']}")
    if _TYPES["number"](x):
        if "minimum" in schema and x < schema["minimum"]:
            errors.append(f"{where}: {x!r} < minimum {schema['minimum']}")
        if "exclusiveMinimum" in schema and x <= schema["exclusiveMinimum"]:
            errors.append(f"{where}: {x!r} <= exclusiveMinimum {schema['exclusiveMinimum']}")
    if isinstance(x, str) and "pattern" in schema and not re.search(schema["pattern"], x):
        errors.append(f"{where}: {x!r} does not match {schema['pattern']!r}")
    if isinstance(x, dict):
        errors += [f"{where}: missing required key {k!r}" for k in schema.get("required", []) if k not in x]
        if len(x) < schema.get("minProperties", 0):
            errors.append(f"{where}: fewer than {schema['minProperties']} keys")
        properties, extra = schema.get("properties", {}), schema.get("additionalProperties", True)
        for key, value in x.items():
            if "propertyNames" in schema:
                errors += _schema_errors(key, schema["propertyNames"], f"{where}: key")
            if key in properties:
                errors += _schema_errors(value, properties[key], f"{where}.{key}")
            elif extra is False:
                errors.append(f"{where}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                errors += _schema_errors(value, extra, f"{where}.{key}")
        for key, needs in schema.get("dependencies", {}).items():
            if key in x:
                if isinstance(needs, list):
                    errors += [f"{where}: {key!r} needs {k!r}" for k in needs if k not in x]
                else:
                    errors += _schema_errors(x, needs, where)
    if isinstance(x, list):
        if len(x) < schema.get("minItems", 0):
            errors.append(f"{where}: fewer than {schema['minItems']} items")
        if isinstance(schema.get("items"), dict):
            for i, item in enumerate(x):
                errors += _schema_errors(item, schema["items"], f"{where}[{i}]")
    if "anyOf" in schema:
        branches = [_schema_errors(x, s, where) for s in schema["anyOf"]]
        if all(branches):
            errors.append(f"{where}: matches none of the allowed forms, e.g. {'; '.join(min(branches, key=len))}")
    if "oneOf" in schema:
        matching = sum(not _schema_errors(x, s, where) for s in schema["oneOf"])
        if matching != 1:
            errors.append(f"{where}: matches {matching} of the oneOf forms instead of exactly one")
    return errors


def _param_type(spec: dict) -> str | None:
    """The parameter's kind as the ``sweeps`` package decides it: the first form in ``parameter.anyOf`` it fits."""
    for ref in SCHEMA["definitions"]["parameter"]["anyOf"]:
        if not _schema_errors(spec, ref):
            return ref["$ref"].rsplit("/", 1)[-1]
    return None


GRID_TYPES = {"param_categorical", "param_single_value", "param_int_uniform", "param_quniform"}
DEPRECATED_TYPES = {"param_loguniform", "param_inv_loguniform", "param_qloguniform"}


def sweep_violations(config) -> list[str]:
    """What ``wandb sweep`` (W&B's schema and the ``sweeps`` package's extra checks) would reject or warn about."""
    if not isinstance(config, dict):
        return [f"a sweep config is a mapping, got {type(config).__name__}"]
    errors = _schema_errors(config, SCHEMA)
    if "parameters" not in config:
        errors.append("`parameters` is required")
    if "metric" in config and "metrics" in config:
        errors.append("`metric` and `metrics` cannot both be set")
    if config.get("method") == "bayes" and "metric" not in config:
        errors.append('bayes search requires a "metric" section')
    for name, spec in (config.get("parameters") or {}).items():
        if not isinstance(spec, dict):
            errors.append(f"parameter {name}: not a mapping")
            continue
        bounds = [spec.get("min"), spec.get("max")]
        if all(_TYPES["number"](b) for b in bounds) and not bounds[0] < bounds[1]:
            errors.append(f"parameter {name}: min {spec['min']} is not less than max {spec['max']}")
        if "probabilities" in spec:
            probabilities, values = spec["probabilities"], spec.get("values", [])
            if len(probabilities) != len(values) or not math.isclose(sum(probabilities), 1.0):
                errors.append(f"parameter {name}: probabilities must match the values and sum to 1")
        kind = _param_type(spec)
        if kind in DEPRECATED_TYPES:
            errors.append(f"parameter {name}: {spec.get('distribution')} is deprecated, use its _values form")
        if config.get("method") == "grid" and kind not in GRID_TYPES:
            errors.append(f"parameter {name}: {kind} cannot be used in a grid search")
    return errors


def _schema_keywords(schema) -> set[str]:
    """Every keyword used in a schema (property and definition names are not keywords)."""
    if not isinstance(schema, dict):
        return set()
    found = set(schema)
    for key, value in schema.items():
        if key in ("properties", "definitions"):
            for sub in value.values():
                found |= _schema_keywords(sub)
        elif key in ("anyOf", "oneOf", "allOf"):
            for sub in value:
                found |= _schema_keywords(sub)
        elif key in ("items", "additionalProperties", "propertyNames", "not"):
            found |= _schema_keywords(value)
        elif key == "dependencies":
            for sub in value.values():
                found |= _schema_keywords(sub)
    return found


# ------------------------------------------------------------------ parameter sets, agent argv, CLI parsing
def _values(spec: dict) -> list:
    """All values a grid takes for one parameter (``sweeps.grid_search``: categorical, constant, int_uniform)."""
    kind = _param_type(spec)
    if kind == "param_categorical":
        return list(spec["values"])
    if kind == "param_single_value":
        return [spec["value"]]
    if kind == "param_int_uniform":
        return list(range(spec["min"], spec["max"] + 1))
    raise AssertionError(f"no grid expansion for {kind}: {spec}")


def _sample(spec: dict, rng: random.Random):
    """One draw of a random/bayes parameter (bayes starts from the same prior)."""
    kind = _param_type(spec)
    if kind in ("param_categorical", "param_single_value", "param_int_uniform"):
        return rng.choice(_values(spec))
    if kind == "param_uniform":
        return rng.uniform(spec["min"], spec["max"])
    if kind == "param_loguniform_v2":
        return math.exp(rng.uniform(math.log(spec["min"]), math.log(spec["max"])))
    raise AssertionError(f"add a sampler for {kind}: {spec}")


def parameter_sets(sweep: dict) -> list[dict]:
    """Every grid combination, or :data:`RANDOM_SAMPLES` seeded draws for random/bayes."""
    params = sweep["parameters"]
    if sweep["method"] == "grid":
        names = list(params)
        return [dict(zip(names, combo)) for combo in itertools.product(*(_values(params[n]) for n in names))]
    rng = random.Random(0)
    return [{name: _sample(spec, rng) for name, spec in params.items()} for _ in range(RANDOM_SAMPLES)]


@pytest.fixture
def agent_command(tmp_path, monkeypatch):
    """``(sweep, params) -> command list`` built by wandb's agent code, nothing launched, nothing sent."""
    from wandb import wandb_agent

    launched: list[list[str]] = []

    class Recorder:  # stands in for the process the agent would start
        def __init__(self, command=None, **_):
            launched.append(command)

    monkeypatch.setattr(wandb_agent, "AgentProcess", Recorder)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))  # where the agent writes each run's parameter file
    monkeypatch.setenv("WANDB_SWEEP_ID", "offline")
    for var in ("WANDB_RUN_ID", "WANDB_SWEEP_PARAM_PATH"):  # the agent sets these itself; monkeypatch restores them
        monkeypatch.setenv(var, "")
    agent = wandb_agent.Agent(api=None, queue=None, sweep_id="offline")

    def build(sweep: dict, params: dict) -> list[str]:
        agent._sweep_command = list(sweep["command"])
        args = {name: {"value": value} for name, value in params.items()}
        agent._command_run({"run_id": f"run{len(launched)}", "program": sweep.get("program"), "args": args})
        return launched[-1]

    return build


class _ParseOnceCLI(SFLCLI):
    """SFLCLI that builds its parser (most of the time of a ``--print_config`` call) once and reuses it; parsing and
    printing are SFLCLI's own. ``test_cached_parser_prints_what_the_cli_prints`` checks the two agree."""

    _built: dict = {}

    def setup_parser(self, add_subcommands, main_kwargs, subparser_kwargs) -> None:
        if add_subcommands not in self._built:
            super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
            self._built[add_subcommands] = (self.parser, getattr(self, "_subcommand_method_arguments", None))
        self.parser, self._subcommand_method_arguments = self._built[add_subcommands]


def _print_config(argv: list[str], capsys, cli=_ParseOnceCLI) -> tuple[dict, str]:
    """Run ``cli(args=argv + ['--print_config'])`` from the repository root; the printed config, parsed, and as text."""
    capsys.readouterr()
    cwd = os.getcwd()
    os.chdir(REPO)  # the agent runs from the repository root: config paths in commands are relative to it
    try:
        with pytest.raises(SystemExit) as exc:
            cli(args=[*argv, "--print_config"])
    finally:
        os.chdir(cwd)
    out = capsys.readouterr()
    assert exc.value.code in (0, None), f"{argv} did not parse:\n{out.err[-3000:]}"
    return yaml.safe_load(out.out), out.out


def _lookup(config: dict, dotted: str):
    """``model.lr`` -> config['model']['init_args']['lr'] (subclass sections keep their arguments in init_args)."""
    node = config
    for key in dotted.split("."):
        if key not in node and "init_args" in node:
            node = node["init_args"]
        # argparse also takes unambiguous abbreviations (--data.partic=...); sweep names must be the full ones
        assert isinstance(node, dict) and key in node, f"{dotted} is not a config key"
        node = node[key]
    return node


@cache
def _labels(dataset: str, root: str, seed: int) -> tuple[torch.Tensor, int, tuple[int, ...]]:
    if dataset in DATASET_META:
        num_classes, shape, size = DATASET_META[dataset]
        return torch.arange(size) % num_classes, num_classes, shape
    splits = load_dataset(dataset, root=root, seed=seed)
    return splits.train_y, splits.num_classes, tuple(splits.input_shape)


@cache
def _check_cut(arch: str, num_classes: int, shape: tuple[int, ...], split_point: str) -> None:
    split_model(build_model(arch, num_classes, shape), split_point)


def _check_runnable(config: dict) -> None:
    """What the run would reject before training: data module arguments, the partition, the model's cut point."""
    data = config["data"]
    FederatedDataModule(**data)
    labels, num_classes, shape = _labels(data["dataset"], data["root"], data["seed"])
    keys = ("alpha", "beta", "shards_per_client", "seed")
    partition(labels, data["partition"], data["num_clients"], **{k: data[k] for k in keys})
    model = config["model"]["init_args"]
    _check_cut(model["arch"], num_classes, shape, model["split_point"])


# ------------------------------------------------------------------ tests
def test_there_is_a_sweep_for_each_study():
    names = {p.name for p in SWEEPS}
    assert set(PAPER_STUDIES) | {"digits_lr.yaml"} <= names


def test_validator_implements_every_keyword_of_the_schema():
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert _schema_keywords(SCHEMA) <= VALIDATED_KEYWORDS | ANNOTATIONS


GOOD = {"method": "grid", "parameters": {"x": {"values": [1, 2]}}, "command": ["prog", "${args}"]}
LOG_UNIFORM = {"distribution": "log_uniform_values", "min": 0.001, "max": 1.0}


@pytest.mark.parametrize(
    "bad",
    [
        {k: v for k, v in GOOD.items() if k != "method"},
        {**GOOD, "method": "hyperopt"},
        {**GOOD, "metric": {"name": "test/acc", "goal": "max"}},
        {**GOOD, "metric": {"goal": "maximize"}},
        {**GOOD, "command": "prog ${args}"},
        {**GOOD, "parameters": {}},
        {**GOOD, "parameters": {"x y": {"values": [1]}}},
        {**GOOD, "parameters": {"x": {"values": []}}},
        {**GOOD, "parameters": {"x": {"values": [1], "value": 1}}},
        {**GOOD, "parameters": {"x": {"min": 0.5, "max": 2.5}}},  # uniform: not in a grid
        {**GOOD, "method": "random", "parameters": {"x": {**LOG_UNIFORM, "min": 0}}},
        {**GOOD, "method": "random", "parameters": {"x": {**LOG_UNIFORM, "min": "1e-3"}}},  # YAML reads 1e-3 as text
        {**GOOD, "method": "random", "parameters": {"x": {"min": 2.0, "max": 1.0}}},
        {**GOOD, "method": "random", "parameters": {"x": {**LOG_UNIFORM, "distribution": "log_uniform"}}},  # old form
        {**GOOD, "method": "bayes"},
        {**GOOD, "run_cap": 0},
        {**GOOD, "early_terminate": {"type": "hyperband"}},
        {**GOOD, "programme": "x.py"},
    ],
)
def test_validator_rejects_malformed_configs(bad):
    assert sweep_violations(GOOD) == []
    assert sweep_violations(bad), bad


@pytest.mark.parametrize("path", SWEEPS, ids=_ids)
def test_sweep_is_a_valid_wandb_sweep_config(path):
    assert sweep_violations(_load(path)) == []


@pytest.mark.parametrize("path", SWEEPS, ids=_ids)
def test_sweep_command_is_a_block_list_ending_in_args_with_existing_configs(path):
    root = yaml.compose(path.read_text())
    command_node = next(v for k, v in root.value if k.value == "command")
    assert isinstance(command_node, yaml.SequenceNode) and command_node.flow_style is False, "block-style list"
    command = _load(path)["command"]
    assert command[:2] == ["lightning-sfl", "fit"]
    assert command[-1] == "${args}" and command.count("${args}") == 1, "${args} last, so it overrides the configs"
    assert not [c for c in command[:-1] if "${" in str(c)], "no other agent macro (there is no `program`)"
    configs = [command[i + 1] for i, c in enumerate(command[:-1]) if c == "--config"]
    assert configs and configs[0].startswith("configs/") and configs[-1] == "sweeps/overlays/wandb_online.yaml"
    for config in configs:
        assert (REPO / config).is_file(), config


def test_console_script_is_the_cli():
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="lightning-sfl")
    assert script.load() is main


@pytest.mark.parametrize("path", SWEEPS, ids=_ids)
def test_sweep_metric_and_method(path):
    sweep = _load(path)
    assert sweep["metric"] == {"name": "test/acc", "goal": "maximize"}
    if path.name in PAPER_STUDIES:
        assert sweep["method"] == "grid"
        assert sweep["parameters"]["data.seed"] == {"values": [0, 1, 2]}
    else:
        assert sweep["method"] in ("random", "bayes")


@pytest.mark.parametrize("name", sorted(PAPER_STUDIES))
def test_paper_sweeps_use_the_papers_values(name):
    params = _load(REPO / "sweeps" / name)["parameters"]
    for param, expected in PAPER_STUDIES[name].items():
        assert params[param] == ({"values": expected} if isinstance(expected, list) else {"value": expected}), param
    partitions = _values(params["data.partition"])  # stated, not left to the config
    assert "dirichlet" not in partitions or "data.beta" in params, "Dirichlet needs its beta (not the data default)"
    assert "quantity" not in partitions or "data.alpha" in params


@pytest.mark.parametrize("path", SWEEPS, ids=_ids)
def test_every_parameter_set_parses_and_overrides_the_config(path, agent_command, capsys):
    sweep = _load(path)
    sets = parameter_sets(sweep)
    if sweep["method"] == "grid":  # the header comment states the number of runs
        assert re.search(rf"= {len(sets)} runs\b", path.read_text()), f"{len(sets)} runs"
    for params in sets:
        command = agent_command(sweep, params)
        assert command[: len(sweep["command"]) - 1] == sweep["command"][:-1]
        assert command[len(sweep["command"]) - 1 :] == [f"--{k}={v}" for k, v in params.items()]
        config, _ = _print_config(command[1:], capsys)
        for name, value in params.items():
            assert _lookup(config, name) == value, (name, value, _lookup(config, name))
        _check_runnable(config)


def test_cached_parser_prints_what_the_cli_prints(agent_command, capsys):
    sweep = _load(REPO / "sweeps/cifar10_split_point_dirichlet.yaml")
    argv = agent_command(sweep, parameter_sets(sweep)[-1])[1:]
    assert _print_config(argv, capsys, cli=SFLCLI)[1] == _print_config(argv, capsys)[1]


def test_online_overlay_is_the_cli_default_logger_with_wandb_online(capsys, monkeypatch):
    """Sweep runs must report to W&B. The default WandbLogger is offline and then sets WANDB_MODE=dryrun itself, so
    only a config can turn it online; the overlay must keep the rest of the CLI's default loggers."""
    base = ["fit", "--config", "configs/digits/scala.yaml"]
    default = _print_config(base, capsys)[0]["trainer"]["logger"]
    online = _print_config([*base, "--config", str(ONLINE_OVERLAY)], capsys)[0]["trainer"]["logger"]
    assert default[0]["class_path"] == "lightning.pytorch.loggers.WandbLogger"
    assert default[0]["init_args"]["offline"] is True and online[0]["init_args"]["offline"] is False
    online[0]["init_args"]["offline"] = True
    assert online == default
    with pytest.raises(SystemExit) as exc:  # a nested option cannot reach one logger of the default list
        _ParseOnceCLI(args=[*base, "--trainer.logger.init_args.offline=false", "--print_config"])
    assert exc.value.code == 2

    import wandb
    from lightning.pytorch.loggers import WandbLogger

    modes = []
    monkeypatch.setattr(wandb, "init", lambda **_: modes.append(os.environ.get("WANDB_MODE")) or object())
    for init_args, env, expected in (
        (default[0]["init_args"], "online", "dryrun"),  # WANDB_MODE=online cannot switch the default on
        ({**default[0]["init_args"], "offline": False}, "online", "online"),
        ({**default[0]["init_args"], "offline": False}, "offline", "offline"),  # ...and can switch the overlay off
    ):
        monkeypatch.setenv("WANDB_MODE", env)
        _ = WandbLogger(**init_args).experiment
        assert modes[-1] == expected


def test_readme_lists_every_sweep():
    readme = (REPO / "sweeps/README.md").read_text()
    for path in SWEEPS:
        assert f"`{path.name}`" in readme, path.name


def test_a_sampled_digits_run_trains(agent_command, run_dir, capsys):
    """One parameter set of the digits sweep, launched as the agent would (from a root holding configs/ and sweeps/),
    trains for one round; the sampled learning rate reaches the model."""
    sweep = _load(REPO / "sweeps/digits_lr.yaml")
    params = parameter_sets(sweep)[0]
    command = agent_command(sweep, params)
    for name in ("configs", "sweeps"):
        (run_dir / name).symlink_to(REPO / name)
    extra = ["--trainer.max_epochs=1", "--trainer.logger=false", "--trainer.enable_progress_bar=false"]
    main([*command[1:], *extra])
    assert re.search(r"final test accuracy: (0\.\d{4}|1\.0000) after 1 rounds", capsys.readouterr().out)
    (ckpt,) = run_dir.glob("runs/**/last.ckpt")
    assert torch.load(ckpt, weights_only=False)["hyper_parameters"]["lr"] == params["model.lr"]
