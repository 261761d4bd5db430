"""W&B sweep files (``sweeps/*.yaml``): valid sweep configs whose runs the CLI accepts, checked offline.

* Config: the installed wandb ships no offline sweep-config validator (the server validates on ``wandb sweep``), so
  the files go through our own checker, ``tests/sweep_schema.py``, written from W&B's documented sweep-config keys:
  allowed top-level keys, method, metric (required for bayes), one form per parameter (``value``, a non-empty
  ``values`` list, or a distribution with its keys, ``min < max``), only ``value``/``values`` in a grid, and a
  ``command`` list of strings whose macros the agent knows.
* Commands: each parameter set becomes argv through wandb's own agent code (``Agent._command_run`` with the process
  launch replaced by a recorder), so ``${args}`` expands exactly as under ``wandb agent`` (``--name=value``).
* Values: every grid combination, and seeded samples of random/bayes sweeps, are parsed by the CLI with
  ``--print_config``; the printed config must hold the sampled values, the data module must accept it, the partition
  must give every client data, and the cut point must exist in the model.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import re
from functools import cache
from pathlib import Path

import pytest
import torch
import yaml
from _helpers import REPO, extended_params
from sweep_schema import distribution, validate_sweep

from lightning_sfl.cli import main
from lightning_sfl.data import FederatedDataModule, load_dataset, partition
from lightning_sfl.lightning_cli import SFLCLI
from lightning_sfl.models.split import split_model
from lightning_sfl.models.zoo import build_model

SWEEPS = sorted((REPO / "sweeps").glob("*.yaml"))
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


# ------------------------------------------------------------------ parameter sets, agent argv, CLI parsing
def _values(spec: dict) -> list:
    """All values a grid takes for one parameter (a grid takes only ``value`` or ``values``)."""
    kind = distribution(spec)
    if kind == "categorical":
        return list(spec["values"])
    if kind == "constant":
        return [spec["value"]]
    raise AssertionError(f"no grid expansion for {kind}: {spec}")


def _sample(spec: dict, rng: random.Random):
    """One draw of a random/bayes parameter (bayes starts from the same prior)."""
    kind = distribution(spec)
    if kind in ("categorical", "constant"):
        return rng.choice(_values(spec))
    if kind == "int_uniform":
        return rng.randint(spec["min"], spec["max"])
    if kind == "uniform":
        return rng.uniform(spec["min"], spec["max"])
    if kind == "log_uniform_values":
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


GOOD = {"method": "grid", "parameters": {"x": {"values": [1, 2]}}, "command": ["prog", "${args}"]}
LOG_UNIFORM = {"distribution": "log_uniform_values", "min": 0.001, "max": 1.0}
RANDOM = {**GOOD, "method": "random"}


@pytest.mark.parametrize(
    "good",
    [
        GOOD,
        {  # the documented example: default command, so `program` is needed
            "program": "train.py",
            "name": "sweepdemo",
            "method": "bayes",
            "metric": {"goal": "minimize", "name": "validation_loss"},
            "parameters": {
                "learning_rate": {"min": 0.0001, "max": 0.1},
                "batch_size": {"values": [16, 32, 64]},
                "optimizer": {"values": ["adam", "sgd"]},
            },
        },
        {**RANDOM, "parameters": {"x": LOG_UNIFORM, "n": {"min": 1, "max": 8}, "y": {"distribution": "normal"}}},
        {**RANDOM, "parameters": {"x": {"values": ["a", "b"], "probabilities": [0.25, 0.75]}}},
        {**RANDOM, "parameters": {"x": {"distribution": "q_uniform", "min": 0, "max": 1, "q": 0.1}}},
        {**GOOD, "parameters": {"opt": {"parameters": {"lr": {"value": 0.1}, "momentum": {"values": [0, 0.9]}}}}},
        {**GOOD, "metric": {"name": "loss", "goal": "minimize", "target": 0.1}, "run_cap": 5},
        {**GOOD, "metric": {"name": "loss"}, "early_terminate": {"type": "hyperband", "min_iter": 3, "eta": 2}},
        {**GOOD, "command": ["${env}", "python", "${program}", "${args_no_hyphens}"], "program": "train.py"},
        {**GOOD, "command": ["${envvar:HOME}/bin/prog", "${args}"], "project": "p", "entity": "e"},
    ],
)
def test_checker_accepts_documented_forms(good):
    assert validate_sweep(good) == []


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({k: v for k, v in GOOD.items() if k != "method"}, "`method` is required"),
        ({**GOOD, "method": "hyperopt"}, "`method` must be one of"),
        ({**GOOD, "metric": {"name": "test/acc", "goal": "max"}}, "`metric.goal` must be minimize or maximize"),
        ({**GOOD, "metric": {"goal": "maximize"}}, "`metric.name` is required"),
        ({**GOOD, "command": "prog ${args}"}, "`command` must be a non-empty list of strings"),
        ({**GOOD, "command": ["prog", 3, "${args}"]}, "`command[1]` must be a string"),
        ({**GOOD, "command": ["prog", "${arg}"]}, "unknown macro ${arg}"),
        ({**GOOD, "command": ["prog", "--x=${args}"]}, "only expanded as a whole item"),
        ({k: v for k, v in GOOD.items() if k != "command"}, "`program` is required"),
        ({k: v for k, v in GOOD.items() if k != "parameters"}, "`parameters` is required"),
        ({**GOOD, "parameters": {}}, "`parameters` must be a non-empty mapping"),
        ({**GOOD, "parameters": {"x y": {"values": [1]}}}, "without whitespace"),
        ({**GOOD, "parameters": {"x": [1, 2]}}, "must be a mapping"),
        ({**GOOD, "parameters": {"x": {"values": []}}}, "`values` must be a non-empty list"),
        ({**GOOD, "parameters": {"x": {"values": [1, 1]}}}, "`values` has duplicates"),
        ({**GOOD, "parameters": {"x": {"values": [1], "value": 1}}}, "exactly one of"),
        ({**GOOD, "parameters": {"x": {"max": 2}}}, "needs `value`, `values`, `min` and `max`"),
        ({**GOOD, "parameters": {"x": {"values": [1], "step": 1}}}, "unexpected key(s) `step`"),
        ({**GOOD, "parameters": {"x": {"min": 0.5, "max": 2.5}}}, "grid search takes only `value` or `values`"),
        ({**GOOD, "parameters": {"x": {"min": 1, "max": 4}}}, "grid search takes only"),  # int ranges too
        ({**GOOD, "parameters": {"x": {"values": [1, 2], "probabilities": [0.5, 0.5]}}}, "random search only"),
        ({**RANDOM, "parameters": {"x": {**LOG_UNIFORM, "min": 0}}}, "needs `min` > 0"),
        ({**RANDOM, "parameters": {"x": {**LOG_UNIFORM, "min": "1e-3"}}}, "`min` must be a number"),  # YAML: text
        ({**RANDOM, "parameters": {"x": {"min": 2.0, "max": 1.0}}}, "must be less than `max`"),
        ({**RANDOM, "parameters": {"x": {"distribution": "int_uniform", "min": 0, "max": 1.5}}}, "integer `min`"),
        ({**RANDOM, "parameters": {"x": {**LOG_UNIFORM, "distribution": "log_uniform"}}}, "use 'log_uniform_values'"),
        ({**RANDOM, "parameters": {"x": {"distribution": "gamma", "min": 1, "max": 2}}}, "unknown distribution"),
        ({**RANDOM, "parameters": {"x": {"distribution": "uniform", "min": 1}}}, "needs `max`"),
        ({**RANDOM, "parameters": {"x": {"distribution": "normal", "sigma": 0}}}, "`sigma` must be > 0"),
        ({**RANDOM, "parameters": {"x": {"values": [1, 2], "probabilities": [0.5, 0.6]}}}, "summing to 1"),
        ({**GOOD, "method": "bayes"}, "`metric` is required for bayes"),
        ({**GOOD, "run_cap": 0}, "`run_cap` must be an integer >= 1"),
        ({**GOOD, "metric": {"name": "loss"}, "early_terminate": {"type": "hyperband"}}, "needs `min_iter` or"),
        ({**GOOD, "early_terminate": {"type": "hyperband", "min_iter": 3}}, "needs a `metric`"),
        ({**GOOD, "programme": "x.py"}, "unknown top-level key 'programme'"),
        ({**GOOD, "name": 3}, "`name` must be a string"),
        ([GOOD], "a sweep config is a mapping"),
    ],
)
def test_checker_rejects_malformed_configs(bad, message):
    assert validate_sweep(GOOD) == []
    errors = validate_sweep(bad)
    assert any(message in e for e in errors), errors


@pytest.mark.parametrize("path", SWEEPS, ids=_ids)
def test_sweep_is_a_valid_wandb_sweep_config(path):
    assert validate_sweep(_load(path)) == []


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
    assert configs and all(c.startswith("configs/") for c in configs), "sweeps name no logger settings"
    for config in configs:
        assert (REPO / config).is_file(), config


def test_console_script_is_the_cli():
    from importlib.metadata import entry_points

    from lightning_sfl.cli import console_main

    (script,) = entry_points(group="console_scripts", name="lightning-sfl")
    assert script.load() is console_main  # main, then an exit without the module teardown


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


#: Sweeps whose parameter sets are parsed with ``-m extended`` only (~5-35 s each on two cores); the others in CI
#: (``digits_lr.yaml``: the same parsing of a sweep's sets against its config; the CIFAR-10 sweeps differ from it in
#: the config and the values swept only).
PARSED_EXTENDED = [
    "cifar10_dirichlet_skew.yaml",
    "cifar10_lr.yaml",
    "cifar10_num_clients_k10_k20.yaml",
    "cifar10_num_clients_k50_k100.yaml",
    "cifar10_quantity_skew.yaml",
    "cifar10_split_point_dirichlet.yaml",
    "cifar10_local_iters.yaml",
    "cifar10_participation.yaml",
    "cifar10_split_point_quantity.yaml",
]


@pytest.mark.parametrize("path", extended_params(SWEEPS, {REPO / "sweeps" / n for n in PARSED_EXTENDED}), ids=_ids)
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


@pytest.mark.parametrize(
    "env,settings,offline,mode",
    [
        ({}, None, True, "dryrun"),  # nothing says otherwise: offline, no account needed
        ({"WANDB_MODE": "online"}, None, False, "online"),
        ({"WANDB_MODE": "offline"}, None, False, "offline"),
        ({"WANDB_MODE": "disabled"}, None, False, "disabled"),
        ({}, "online", False, None),  # `wandb online` wrote it to ./wandb/settings: W&B reads it there
        ({}, "offline", False, None),
        ({"WANDB_SWEEP_ID": "abc123"}, None, False, None),  # a sweep agent's run reports to its sweep
    ],
    ids=["default", "env-online", "env-offline", "env-disabled", "wandb-online", "wandb-offline", "agent"],
)
def test_wandbs_own_switches_decide_the_mode(env, settings, offline, mode, tmp_path, monkeypatch, wandb_401):
    """W&B's switches (WANDB_MODE, `wandb online|offline`, an agent's environment) win over the CLI's offline
    default, and no overlay config is needed for a sweep: the CLI's logger leaves the choice to its W&B process
    (``offline=None``), which sets ``WANDB_MODE`` to ``init_mode(None)`` if that is not None; Lightning's own
    WandbLogger given by class path is set offline by the CLI unless a switch says otherwise. (W&B is reachable here,
    with a key: the check that sends an online run offline when it is not, tests/integration/test_wandb_online.py,
    passes.)"""
    from lightning_sfl.wandb.process import init_mode

    monkeypatch.setenv("WANDB_BASE_URL", wandb_401)
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.chdir(tmp_path)
    for key in ("WANDB_MODE", "WANDB_SWEEP_ID"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "global"))  # no global settings file of this machine
    if settings:
        (tmp_path / "wandb").mkdir()
        (tmp_path / "wandb" / "settings").write_text(f"[default]\nmode = {settings}\n")
    cli = SFLCLI(args=["--config", str(REPO / "configs/digits/scala.yaml")], run=False)
    (logger,) = [lg for lg in cli.trainer.loggers if type(lg).__name__ == "WandbLogger"]
    assert logger._offline_choice is None
    assert (init_mode(logger._offline_choice) or os.environ.get("WANDB_MODE")) == mode
    lightning_logger = "--trainer.logger=lightning.pytorch.loggers.WandbLogger"
    cli = SFLCLI(args=["--config", str(REPO / "configs/digits/scala.yaml"), lightning_logger], run=False)
    assert cli.trainer.logger._offline is offline


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
    assert re.search(r"final test accuracy: (0\.\d{4}|1\.0000) after 1 round\n", capsys.readouterr().out)
    (ckpt,) = run_dir.glob("runs/**/last.ckpt")
    assert torch.load(ckpt, weights_only=False)["hyper_parameters"]["lr"] == params["model.lr"]
