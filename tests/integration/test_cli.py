"""The ``lightning-sfl`` command: configs parse, fit/validate/test run, and runs are reproducible (the README's main
command against the numbers the README reports: ``tests/studies/test_cli_documented.py``)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
import torch
from _helpers import REPO, extended_params

from lightning_sfl.algorithms import ALGORITHMS
from lightning_sfl.lightning_cli import SFLCLI

CONFIGS = sorted((REPO / "configs").rglob("*.yaml"))
FAST = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


def _fit(run_dir: Path, *extra: str, rounds: int = 3, config: Path = REPO / "configs/digits/scala.yaml") -> Path:
    """Train on digits with the CSV logger only; return the metrics file."""
    args = [
        "fit",
        "--config",
        str(config),
        f"--trainer.max_epochs={rounds}",
        *FAST,
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.save_dir={run_dir}",
        "--trainer.logger.name=csv",
        f"--trainer.default_root_dir={run_dir}",
        *extra,
    ]
    SFLCLI(args=args)
    return max(run_dir.glob("*/csv/version_*/metrics.csv"), key=lambda p: p.stat().st_mtime)


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_configs_exist_for_the_papers_main_settings():
    names = {p.relative_to(REPO / "configs").as_posix() for p in CONFIGS}
    assert {
        "digits/scala.yaml",
        "cifar10/scala.yaml",
        "cifar100/scala.yaml",
        "cinic10/scala.yaml",
        "fashion_mnist/scala.yaml",
    } <= names


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.relative_to(REPO / "configs").as_posix())
def test_every_config_parses(config, capsys):
    with pytest.raises(SystemExit) as exc:
        SFLCLI(args=["fit", "--config", str(config), "--print_config"])
    assert exc.value.code in (0, None)
    printed = capsys.readouterr().out
    assert re.search(r"class_path: lightning_sfl\.(algorithms\.)?[A-Z]", printed)  # the top-level export is shorter
    assert "local_iters:" in printed and "participation:" in printed


def test_semi_sfl_paper_configs_match_its_settings(capsys):
    """Semi-SFL's SVHN and CIFAR-10 settings (Section V): 30 clients, 10 per round, tau 0.95, SGD 0.02 with cosine
    decay, momentum 0.9, batch 64, K_u = 50; 1,000 and 4,000 labels; the CNN split at layer 2, AlexNet at 5."""
    for name, labels, arch, cut in (("svhn", 100, "cnn_svhn", "s4"), ("cifar10", 400, "alexnet_cifar", "s5")):
        with pytest.raises(SystemExit):
            SFLCLI(args=["fit", "--config", str(REPO / f"configs/{name}/semi_sfl.yaml"), "--print_config"])
        out = capsys.readouterr().out
        for expected in (
            "num_clients: 30",
            "participation: 0.333",
            "threshold: 0.95",
            "lr: 0.02",
            "lr_schedule: cosine",
            "momentum: 0.9",
            "client_batch_size: 64",
            "local_iters: 50",
            "max_epochs: 1000",
            f"labelled_per_class: {labels}",
            f"arch: {arch}",
            f"split_point: {cut}",
        ):
            assert expected in out, (name, expected)


def test_main_setting_configs_match_the_paper(capsys):
    for name in ("cifar10", "cifar100", "cinic10", "fashion_mnist"):
        with pytest.raises(SystemExit):
            SFLCLI(args=["fit", "--config", str(REPO / f"configs/{name}/scala.yaml"), "--print_config"])
        out = capsys.readouterr().out
        for expected in (
            "num_clients: 100",
            "participation: 0.1",
            "batch_size: 320",
            "local_iters: 5",
            "lr: 0.01",
            "split_point: s2",
            "arch: alexnet_",
        ):
            assert expected in out, (name, expected)


def test_required_argument_names_exist(capsys):
    with pytest.raises(SystemExit):
        SFLCLI(args=["fit", "--help"])
    help_text = capsys.readouterr().out
    for arg in (
        "--data.dataset",
        "--data.num_clients",
        "--data.partition",
        "--data.alpha",
        "--data.beta",
        "--data.participation",
        "--data.batch_size",
        "--data.seed",
        "--trainer.max_epochs",
    ):
        assert arg in help_text, arg
    with pytest.raises(SystemExit):
        SFLCLI(args=["fit", "--model.help", "SCALA"])
    model_help = capsys.readouterr().out
    for arg in (
        "--model.local_iters",
        "--model.lr",
        "--model.split_point",
        "--model.concat_activations",
        "--model.server_logit_adjustment",
        "--model.client_logit_adjustment",
    ):
        assert arg in model_help, arg


def test_fit_logs_per_round_accuracy_and_prints_final_line(run_dir, capsys):
    rows = _rows(_fit(run_dir, rounds=3))
    evals = [r for r in rows if r.get("test/acc")]
    assert [float(r["round"]) for r in evals] == [1.0, 2.0, 3.0]
    for r in evals:
        per_class = [float(r[f"test/acc_class_{c}"]) for c in range(10)]
        assert all(0.0 <= v <= 1.0 for v in per_class)
    out = capsys.readouterr().out
    match = re.search(r"final test accuracy: (0\.\d{4}|1\.0000) after 3 rounds", out)
    assert match and float(match.group(1)) == pytest.approx(float(evals[-1]["test/acc"]), abs=1e-4)


@pytest.mark.extended  # ~13 s on two cores; every exact resume compares runs of one seed
def test_same_seed_gives_identical_metrics_and_other_seed_does_not(run_dir):
    a = _rows(_fit(run_dir / "a", rounds=2))
    b = _rows(_fit(run_dir / "b", rounds=2))
    c = _rows(_fit(run_dir / "c", "--data.seed=5", rounds=2))
    assert a == b
    assert a != c


def test_validate_and_test_from_checkpoint(run_dir, capsys):
    _fit(run_dir, rounds=3)
    ckpt = next(run_dir.rglob("epoch=2-*.ckpt"))  # saved after round 3
    last = ckpt.parent / "last.ckpt"  # a link to it (one checkpoint written per round), round 2's kept beside it
    assert last.is_symlink() and last.resolve() == ckpt.resolve()
    previous = ckpt.name.replace("epoch=2-step=15", "epoch=1-step=10")
    assert sorted(p.name for p in ckpt.parent.iterdir()) == sorted([previous, ckpt.name, "last.ckpt"])
    fitted = [r for r in _rows(next(run_dir.glob("*/csv/version_*/metrics.csv"))) if r.get("test/acc")][-1]
    for sub in ("validate", "test"):
        SFLCLI(
            args=[
                sub,
                "--config",
                str(REPO / "configs/digits/scala.yaml"),
                f"--ckpt_path={ckpt}",
                *FAST,
                "--trainer.logger=false",
            ]
        )
        out = capsys.readouterr().out
        assert "test/acc" in out
        acc = float(re.search(r"test/acc[\s│]+([0-9.]+)", out).group(1))
        assert acc == pytest.approx(float(fitted["test/acc"]), abs=1e-4)
        assert float(re.search(r"\bround[\s│]+([0-9.]+)", out).group(1)) == 3.0  # the checkpoint's round


def test_every_registered_algorithm_has_a_digits_config():
    import yaml

    for name, cls in ALGORITHMS.items():
        path = REPO / "configs" / "digits" / f"{name}.yaml"
        assert path.exists(), f"missing {path.name}"
        assert yaml.safe_load(path.read_text())["model"]["class_path"] == f"lightning_sfl.algorithms.{cls.__name__}"


#: Run from their configs with ``-m extended`` only (~90 s of CI on two cores): every config parses in CI
#: (:func:`test_every_config_parses`) and every method trains two rounds (``test_algorithms.py``); CI runs one method
#: of a family through the CLI (SCALA, FedAvg, GAS and supervised-only, the one without traffic). A method added
#: since runs in CI.
CONFIG_RUNS_EXTENDED = set(
    "async_sfl ca2fl ca_sfl cs_sfl fedadagrad fedadam fedavgm fedbuff fedcbs fedconcat feddecorr feddyn fedlc "
    "fedlogit fedmatch fednova fedprox fedrs fedswitch fedswitch_sl fedyogi fsha lla_sfl minibatch_sfl s2fl "
    "scaffold scala_pe semi_sfl semifl sfl_local_loss splitfedv1 splitfedv2 splitfedv3".split()
)


@pytest.mark.parametrize("name", extended_params(sorted(ALGORITHMS), CONFIG_RUNS_EXTENDED))
def test_every_algorithm_runs_from_its_config_with_loggers(name, run_dir):
    """One round through the real CLI with the CSV logger (catches e.g. hparam clashes between model and data)."""
    rows = _rows(_fit(run_dir, rounds=1, config=REPO / "configs" / "digits" / f"{name}.yaml"))
    assert [float(r["round"]) for r in rows if r.get("test/acc")] == [1.0]
    sent = any(float(r.get("comm/total_bytes") or 0) > 0 for r in rows)
    assert sent == (name != "supervised_only"), "every method but supervised_only (no clients) has traffic"


@pytest.mark.parametrize(
    "name,policy", [("cs_sfl", "ClassBalancedSelection"), ("fedcbs", "FedCBSSelection"), ("scala", "UniformSelection")]
)
def test_methods_keep_their_client_selection_through_the_cli(name, policy, run_dir):
    """A subclass's own selection default must survive LightningCLI's signature resolution."""
    cli = SFLCLI(
        args=["--config", str(REPO / "configs" / "digits" / f"{name}.yaml"), "--trainer.logger=false"], run=False
    )
    assert type(cli.model.selection).__name__ == policy
    override = SFLCLI(
        args=[
            "--config",
            str(REPO / "configs" / "digits" / f"{name}.yaml"),
            "--trainer.logger=false",
            "--model.client_selection=uniform",
        ],
        run=False,
    )
    assert type(override.model.selection).__name__ == "UniformSelection"


def test_client_selection_is_a_class_with_its_own_arguments_on_the_cli(run_dir, tmp_path):
    base = ["--config", str(REPO / "configs" / "digits" / "fedavg.yaml"), "--trainer.logger=false"]
    cli = SFLCLI(
        args=[
            *base,
            "--model.client_selection=FedCBSSelection",
            "--model.client_selection.lam=3",
            "--trainer.max_epochs=1",
        ],
        run=False,
    )
    policy = cli.model.selection
    assert type(policy).__name__ == "FedCBSSelection" and policy.lam == 3.0 and policy.beta_start == 1.0
    assert cli.model.schedule.selection is policy  # the schedule draws with it; nothing is resolved twice
    as_dict = SFLCLI(
        args=[
            *base,
            '--model.client_selection={"class_path": "ClassBalancedSelection", "init_args": {"divergence": "qcid"}}',
        ],
        run=False,
    )
    assert as_dict.model.selection.divergence == "qcid"
    # hyperparameters record the policy as plain data: checkpoints load safely and rebuild it
    cli.trainer.fit(cli.model, cli.datamodule)
    cli.trainer.save_checkpoint(tmp_path / "x.ckpt")
    saved = torch.load(tmp_path / "x.ckpt", weights_only=True)["hyper_parameters"]["client_selection"]
    assert saved["init_args"]["lam"] == 3.0 and saved["class_path"].endswith("FedCBSSelection")


def test_a_policy_object_from_python_is_recorded_as_its_config(tmp_path):
    from lightning_sfl.algorithms import FedAvg
    from lightning_sfl.loop.selection import FedCBSSelection

    model = FedAvg(client_selection=FedCBSSelection(lam=2.0))
    assert model.hparams["client_selection"] == {
        "class_path": "lightning_sfl.loop.selection.FedCBSSelection",
        "init_args": {"lam": 2.0, "beta_start": 1.0, "beta_step": 1.0, "eps": 1e-12},
    }
    assert FedAvg(**model.hparams).selection.lam == 2.0  # what load_from_checkpoint does


def test_help_lists_exactly_the_working_subcommands_and_predict_is_refused():
    import subprocess
    import sys

    run = [sys.executable, "-m", "lightning_sfl.cli"]
    out = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    listed = re.findall(r"^  (\w+)\s", out.stdout, flags=re.M)
    assert listed == ["fit", "validate", "test", "compare", "sweep", "attack", "cuts"]
    bad = subprocess.run([*run, "predict", "--config", "x.yaml"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stdout == ""
    choices = "fit, validate, test, compare, sweep, attack, cuts"
    assert bad.stderr == f"error: unknown subcommand 'predict'; choose from: {choices}\n"
    assert "predict" not in SFLCLI.subcommands() and set(SFLCLI.subcommands()) == {"fit", "validate", "test"}


def test_model_summary_counts_flops_on_the_example_input():
    from lightning.pytorch.utilities.model_summary import ModelSummary

    from lightning_sfl.algorithms import SCALA

    summary = ModelSummary(SCALA(), max_depth=1)
    assert summary.total_flops > 1e6  # forward of the global model on one 1x8x8 digit


@pytest.mark.parametrize("method", ["scala", "fedlc", "fedconcat"])
def test_mnist5k_configs_resolve_to_alexnet_or_the_cnn_overlay(method):
    from lightning_sfl.lightning_cli import resolved_config

    base = ["--config", str(REPO / "configs/mnist5k/scala.yaml"), "--model", method]
    overlay = ["--config", str(REPO / "configs/mnist5k/cnn_small.yaml")]
    for extra, arch in (([], "alexnet_mnist"), (overlay, "cnn_small")):
        cfg = resolved_config(base + extra)
        assert cfg["data"]["dataset"] == "mnist5k" and cfg["model"]["init_args"]["arch"] == arch
        assert cfg["model"]["class_path"] == f"lightning_sfl.algorithms.{ALGORITHMS[method].__name__}"
    fedavg = resolved_config(["--config", str(REPO / "configs/mnist5k/fedavg.yaml")])
    assert fedavg["model"]["init_args"]["arch"] == "alexnet_mnist" and fedavg["data"]["dataset"] == "mnist5k"


def test_double_precision_trains_with_the_model_summary_on(run_dir):
    """``--trainer.precision 64-true``: the summary's example input and every batch reach the model in float64."""
    rows = _rows(_fit(run_dir, "--trainer.precision=64-true", "--trainer.enable_model_summary=true", rounds=1))
    assert [float(r["round"]) for r in rows if r.get("test/acc")] == [1.0]
    (ckpt,) = run_dir.rglob("last.ckpt")
    weights = torch.load(ckpt, weights_only=True)["state_dict"]
    assert {v.dtype for v in weights.values() if v.is_floating_point()} == {torch.float64}


@pytest.mark.extended  # ~45 s on two cores; in CI: attack's --ckpt_path last
def test_validate_and_test_find_the_last_checkpoint_of_the_same_command(tmp_path):
    """``fit`` with the default loggers, then ``validate``/``test --ckpt_path last`` of the same config: they say which
    run and round they evaluate, and end with fit's final accuracy at round 3 (not an untrained model); without a fit
    first, one ``error:`` line and exit 2. The commands run through the entry point one after another, as a user runs
    them (:mod:`cli_in_one_process`)."""
    import os

    from cli_in_one_process import run_in_one_process

    env = {**os.environ, "WANDB_MODE": "offline"}
    base = ["--config", str(REPO / "configs/digits/scala.yaml"), "--trainer.enable_progress_bar=false"]
    base += ["--trainer.max_epochs=3"]
    (tmp_path / "empty").mkdir()
    commands = [["validate", *base, "--ckpt_path=last"], ["fit", *base]]
    commands += [[sub, *base, "--ckpt_path=last"] for sub in ("validate", "test")]
    none, fit, *evaluated = run_in_one_process(list(zip([tmp_path / "empty", *[tmp_path] * 3], commands)), env=env)
    assert none.code == 2 and none.stderr.strip().splitlines()[-1].startswith("error: ckpt_path='last': no")
    assert fit.code == 0, fit.stderr[-2000:]
    *_, saved, result = fit.stdout.strip().splitlines()
    final = float(re.fullmatch(r"final test accuracy: ([0-9.]+) after 3 rounds", result).group(1))
    saved_as = r"run saved: (\S+): last checkpoint (\S+), CSV log csv/metrics.csv, W&B .*"
    run, last = re.fullmatch(saved_as, saved).groups()
    assert (tmp_path / run / last).is_file() and (tmp_path / run / "csv" / "metrics.csv").is_file()  # where it went
    for sub, out in zip(("validating", "testing"), evaluated):
        assert out.code == 0, out.stderr[-2000:]
        assert f"{sub} {run} (round 3 of 3)" in out.stdout.splitlines()
        assert float(re.search(r"test/acc[\s│]+([0-9.]+)", out.stdout).group(1)) == pytest.approx(final, abs=1e-4)
        assert out.stdout.strip().splitlines()[-1] == f"test accuracy: {final:.4f} at round 3"
    # resuming it with fewer rounds than it holds: one line, exit 2, no new log or W&B run
    before = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "runs").rglob("*") if p.is_dir())
    base[-1] = "--trainer.max_epochs=2"
    [fewer] = run_in_one_process([(tmp_path, ["fit", *base, "--ckpt_path=last"])], env=env)
    assert fewer.code == 2 and fewer.stderr.strip().splitlines()[-1] == (
        "error: trainer.max_epochs=2 is fewer than the 3 rounds the checkpoint holds: give --trainer.max_epochs 4 or "
        "more to continue it"
    )
    assert sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "runs").rglob("*") if p.is_dir()) == before


def test_default_root_dir_holds_everything_of_a_run(tmp_path):
    """With ``--trainer.default_root_dir`` elsewhere the working directory stays empty: checkpoints, CSV and W&B logs
    and the resolved config go there."""
    import os

    from cli_in_one_process import run_command

    (tmp_path / "cwd").mkdir()
    cmd = ["fit", "--config", str(REPO / "configs/digits/scala.yaml")]
    cmd += ["--trainer.max_epochs=1", "--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={tmp_path}/d"]
    env = {**os.environ, "WANDB_MODE": "offline"}
    proc = run_command(cmd, cwd=tmp_path / "cwd", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list((tmp_path / "cwd").iterdir()) == []
    (run,) = (tmp_path / "d").iterdir()  # one folder per run, named for a person and by the configuration's hash
    assert re.fullmatch(r"scala-digits-quantity2-s0-[0-9a-f]{10}", run.name), run.name
    assert {"checkpoints", "csv", "wandb", "config.yaml"} == {p.name for p in run.iterdir()}
    assert (run / "csv" / "metrics.csv").is_file() and f"run folder: {run}" in proc.stdout


def test_runs_are_grouped_by_their_setting_and_named_by_their_configuration():
    """W&B's group of a run leaves out the seeds (its seeds are one group); the run folder's name keeps them."""
    from lightning_sfl.lightning_cli import resolved_config
    from lightning_sfl.run_folder import run_key, run_name, seeds_group

    base = ["--config", str(REPO / "configs/digits/scala.yaml")]
    configs = [
        resolved_config([*base, *extra]) for extra in ([], ["--seed_everything=1", "--data.seed=1"], ["--model.lr=0.5"])
    ]
    groups = [seeds_group(c) for c in configs]
    assert groups[0] == groups[1] != groups[2] and groups[0].startswith("scala-digits-quantity2-")
    names = [run_name(c, run_key(c)) for c in configs]
    assert len(set(names)) == 3 and names[1].startswith("scala-digits-quantity2-s1-")


@pytest.mark.extended  # ~20 s on two cores; in CI every fit runs with its config's fixed seed
def test_seed_everything_true_draws_a_seed_that_is_printed_and_recorded_and_false_seeds_nothing(tmp_path):
    """``seed_everything: true`` draws a seed; it is printed when the run starts (not before: a bad input must be the
    only line) and recorded in the run's name and resolved config. ``false`` seeds nothing and prints no seed."""
    import os

    import yaml
    from cli_in_one_process import run_in_one_process

    base = ["fit", "--config", str(REPO / "configs/digits/fedavg.yaml"), "--trainer.max_epochs=1"]
    for name in ("drawn", "none"):
        (tmp_path / name).mkdir()
    env = {**os.environ, "WANDB_MODE": "disabled"}
    commands = [(tmp_path / "drawn", [*base, "--seed_everything=true"])]
    commands += [(tmp_path / "none", [*base, "--seed_everything=false"])]
    drawn, none = run_in_one_process(commands, env=env)
    assert drawn.code == 0 and none.code == 0, drawn.stderr[-2000:] + none.stderr[-2000:]
    [seed] = [int(s) for s in re.findall(r"^Seed set to (\d+)$", drawn.stdout + drawn.stderr, re.M)]
    [config] = (tmp_path / "drawn").rglob("config.yaml")
    assert yaml.safe_load(config.read_text())["seed_everything"] == seed
    assert f"-s{seed}-" in str(config.relative_to(tmp_path))
    assert "Seed set" not in none.stdout + none.stderr
