"""Checkpoints written by the code before the "Version 4" restructuring (issue 55) still load and resume: SplitFedV1
with NoPeek and activation noise, and SCALA-PE (bottleneck, per-client inversion decoders), each trained 2 rounds on
digits. They lie in ``tests/checkpoints/``, written by the commit that added them with
``lightning-sfl fit <WRITTEN_BY's options> --trainer.max_epochs=2 --trainer.logger=false`` (the run's
``checkpoints/epoch=1-step=10.ckpt``, renamed), the defences then given by options of every method (written now as
``--model.defences``); SCALA-PE's decoders were saved under keys that have since moved to ``defences.inversion.``."""

from __future__ import annotations

import re

import torch
from _helpers import REPO
from cli_in_one_process import run_in_one_process

from lightning_sfl.checkpoint import check_checkpoint

FOLDER = REPO / "tests" / "checkpoints"
QUIET = ["--trainer.logger=false", "--trainer.enable_progress_bar=false"]
#: Each fixture: its config and options (the same resume them), and the rounds it holds.
WRITTEN_BY = {
    "splitfedv1_nopeek_noise.ckpt": [
        "--config=configs/digits/splitfedv1.yaml",
        "--model.defences+=NoPeek",  # written as --model.nopeek_weight=0.5 --model.activation_noise=0.3
        "--model.defences.weight=0.5",
        "--model.defences+=ActivationNoise",
        "--model.defences.scale=0.3",
    ],
    "scala_pe.ckpt": ["--config=configs/digits/scala_pe.yaml"],
}
ROUNDS = 2


def test_each_fixture_is_a_two_round_checkpoint_of_its_method():
    for name in WRITTEN_BY:
        ckpt = check_checkpoint(str(FOLDER / name))
        assert ckpt["epoch"] == ROUNDS - 1, name
        method = ckpt["lightning_sfl"]["algorithm"].rsplit(".", 1)[-1]
        assert method == ("SplitFedV1" if "splitfedv1" in name else "SCALAPE"), name
        assert any(isinstance(v, torch.Tensor) for v in ckpt["state_dict"].values()), name


def test_old_checkpoints_resume_for_a_third_round(tmp_path):
    """``fit --ckpt_path <fixture> --trainer.max_epochs 3`` with the options it was written with: one more round, the
    last line is its final accuracy after 3 rounds."""
    commands = []
    for i, (name, options) in enumerate(WRITTEN_BY.items()):
        folder = tmp_path / f"resume{i}"
        folder.mkdir()
        options = [o.replace("--config=", f"--config={REPO}/") for o in options]
        commands.append((folder, ["fit", *options, *QUIET, "--trainer.max_epochs=3", f"--ckpt_path={FOLDER / name}"]))
    for (name, _), run in zip(WRITTEN_BY.items(), run_in_one_process(commands)):
        assert run.code == 0, f"{name}: {run.stderr[-3000:]}"
        last = run.stdout.strip().splitlines()[-1]
        assert re.fullmatch(r"final test accuracy: [0-9.]+ after 3 rounds", last), f"{name}: {last}"
