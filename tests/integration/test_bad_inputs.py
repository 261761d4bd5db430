"""Every bad input through the command line's entry point: exit code 2, one ``error:`` line naming the option, no
traceback, and nothing left behind (no run folder, checkpoint or W&B run). Valid but unusual settings simply work.

The bad inputs run one after another through the entry point (``lightning_sfl.cli.main``, each in a folder and a
process of its own forked from one that imported Lightning once, its output captured: :mod:`cli_in_one_process`); two
of them (:data:`CONSOLE`) also through the real console script, each in a new interpreter."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _helpers import REPO
from cli_in_one_process import Run, run_command, run_in_one_process

CONFIG = str(REPO / "configs" / "digits" / "scala.yaml")

# (arguments after `fit --config CONFIG`, text the error line must contain)
BAD: list[tuple[list[str], str]] = [
    # wrongly typed numeric options
    (["--data.num_clients=abc"], "--data.num_clients"),
    (["--data.alpha=two"], "--data.alpha"),
    (["--data.beta=x"], "--data.beta"),
    (["--data.participation=most"], "--data.participation"),
    (["--data.batch_size=1.5"], "--data.batch_size"),
    (["--data.seed=x"], "--data.seed"),
    (["--data.shards_per_client=x"], "--data.shards_per_client"),
    (["--model.local_iters=x"], "--model.local_iters"),
    (["--model.lr=fast"], "--model.lr"),
    (["--model.momentum=x"], "--model.momentum"),
    (["--model.momentum=1.5"], "momentum=1.5 must be in [0, 1)"),
    (["--model.weight_decay=-0.1"], "weight_decay=-0.1 must be >= 0"),
    (["--trainer.max_epochs=x"], "--trainer.max_epochs"),
    # zero and negative counts
    (["--data.num_clients=0"], "num_clients=0 must be >= 1"),
    (["--data.num_clients=-3"], "num_clients=-3 must be >= 1"),
    (["--data.batch_size=0"], "batch_size=0"),
    (["--model.local_iters=0"], "local_iters=0 must be >= 1"),
    (["--trainer.max_epochs=0"], "trainer.max_epochs=0 must be >= 1"),
    (["--trainer.max_epochs=-1"], "trainer.max_epochs=-1 must be >= 1"),
    (["--trainer.check_val_every_n_epoch=0"], "trainer.check_val_every_n_epoch=0 must be >= 1"),
    (["--trainer.val_check_interval=0"], "trainer.val_check_interval=0 must be null or 1.0"),
    (["--trainer.val_check_interval=0.5"], "trainer.val_check_interval=0.5 must be null or 1.0: a test inside a round"),
    (["--trainer.val_check_interval=3"], "trainer.val_check_interval=3 must be null or 1.0"),
    (["--trainer.overfit_batches=1"], "trainer.overfit_batches=1 must be 0"),
    (["--trainer.max_steps=0"], "trainer.max_steps=0 must be >= 1 or -1"),
    (["--trainer.limit_train_batches=0"], "trainer.limit_train_batches=0.0 must be null or 1.0: a round is its"),
    (["--trainer.limit_train_batches=0.5"], "trainer.limit_train_batches=0.5 must be null or 1.0"),
    (["--trainer.limit_train_batches=3"], "trainer.limit_train_batches=3.0 must be null or 1.0"),
    (["--trainer.limit_val_batches=0"], "trainer.limit_val_batches=0.0 must be > 0 or null"),
    (["--trainer.limit_test_batches=0.0"], "trainer.limit_test_batches=0.0 must be > 0 or null"),
    (["--data.image_size=0"], "image_size=0 must be a whole number of pixels >= 1"),
    (["--data.alpha=0"], "alpha=0 must be >= 1"),
    (["--data.shards_per_client=0"], "shards_per_client=0 must be >= 1"),
    (["--data.beta=0"], "beta=0.0 must be > 0"),
    (["--data.beta=-1"], "beta=-1.0 must be > 0"),
    (["--data.participation=0"], "participation=0.0 must be in (0, 1]"),
    (["--data.participation=1.5"], "participation=1.5 must be in (0, 1]"),
    (["--data.seed=-1"], "seed=-1 must be a whole number in [0, 4294967295]"),  # numpy's seeds
    (["--seed_everything=4294967296"], "seed_everything=4294967296 must be a whole number in [0, 4294967295]"),
    (["--model.lr=0"], "lr=0.0 must be > 0"),
    # unknown names
    (["--data.dataset=mnist"], "dataset='mnist' is not one of: digits"),
    (["--model.arch=resnet50"], "'resnet50' is not one of"),
    (["--model=scalable"], "model='scalable' is not one of: ca_sfl, cs_sfl"),
    (["--data.partition=random"], "partition='random' is not one of: iid, quantity, dirichlet, shards"),
    (["--model.client_selection=best"], "client_selection='best' is not one of: uniform, fedcbs, class_balanced"),
    (["--model.split_point=s9"], "split_point='s9' is not a cut point"),
    (["--model.client_bank=vmap"], "client_bank='vmap' is not one of: auto, sequential, stacked"),
    (["--data.colour=red"], "unrecognized arguments: --data.colour"),
    (["--data.num_client=10"], "unrecognized arguments: --data.num_client"),  # no abbreviations
    # impossible combinations
    (["--data.alpha=11"], "alpha=11 must be a whole number of classes per client in [1, 10]"),
    (["--data.num_clients=5000", "--data.participation=0.001"], "num_clients=5000 is larger than the number"),
    (["--data.batch_size=4"], "batch_size=4 is smaller than the 5 clients per round"),
    # callbacks' options: named with their group (several callbacks have an every_n_rounds)
    (["--per_class.every_n_rounds=0"], "per_class.every_n_rounds=0 must be a whole number >= 1"),
    (["--dissimilarity.every_n_rounds=-1"], "dissimilarity.every_n_rounds=-1 must be a whole number >= 0"),
    (["--dissimilarity.max_samples_per_client=0"], "dissimilarity.max_samples_per_client=0 must be a whole number"),
    (["--dissimilarity.chunk_size=0"], "dissimilarity.chunk_size=0 must be a whole number >= 1"),
    (["--splitguard.every_n_rounds=-2"], "splitguard.every_n_rounds=-2 must be a whole number >= 0"),
    (["--splitguard.regular_batches=1"], "splitguard.regular_batches=1 must be a whole number >= 2"),
    (["--model=semi_sfl"], "needs a labelled server set: set --data.labelled_per_class"),  # the schedule's
    (["--clock.barrier=never"], "barrier='never' must be one of: round, iteration"),  # the system model's
    (["--model=gas", "--model.defences+=InversionRegulariser"], "InversionRegulariser needs synchronous rounds"),
    (
        ["--model.nopeek_weight=0.5"],
        "not an option of SCALA: a defence now, --model.defences+=NoPeek",
    ),  # the old option
    (["--model=fedavg", "--model.defences+=NoPeek"], "--model.defences: not an option of FedAvg: only split methods"),
    (["--model.defences+=NoPeek", "--model.defences.weight=-1"], "NoPeek: weight=-1.0 must be a number >= 0"),
    (["--model=gas", "--model.concurrency=500"], "concurrency=500 must be <= the number of clients"),  # with the data
    # what this machine cannot run, and output folders that cannot be one
    (["--trainer.accelerator=gpu"], "trainer: No supported gpu backend found!"),
    (["--trainer.accumulate_grad_batches=2"], "trainer.accumulate_grad_batches=2 must be 1"),  # manual optimisation
    (["--trainer.gradient_clip_val=1"], "trainer.gradient_clip_val=1.0 must be null or 0"),
    (["--checkpoint.every_n_epochs=-1"], "every_n_epochs=-1. Must be >= 0"),  # Lightning's own check, one line
    (["--model.nosuch=1"], "--model.nosuch: not an option of SCALA (its options: lightning-sfl fit --model.help"),
    (["--trainer.strategy=fsdp"], "trainer: The strategy `fsdp` requires a GPU accelerator"),
    (["--trainer.strategy=deepspeed"], "trainer: To use the `DeepSpeedStrategy`, you must have DeepSpeed installed"),
    (["--trainer.default_root_dir=fedavg.ckpt"], "trainer.default_root_dir='fedavg.ckpt' is a file, not a folder"),
    (["--checkpoint.dirpath=fedavg.ckpt"], "checkpoint.dirpath='fedavg.ckpt' is a file, not a folder"),
    (["--run_name=../elsewhere"], "run_name='../elsewhere' must be one folder name"),
    # a new run never writes into another run's files (re-running a compare run's or a custom folder's config.yaml)
    (["--trainer.default_root_dir=taken", "--run_name="], "trainer.default_root_dir='taken' already holds a run"),
    (["--checkpoint.dirpath=held"], "checkpoint.dirpath='held' holds another run's checkpoints (last.ckpt)"),
    # options of this stop's datasets and server optimisers
    (["--data.partition=natural"], "partition='natural' (the dataset's own clients) goes with dataset="),
    (["--data.dataset=leaf_synthetic", "--data.partition=natural", "--data.leaf_mu=-1"], "must be >= 0"),
    (["--model=fedyogi", "--model.bias_correction=true"], "bias_correction=True is Flower's FedAdam's"),
    (["--model=fedadam", "--model.initial_second_moment=-1"], "initial_second_moment=-1.0 must be >= 0"),
    # what a newcomer found (issue 54): jargon, tracebacks and options taken silently
    (["--model.help=SCAL"], "model.help='SCAL' is not one of: ca_sfl, cs_sfl"),
    (["--model=fedavg", "--model.split_point=s9"], "split_point='s9' is not a cut point of model 'cnn_small'"),
    (["--trainer.max_epochs=1e2"], "--trainer.max_epochs: expected a whole number or null; got '1e2'"),
    (["--data.num_clients=2.5"], "--data.num_clients: expected a whole number; got '2.5'"),
    (["--trainer.accelerator=tpu"], "trainer: accelerator='tpu' needs a package this machine lacks"),
    (["--checkpoint.dirpath=/proc/nope/ck"], "checkpoint.dirpath='/proc/nope/ck' cannot be written"),
    (["--trainer.default_root_dir=/proc/nope"], "trainer.default_root_dir='/proc/nope' cannot be written"),
    # options that would change nothing (issue 67): refused, saying why
    *(UNUSED := [
        (
            ["--model.tail_point", "s4", "--model.pooled_label_counts", "true", "--model.server_logit_adjustment",
             "false"],
            "pooled_label_counts=True needs server_logit_adjustment=True: without it the server uses no P_s",
        ),
        (["--model=fedavg", "--model.split_point=s3"], "split_point='s3' changes nothing: FedAvg's clients train the"),
        (["--model=s2fl", "--model.adaptive_split=false"], "adaptive_split=False changes nothing on this clock"),
    ]),
    # checkpoints and data
    (["--ckpt_path=missing.ckpt"], "does not exist"),
    (["--ckpt_path=truncated.ckpt"], "is damaged (truncated, or not a checkpoint"),
    (["--ckpt_path=foreign.ckpt"], "not a lightning_sfl checkpoint"),
    (["--ckpt_path=fedavg.ckpt"], "was written by lightning_sfl.algorithms.FedAvg, not lightning_sfl.algorithms.SCALA"),
    (["--data.batch_size=100000"], "batch_size=100000 is larger than the 1437 training rows of all 20 clients"),
    (["--data.dataset=cifar10"], "cifar10 not found"),
    (["--data.dataset=cifar10", "--data.download=true", "--data.root=x"], "downloading cifar10 failed: the server"),
    # issue 67: sizes that cannot fit in memory, this machine's cores, options Lightning would change or write with
    (["--model=fedavg", "--data.dataset=leaf_synthetic", "--data.partition=natural", "--data.leaf_size_log_mean=20"],
     "(21,040,155,458 rows of 60 features for 20 clients): 4.7 TiB needed; this machine has"),
    (["--torch_threads=100000"], "torch_threads=100000 must be in [1, "),
    (["--trainer.precision=16-mixed"], "trainer.precision='16-mixed' needs a CUDA device"),
    (["--checkpoint.filename=../elsewhere"], "checkpoint.filename='../elsewhere' must be a file name (no '/')"),
    (["--trainer.logger.init_args.save_dir=/proc/nope"], "trainer.logger.save_dir='/proc/nope' cannot be written"),
    # config files that hold no settings
    (["--config=empty.yaml"], "--config empty.yaml: expected a YAML mapping of settings (model:, data:, …), found an"),
    (["--config", "list.yaml"], "--config list.yaml: expected a YAML mapping of settings (model:, data:, …), found a"),
    (["--config", "broken.yaml"], "--config broken.yaml: not valid YAML (expected the node content, but found"),
    # a typo in a config file: the option and the file
    (["--config", "typo.yaml"], "does not accept option 'modle.lr' (set in --config typo.yaml)"),
    (["--config=typo_model.yaml"], "--model.help SCALA) (set in --config typo_model.yaml)"),  # --model.lrr: not an …
]

GOOD: list[list[str]] = [
    ["--trainer.enable_checkpointing=false"],
    ["--trainer.logger=false"],
    ["--trainer.logger=lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir=csv_only"],
    ["--trainer.max_epochs=1"],
    ["--trainer.limit_train_batches=1"],
]


def _env() -> dict[str, str]:
    """This environment without W&B's switches, and without a network whether this machine has one or not (every
    request to another host goes to a proxy that refuses it)."""
    refused = "http://127.0.0.1:9"
    offline = {"http_proxy": refused, "https_proxy": refused, "no_proxy": "127.0.0.1,localhost"}
    own = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    return {**own, "PYTHONWARNINGS": "ignore", **offline}


def _console(folder: Path, args: list[str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lightning_sfl.cli", "fit", "--config", CONFIG, "--trainer.max_epochs=1", *args]
    return subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=600, env=_env())


def _checkpoints(folder: Path) -> None:
    """The checkpoint and config files the checkpoint and config cases point at (and nothing else in the folder)."""
    (folder / "empty.yaml").write_text("")
    (folder / "list.yaml").write_text("- model\n- data\n")
    (folder / "broken.yaml").write_text("model: {lr: [\n")
    (folder / "typo.yaml").write_text("modle:\n  lr: 0.1\n")
    (folder / "typo_model.yaml").write_text("model:\n  init_args:\n    lrr: 0.1\n")
    good = {"state_dict": {"client.net.0.weight": torch.zeros(1)}, "lightning_sfl": {}}
    torch.save({**good, "lightning_sfl": {"algorithm": "lightning_sfl.algorithms.FedAvg"}}, folder / "fedavg.ckpt")
    torch.save({"state_dict": {"fc.weight": torch.zeros(1)}}, folder / "foreign.ckpt")
    torch.save(good, folder / "full.ckpt")
    (folder / "taken").mkdir()  # another run's folder and checkpoint folder
    (folder / "taken" / "config.yaml").write_text("seed_everything: 0\n")
    (folder / "held").mkdir()
    torch.save(good, folder / "held" / "last.ckpt")
    (folder / "truncated.ckpt").write_bytes((folder / "full.ckpt").read_bytes()[:100])
    (folder / "full.ckpt").unlink()


def _problems(args, expected, run: Run, left, before) -> list[str]:
    """What is wrong with the run of a bad input: its exit code, error lines, a traceback, files left behind,
    Lightning's device lines (each error must come before the trainer exists), or any other line ("Seed set to 0")."""
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    problems = []
    if run.code != 2:
        problems.append(f"exit {run.code}")
    if len(errors) != 1 or expected not in errors[0]:
        problems.append(f"error lines {errors}")
    if "Traceback" in run.stderr:
        problems.append("traceback")
    if left != before:
        problems.append(f"left behind {sorted(set(left) - set(before))}")
    if "GPU available" in run.stdout + run.stderr:
        problems.append("Lightning's device lines before the error")
    others = [line for line in (run.stdout + run.stderr).splitlines() if line.strip() and line not in errors]
    if others and "Traceback" not in run.stderr:
        problems.append(f"more than the error line: {others[:3]}")
    return [f"{' '.join(args)}: {'; '.join(problems)}\n{run.stderr[-600:]}"] if problems else []


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _in_one_process(folders: list[Path], cases: list[tuple[list[str], str]]) -> list[str]:
    """Each ``(argv, expected error)`` of ``cases`` run in its folder (:mod:`cli_in_one_process`); the problems found
    (exit code, error lines, traceback, files left behind at any depth, device lines)."""
    before = {f: _files(f) for f in folders}
    runs = run_in_one_process([(f, argv) for f, (argv, _) in zip(folders, cases)], env=_env())
    problems = []
    for folder, (argv, expected), run in zip(folders, cases, runs):
        problems += _problems(argv, expected, run, _files(folder), before[folder])
    return problems


#: Cases also run through the real console script, each in its own process: a parser error and a checkpoint error.
#: (The first with ``-m extended`` only: ~20 s on two cores; the second, through the same script, in CI.)
CONSOLE = (pytest.param(["--data.num_clients=abc"], marks=pytest.mark.extended), ["--ckpt_path=truncated.ckpt"])


@pytest.mark.extended  # ~90 s on two cores; in CI: test_errors.py's bad settings, the other commands' below
def test_every_bad_input_is_one_line_exit_2_and_leaves_nothing_behind(tmp_path):
    assert len(BAD) >= 30
    folders = []
    for i, _ in enumerate(BAD):
        folder = tmp_path / f"case{i}"
        folder.mkdir()
        _checkpoints(folder)
        folders.append(folder)
    fit = ["fit", "--config", CONFIG, "--trainer.max_epochs=1"]
    failures = _in_one_process(folders, [([*fit, *args], expected) for args, expected in BAD])
    assert not failures, "\n\n".join(failures)


def test_options_that_would_change_nothing_are_one_line_exit_2_and_leave_nothing_behind(tmp_path):
    """Issue 67's cases of :data:`BAD` in CI: U-shaped SCALA's label counts for a ``P_s`` the body
    would not use, a cut of a method without a server half, and S²FL's fixed cut on a clock that never slides it (found
    when the federation is built, before the trainer)."""
    folders = [tmp_path / f"case{i}" for i in range(len(UNUSED))]
    for folder in folders:
        folder.mkdir()
    fit = ["fit", "--config", CONFIG, "--trainer.max_epochs=1"]
    failures = _in_one_process(folders, [([*fit, *args], expected) for args, expected in UNUSED])
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("args", CONSOLE, ids=lambda a: " ".join(a))
def test_the_console_script_gives_the_same_line(args, tmp_path):
    _checkpoints(tmp_path)
    before = _files(tmp_path)
    proc = _console(tmp_path, args)
    expected = next(e for a, e in BAD if a == args)
    failures = _problems(args, expected, Run(proc.returncode, proc.stdout, proc.stderr), _files(tmp_path), before)
    assert not failures, "\n\n".join(failures)


@pytest.mark.extended  # ~40 s on two cores; every method trains from its config in CI
def test_valid_unusual_settings_simply_work_and_an_early_stopping_on_a_metric_not_logged_is_one_line(tmp_path):
    """Each of :data:`GOOD` trains and tests. Lightning's EarlyStopping raises at the first test when its metric is
    not logged: a mistake found only once the run has started, still one line and exit code 2, naming the metric and
    the ones the run logs."""
    stopper = ["--trainer.callbacks+=lightning.pytorch.callbacks.EarlyStopping", "--trainer.callbacks.monitor=test/ac"]
    early = ["--trainer.logger=false", "--trainer.check_val_every_n_epoch=1", *stopper]
    fit = ["fit", "--config", CONFIG, "--trainer.max_epochs=1"]
    folders = [tmp_path / f"case{i}" for i in range(len(GOOD) + 1)]
    for folder in folders:
        folder.mkdir()
    *good, stopped = run_in_one_process(list(zip(folders, [[*fit, *a] for a in [*GOOD, early]])), env=_env())
    for args, run in zip(GOOD, good):
        assert run.code == 0 and "final test accuracy:" in run.stdout, f"{args}: {run.stderr[-2000:]}"
        assert run.stdout.strip().splitlines()[-1].startswith("final test accuracy:"), f"{args}: {run.stdout[-500:]}"
    errors = [line for line in stopped.stderr.splitlines() if line.startswith("error:")]
    assert stopped.code == 2 and "Traceback" not in stopped.stderr, stopped.stderr[-2000:]
    assert len(errors) == 1 and errors[0].startswith("error: Early stopping conditioned on metric `test/ac`")
    assert "`test/acc`" in errors[0]  # what it could watch


#: The other commands' mistakes (``compare``, ``sweep``, ``attack``, ``validate``): the same one line, exit code 2,
#: nothing written. ``other/`` holds another comparison's ``results.md``.
OTHER_COMMANDS = [
    (["compare", "--config", CONFIG, "--out", "o", "--methods", "scala", "nosuch"], "unknown method 'nosuch'"),
    (["compare", "--config", CONFIG, "--out", "o", "--method", "scala"], "unrecognized arguments: --method scala"),
    (["compare", "--config", CONFIG, "--out", "fedavg.ckpt"], "is a file, not a folder"),
    (["compare", "--config", CONFIG, "--methods", "fedprox", "--out", "other"], "--out other holds another comparison"),
    (["compare", "--config", CONFIG, "--out", "o", "--", "--data.alpha=two"], "--data.alpha"),
    (["sweep", str(REPO / "sweeps" / "digits_lr.yaml"), "--coun", "2"], "unrecognized arguments: --coun"),
    (["sweep", "no_such_sweep.yaml"], "no_such_sweep.yaml"),
    (["attack", "--epoch", "3"], "unrecognized arguments: --epoch"),
    (["attack", "--ckpt_path", "last"], "--ckpt_path last needs the --config"),
    (["attack", "--config", CONFIG, "--ckpt_path", "last"], "ckpt_path='last': no run of this configuration"),
    (["attack", "--ckpt_path", "truncated.ckpt"], "truncated.ckpt"),
    (["validate", "--config", CONFIG, "--ckpt_path", "last"], "ckpt_path='last': no run of this configuration"),
    (["validate", "--config", CONFIG], "validate needs a checkpoint: --ckpt_path PATH (a checkpoint file) or"),
    (["test", "--config", CONFIG], "test needs a checkpoint: --ckpt_path PATH (a checkpoint file) or --ckpt_path last"),
    (["validate", "--config", CONFIG, "--ckpt_path", "best"], "ckpt_path='best': validate takes a checkpoint file, or"),
    (["test", "--config", CONFIG, "--ckpt_path", "foreign.ckpt"], "foreign.ckpt"),
    (["cuts", "--arch", "resnet99"], "arch='resnet99' is not one of: alexnet_mnist"),  # no usage dump
    (["sweep", "broken.yaml"], "sweep='broken.yaml' is not valid YAML (expected the node content"),
    (["attack", "--ckpt_path", "other"], "ckpt_path='other' is a folder, not a checkpoint file"),
    (["cuts", "--arch", "cnn_small", "--input_shape", "1", "2", "2"], "expects input shape (C, H, W) with H, W >= 8"),
]


def test_the_other_commands_bad_inputs_are_one_line_exit_2_and_leave_nothing_behind(tmp_path):
    folders = []
    for i, _ in enumerate(OTHER_COMMANDS):
        folder = tmp_path / f"case{i}"
        (folder / "other").mkdir(parents=True)
        made_by = f"lightning-sfl compare --config {CONFIG} --methods fedavg --seeds 0 --out other"
        (folder / "other" / "results.md").write_text(f"# Comparison\n\n```bash\n{made_by}\n```\n")
        _checkpoints(folder)
        folders.append(folder)
    failures = _in_one_process(folders, OTHER_COMMANDS)
    assert not failures, "\n\n".join(failures)


# ---------------------------------------------------------------------------------------------------------------------
# The last lines are ours: a process per command, run as the console script runs it (:mod:`cli_in_one_process`),
# stdout and stderr in one stream as a terminal shows them (W&B's worker writes to the same stream), W&B offline unless
# a case says otherwise.


def _terminal(folder: Path, args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``lightning-sfl ARGS`` in ``folder``, its stdout and stderr merged in the order they were written."""
    return run_command(args, cwd=folder, env={**_env(), "WANDB_MODE": "offline", **(env or {})}, merged=True)


def _lines(proc: subprocess.CompletedProcess) -> list[str]:
    """What a terminal would show, line by line (a progress bar's ``\\r`` rewrites one line)."""
    return [line.rsplit("\r", 1)[-1] for line in proc.stdout.splitlines() if line.rsplit("\r", 1)[-1].strip()]


def test_a_fit_ends_with_where_it_went_and_its_result_and_wandbs_messages_stay_in_its_folder(tmp_path):
    """The default loggers (W&B offline and CSV), the progress bar on: the last two lines are ``run saved: …`` (with
    the W&B run's ``wandb sync`` command) and ``final test accuracy: …``; no ``wandb:`` line reaches the terminal, and
    W&B's own summary is in the run's ``wandb/messages.log``."""
    proc = _terminal(tmp_path, ["fit", "--config", CONFIG, "--trainer.max_epochs=2"])
    assert proc.returncode == 0, proc.stdout[-3000:]
    *_, saved, result = _lines(proc)
    assert re.fullmatch(r"final test accuracy: [0-9.]+ after 2 rounds", result), result
    assert saved.startswith("run saved: runs/scala-digits-") and "(upload: wandb sync runs/" in saved, saved
    assert not [line for line in _lines(proc) if line.startswith("wandb:")]
    [messages] = tmp_path.glob("runs/*/wandb/messages.log")
    assert "wandb sync" in messages.read_text()


def test_a_divergence_ends_with_one_error_line_of_its_own_that_says_no_checkpoint_was_written(tmp_path):
    """``--model.lr 1e6`` diverges in round 1: exit code 1, and the last line is the one ``error:`` line (not glued to
    the progress bar, not followed by W&B's summary), saying that no checkpoint was written yet."""
    proc = _terminal(tmp_path, ["fit", "--config", CONFIG, "--model.lr=1e6", "--trainer.max_epochs=3"])
    assert proc.returncode == 1, proc.stdout[-3000:]
    errors = [line for line in proc.stdout.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith("error: non-finite"), errors
    assert _lines(proc)[-1] == errors[0] and errors[0].endswith("stopped, no checkpoint was written yet")
    assert "Traceback" not in proc.stdout


@pytest.mark.extended  # ~15 s on two cores; the other bad inputs run in CI
def test_a_one_process_method_refuses_several_before_ddp_starts_and_writes_nothing(tmp_path):
    """GAS with ``--trainer.strategy ddp --trainer.devices 2``: one ``error:`` line, last, exit code 2, before any
    process is launched: no run folder, no W&B run."""
    args = ["fit", "--config", CONFIG, "--model=gas", "--trainer.strategy=ddp", "--trainer.devices=2"]
    proc = _terminal(tmp_path, [*args, "--trainer.accelerator=cpu"])
    assert proc.returncode == 2, proc.stdout[-3000:]
    errors = [line for line in proc.stdout.splitlines() if "error:" in line]
    assert errors == ["error: GAS runs on one process; --trainer.devices 2 and --trainer.num_nodes 1 would start 2 "
                      "(give --trainer.devices 1)"], proc.stdout[-3000:]  # fmt: skip
    assert _lines(proc)[-1] == errors[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.extended  # ~20 s; in CI: test_wandb_online.py's
def test_wandb_online_without_a_server_logs_offline_with_one_line_and_loses_nothing(tmp_path):
    """``WANDB_MODE=online`` with a W&B address that refuses connections (and an API key): exit 0, one line saying why
    the run logs offline, the run's W&B record written offline (read back with W&B's reader: the last round's
    accuracy), the last line the result."""
    import socket

    from lightning_sfl.wandb.offline import find_offline_runs, read_offline_run

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"WANDB_MODE": "online", "WANDB_BASE_URL": f"http://127.0.0.1:{port}", "WANDB_API_KEY": "k" * 40}
    proc = _terminal(tmp_path, ["fit", "--config", CONFIG, "--trainer.max_epochs=2"], env)
    assert proc.returncode == 0, proc.stdout[-3000:]
    said = [line for line in _lines(proc) if line.startswith("W&B:")]
    assert said == [f"W&B: cannot reach http://127.0.0.1:{port} (connection refused); this run logs offline (nothing "
                    "is lost: wandb sync uploads it later)"], proc.stdout[-3000:]  # fmt: skip
    assert "Error" not in proc.stdout and _lines(proc)[-1].startswith("final test accuracy: ")
    [run] = tmp_path.glob("runs/*")
    [record] = find_offline_runs(run / "wandb")
    final = float(re.search(r"final test accuracy: (\S+)", proc.stdout).group(1))
    assert round(float(read_offline_run(record).summary["test/acc"]), 4) == final
