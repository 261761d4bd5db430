"""``lightning-sfl attack``: the attacker's training against what leaks and what does not, its outputs (files and the
W&B run, read back from W&B's own offline files), reproducibility, and one-line errors for bad settings."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _helpers import REPO, small_digits, trained_checkpoint
from cli_in_one_process import run_command, run_in_one_process

from lightning_sfl.algorithms import SCALA, SCALAPE, FedAvg, SplitFedV1
from lightning_sfl.attack import check_args, grid_indices, parse_args, save_grid, train_attacker
from lightning_sfl.errors import ConfigError
from lightning_sfl.privacy.metrics import mse_per_image, psnr_per_image, ssim_per_image
from lightning_sfl.wandb.offline import find_offline_runs, read_offline_run


def _attack(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command as a user runs it: W&B speaks (no ``WANDB_SILENT``), so where its messages go can be checked."""
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SILENT"}
    return run_command(["attack", *args], cwd=cwd, env=env)


def _checkpoint(cls, folder: Path, **kwargs) -> Path:
    return trained_checkpoint(cls, folder, **kwargs)


# ------------------------------------------------------------------------------------------------- the attacker
def test_the_attacker_recovers_images_from_activations_that_carry_them_and_not_from_noise():
    """Activations that are a fixed linear map of the image (a stand-in for a leaky client half) are inverted far
    better than activations independent of the image; the kept weights are those of the best validation epoch."""
    dm = small_digits()
    x = dm.splits.train_x[:400]  # digits are stored as floats in [0, 1]
    torch.manual_seed(0)
    mix = torch.randn(8 * 16, 64) / 8
    leaky = (x.flatten(1) @ mix.T).view(-1, 8, 4, 4)
    noise = torch.randn_like(leaky)
    scores = {}
    for name, a in (("leaky", leaky), ("noise", noise)):
        decoder, best, history = train_attacker(
            a[:300], x[:300], a[300:350], x[300:350], width=16, epochs=15, batch_size=32, lr=3e-3, seed=0
        )
        assert [h["attack/epoch"] for h in history] == list(range(1, 16))
        vals = [h["attack/val_mse"] for h in history]
        assert best == 1 + vals.index(min(vals))
        with torch.no_grad():
            assert float(mse_per_image(decoder(a[300:350]), x[300:350]).mean()) == pytest.approx(min(vals), rel=1e-5)
            scores[name] = float(mse_per_image(decoder(a[350:]), x[350:]).mean())
    assert scores["leaky"] < 0.5 * scores["noise"], scores


def test_the_attacker_is_seeded():
    a, x = torch.randn(40, 8, 4, 4), torch.rand(40, 1, 8, 8)
    runs = [train_attacker(a[:30], x[:30], a[30:], x[30:], width=8, epochs=2, batch_size=8, lr=1e-3, seed=s) for s in (
        0, 0, 1)]  # fmt: skip
    assert runs[0][2] == runs[1][2] != runs[2][2]


# ------------------------------------------------------------------------------------------------- the command
def test_attack_help_answers_without_loading_torch():
    code = (
        "import sys; from lightning_sfl.cli import main\ntry:\n main(['attack', '--help'])\nexcept SystemExit: pass\n"
    )
    code += "assert 'torch' not in sys.modules, 'attack --help imported torch'"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--ckpt_path" in out.stdout and "--config" in out.stdout and "--no_wandb" in out.stdout
    assert "inversion" in out.stdout and "unsplit" in out.stdout  # the attacks


@pytest.mark.parametrize(
    "args,message",
    [
        ([], "attack needs --ckpt_path"),
        (["--ckpt_path", "x", "--epochs", "0"], "--epochs=0 must be >= 1"),
        (["--ckpt_path", "x", "--width", "0"], "--width=0 must be >= 1"),
        (["--ckpt_path", "x", "--batch_size", "1"], "--batch_size=1 must be >= 2"),
        (["--ckpt_path", "x", "--train_size", "2"], "--train_size=2 must be >= 3"),
        (["--ckpt_path", "x", "--val_fraction", "1"], "--val_fraction=1.0 must be in (0, 1)"),
        (["--ckpt_path", "x", "--lr", "0"], "--lr=0.0 must be > 0"),
        (["--ckpt_path", "x", "--device", "gpu7"], "--device='gpu7' is not a torch device"),
        (["--ckpt_path", "x", "--attack", "fsha"], "--attack='fsha' must be one of: inversion, unsplit"),
        (["--ckpt_path", "x", "--targets", "0"], "--targets=0 must be >= 1"),
        (["--ckpt_path", "x", "--outer", "0"], "--outer=0 must be >= 1"),
        (["--ckpt_path", "x", "--tv_weight", "-1"], "--tv_weight=-1.0 must be >= 0"),
    ],
)
def test_bad_settings_are_one_line_errors_naming_the_option(args, message):
    with pytest.raises(ConfigError) as err:
        check_args(parse_args(args))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.extended  # ~13 s on two cores; bad inputs of attack run in CI
def test_attack_without_a_usable_checkpoint_is_a_one_line_error(tmp_path):
    """Each command through the entry point (:mod:`cli_in_one_process`); a bad input writes nothing."""
    fedavg = _checkpoint(FedAvg, tmp_path / "fedavg")
    flat = _checkpoint(SplitFedV1, tmp_path / "flat" / "checkpoints", split_point="s5")  # cut after the 1st linear
    (tmp_path / "flat" / "config.yaml").write_text("seed_everything: 0\n")  # a run folder: attacks go to attack-<n>
    (tmp_path / "a_file").write_text("")  # an --out that cannot be a folder: refused before the decoder trains
    commands = [[], ["--config", str(REPO / "configs/digits/scala_pe.yaml")], ["--ckpt_path", "missing.ckpt"]]
    commands += [["--ckpt_path", str(fedavg), "--config", str(REPO / "configs/digits/fedavg.yaml")]]
    commands += [["--ckpt_path", str(flat), "--no_wandb"]]
    commands += [["--ckpt_path", str(flat), "--no_wandb", "--out", str(tmp_path / "a_file")]]
    runs = run_in_one_process([(tmp_path, ["attack", *args]) for args in commands])
    for out in runs[:3]:
        assert out.code == 2 and out.stderr.count("\n") == 1 and out.stderr.startswith("error: "), out.stderr
    assert "--ckpt_path" in runs[0].stderr
    assert runs[3].code == 2
    assert runs[3].stderr == "error: FedAvg is not a split method (nothing crosses a cut): no activations to invert\n"
    assert runs[4].code == 2 and runs[4].stderr == (
        "error: SplitFedV1's cut is not convolutional ([C, H, W] activations): no images to invert\n"
    )
    assert runs[5].code == 2 and runs[5].stderr == f"error: --out='{tmp_path / 'a_file'}' is a file, not a folder\n"
    assert sorted(p.name for p in (tmp_path / "flat").iterdir()) == ["checkpoints", "config.yaml"]  # nothing written


def test_attack_scores_a_split_checkpoint_and_logs_it_to_wandb(tmp_path):
    ckpt = _checkpoint(SCALAPE, tmp_path / "ckpt")
    out = _attack("--ckpt_path", str(ckpt), "--epochs", "3", "--train_size", "300", "--grid", "4", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "MSE" in out.stdout and "SSIM" in out.stdout and "PSNR" in out.stdout
    folder = tmp_path / "ckpt" / "attack-1"  # beside a checkpoint kept outside a run folder
    m = json.loads((folder / "metrics.json").read_text())
    assert m["method"] == "SCALAPE" and m["activation_shape"] == [8, 4, 4]
    assert m["attack_train_images"] + m["attack_val_images"] == 300
    assert m["test_images"] == len(small_digits().splits.test_x)  # scored on the test split, trained on the train split
    assert 0 < m["mse"] < 1 and -1 <= m["ssim"] <= 1 and 1 <= m["best_epoch"] <= 3
    assert m["psnr"] >= 10 * math.log10(1 / m["mse"]) - 1e-4  # per-image PSNR averaged (Jensen), not pooled
    assert (folder / "reconstructions.png").stat().st_size > 0 and "SCALAPE" in (folder / "metrics.md").read_text()

    run = read_offline_run(folder)  # what reached W&B's own offline run files
    assert [row["attack/epoch"] for row in run.rows_with("attack/val_mse")] == [1, 2, 3]
    assert run.rows_with("attack/val_mse")[m["best_epoch"] - 1]["attack/val_mse"] == pytest.approx(m["best_val_mse"])
    for key in ("mse", "ssim", "psnr"):
        assert run.last(f"attack/{key}") == pytest.approx(m[key]) and run.summary[f"attack/{key}"] == pytest.approx(
            m[key])  # fmt: skip
    image = run.last("attack/reconstructions")
    assert image["_type"] == "image-file" and run.file(image["path"]).stat().st_size > 0 and run.images
    assert run.config["method"] == "SCALAPE" and run.config["width"] == 64 and run.run["job_type"] == "attack"
    # W&B's own messages stay in its folder; the result line, last, names the W&B run and how to upload it
    assert "wandb:" not in out.stdout + out.stderr and "wandb sync" in (folder / "wandb" / "messages.log").read_text()
    (record,) = find_offline_runs(folder)
    upload = f"W&B offline run {record.relative_to(tmp_path)} (upload: wandb sync {record.relative_to(tmp_path)})"
    assert out.stdout.strip().splitlines()[-1].endswith(upload)


@pytest.mark.extended  # ~25 s on two cores; the attack command's scores and W&B run are checked in CI
def test_attack_is_reproducible_sees_the_wider_cut_and_can_skip_wandb(tmp_path):
    """Same seed, same numbers; SCALA's checkpoint is attacked through its 64-channel cut."""
    ckpt = _checkpoint(SCALA, tmp_path / "ckpt")
    runs = []
    for i in range(2):
        args = ["--ckpt_path", str(ckpt), "--epochs", "1", "--train_size", "200", "--out", str(tmp_path / f"a{i}")]
        assert _attack(*args, "--no_wandb", cwd=tmp_path).returncode == 0
        runs.append(json.loads((tmp_path / f"a{i}" / "metrics.json").read_text()))
    assert runs[0]["mse"] == runs[1]["mse"] and runs[0]["activation_shape"] == [64, 4, 4]
    assert not (tmp_path / "a0" / "wandb").exists()


def test_grid_shows_each_class_in_turn():
    """The figure's test images: a split stored class by class (as MNIST-5k's test split is) still shows every class;
    checked against a direct construction (round r takes the r-th image of every class, classes in order)."""
    g = torch.Generator().manual_seed(0)
    labels = torch.cat([torch.full((int(n),), c) for c, n in enumerate(torch.randint(1, 6, (7,), generator=g))])
    labels = labels[torch.randperm(len(labels), generator=g)]  # any order of images
    by_class = {c: (labels == c).nonzero().squeeze(1).tolist() for c in range(7)}
    expected = [by_class[c][r] for r in range(6) for c in range(7) if r < len(by_class[c])]
    for n in (1, 7, 10, len(labels)):
        assert grid_indices(labels, n).tolist() == expected[:n]
    sorted_split = torch.arange(10).repeat_interleave(100)  # 10 classes stored one after another
    assert sorted(sorted_split[grid_indices(sorted_split, 10)].tolist()) == list(range(10))


def test_the_picture_labels_its_rows_scores_each_image_and_names_method_and_round(tmp_path):
    """Rows labelled, each reconstruction's own SSIM and PSNR (from the metrics' functions) beneath it, the title as
    given; a readable size (about 110 pixels per image)."""
    import matplotlib.image

    g = torch.Generator().manual_seed(0)
    originals = torch.rand(5, 1, 8, 8, generator=g)
    recon = (originals + 0.2 * torch.randn(5, 1, 8, 8, generator=g)).clamp(0, 1)
    texts = save_grid(originals, recon, tmp_path / "r.png", title="SCALAPE after 3 rounds (digits)")
    ssim, psnr = ssim_per_image(recon, originals), psnr_per_image(recon, originals)
    expected = [f"SSIM {float(s):.2f}\n{float(p):.1f} dB" for s, p in zip(ssim, psnr)]
    assert texts == ["SCALAPE after 3 rounds (digits)", "original", "reconstruction", *expected]
    assert len(set(expected)) > 1  # per image, not one mean
    height, width = matplotlib.image.imread(tmp_path / "r.png").shape[:2]
    assert width >= 5 * 100 and height >= 250


@pytest.mark.extended  # ~25 s on two cores; in CI: the attack scores a split checkpoint (above)
def test_attack_last_finds_the_latest_fit_of_the_same_config_and_writes_beside_its_files(tmp_path):
    """``attack --config C --ckpt_path last`` attacks the last checkpoint of the latest ``fit --config C``; with no
    such fit it is one line. Each attack keeps its files in the run's next ``attack-<n>``, never among the fit's
    checkpoints. The commands run through the entry point one after another (:mod:`cli_in_one_process`)."""
    config = str(REPO / "configs/digits/scala_pe.yaml")
    fit = ["fit", "--config", config, "--trainer.max_epochs=1", "--trainer.enable_progress_bar=false"]
    attack = ["attack", "--config", config, "--ckpt_path", "last"]
    attack_one = [*attack, "--epochs", "1", "--train_size", "100", "--no_wandb"]
    commands = [attack, [*fit, "--trainer.logger=false"], attack_one, attack_one]
    none, fitted, out, again = run_in_one_process([(tmp_path, argv) for argv in commands])
    assert none.code == 2 and none.stderr.startswith("error: ckpt_path='last': no ") and "of this configuration" in (
        none.stderr)  # fmt: skip
    assert fitted.code == 0, fitted.stderr[-2000:]
    (run_folder,) = (tmp_path / "runs").iterdir()
    assert out.code == 0 and again.code == 0, out.stderr + again.stderr
    m = json.loads((run_folder / "attack-1" / "metrics.json").read_text())
    assert (tmp_path / m["checkpoint"]).resolve() == (run_folder / "checkpoints" / "last.ckpt").resolve()
    assert m["rounds"] == 1
    assert (run_folder / "attack-2" / "metrics.json").is_file()
    assert out.stdout.splitlines()[-1].endswith(f"wrote {run_folder.relative_to(tmp_path) / 'attack-1'}")
    assert all(p.suffix == ".ckpt" for p in (run_folder / "checkpoints").iterdir())  # the fit's files, untouched


class _Terminal(io.StringIO):
    """What a terminal shows, kept: a stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_the_decoders_training_shows_its_progress_on_a_terminal_only(monkeypatch, capsys):
    """On a terminal stderr: a bar over the decoder's steps with its epoch and running MSE, cleared at the end; on a
    stderr that is no terminal (here pytest's capture): nothing."""
    from lightning_sfl.privacy import progress

    a, x = torch.randn(40, 8, 4, 4), torch.rand(40, 1, 8, 8)
    options = {"width": 8, "epochs": 2, "batch_size": 8, "lr": 1e-3, "seed": 0}
    train_attacker(a[:30], x[:30], a[30:], x[30:], **options)
    assert capsys.readouterr() == ("", "")
    monkeypatch.setattr(progress, "INTERVAL", 0.0)  # draw at every step
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    train_attacker(a[:30], x[:30], a[30:], x[30:], **options)
    shown = terminal.getvalue()
    assert "decoder epoch 1/2" in shown and "decoder epoch 2/2" in shown and "8/8" in shown, shown
    assert "train_mse=" in shown and "val_mse=" in shown
    assert shown.endswith("\r") and "\n" not in shown  # the bar's line rewritten in place, cleared when done


def test_the_result_line_is_the_last_a_terminal_shows(tmp_path, monkeypatch):
    """``main`` with stdout and stderr on one terminal: the bar was drawn, then cleared, then the result line."""
    from lightning_sfl.attack import main
    from lightning_sfl.privacy import progress

    ckpt = _checkpoint(SCALA, tmp_path / "ckpt")
    monkeypatch.setattr(progress, "INTERVAL", 0.0)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(sys, "stdout", terminal)
    main(["--ckpt_path", str(ckpt), "--epochs", "1", "--train_size", "100", "--no_wandb"])
    shown = terminal.getvalue()
    assert "decoder epoch 1/1" in shown
    last = shown.rstrip("\n").split("\n")[-1].split("\r")[-1]  # what the terminal's last line shows
    assert last.startswith("inversion attack on SCALA after 1 round (digits") and last.endswith(
        f"wrote {tmp_path / 'ckpt' / 'attack-1'}"), shown[-500:]  # fmt: skip


def test_checkpoints_of_earlier_versions_still_load(tmp_path):
    """The fixtures written before defences were parts (``tests/checkpoints``: options ``inversion_*``,
    ``nopeek_weight``, ``activation_noise`` of every method) are rebuilt with the same defences and weights; so is a
    SCALA-PE checkpoint of the version before that, whose regulariser's options were ``gamma``/``threshold``/
    ``regulariser``."""
    from lightning_sfl.attack import _trained_method

    folder = REPO / "tests" / "checkpoints"
    for name, want in (
        ("scala_pe.ckpt", {"Bottleneck": {"channels": 8}, "InversionRegulariser": {"gamma": 0.3, "threshold": 0.5}}),
        ("splitfedv1_nopeek_noise.ckpt", {"NoPeek": {"weight": 0.5}, "ActivationNoise": {"scale": 0.3}}),
    ):
        ckpt = torch.load(folder / name, weights_only=False)
        model, _, _ = _trained_method(ckpt, name)
        got = {type(d).__name__: d.config()["init_args"] for d in model.defences.values()}
        assert got.keys() == want.keys() and all(got[k].items() >= want[k].items() for k in want), (name, got)
        assert torch.equal(model.client.net[0].weight, ckpt["state_dict"]["client.net.0.weight"])
    ckpt = torch.load(folder / "scala_pe.ckpt", weights_only=False)
    hp = ckpt["hyper_parameters"]
    for old in ("gamma", "threshold", "regulariser"):
        hp[old] = hp.pop(f"inversion_{old}")
    hp["gamma"], hp["threshold"] = 0.7, 0.2
    model, name, _ = _trained_method(ckpt, "older")
    assert name == "SCALAPE" and (model.defences.inversion.gamma, model.defences.inversion.threshold) == (0.7, 0.2)


def test_an_attack_with_wandb_disabled_names_no_wandb_run(tmp_path, monkeypatch):
    """``WANDB_MODE=disabled``: no run, so the result line says nothing of W&B (it said ``W&B run None``)."""
    from lightning_sfl.attack_io import log_to_wandb

    monkeypatch.setenv("WANDB_MODE", "disabled")
    summary = tmp_path / "attack-1" / "metrics.md"
    summary.parent.mkdir()
    summary.write_text("| metric | value |\n|---|---|\n| clusters | 1.0 |\n")
    metrics = {"attack": "labels", "method": "SCALA", "clusters": 1.0}
    assert log_to_wandb("lightning-sfl", metrics, [], summary, None, offline=False) == ""
