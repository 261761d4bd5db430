"""UnSplit (``attack --attack unsplit``) and the activation defences in training: the attack recovers images from a
client half's activations and fails on noise; every defence runs from a digits config, keeps traffic, resumes exactly
and refuses bad settings. Both attacks recovering more from an undefended client than from a defended one, against
the README's table: ``tests/studies/test_unsplit_documented.py``."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from _helpers import REPO, csv_rounds, small_digits
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from lightning_sfl.algorithms import GAS, SCALA, FedAvg, SemiSFL, SplitFedV1
from lightning_sfl.callbacks import CommunicationBytes
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.defences import ActivationNoise, InversionRegulariser, NoPeek
from lightning_sfl.errors import ConfigError
from lightning_sfl.models import build_model, split_model
from lightning_sfl.privacy.defences import distance_correlation
from lightning_sfl.privacy.metrics import mse_per_image
from lightning_sfl.privacy.unsplit import UnSplitSettings, total_variation, unsplit
from lightning_sfl.runtime.state import banks_left_out


def test_total_variation_against_a_loop():
    x = torch.rand(3, 2, 5, 4, generator=torch.Generator().manual_seed(0))
    want = []
    for n in range(3):
        total = 0.0
        for c in range(2):
            for i in range(5):
                for j in range(4):
                    if i + 1 < 5:
                        total += float(x[n, c, i + 1, j] - x[n, c, i, j]) ** 2
                    if j + 1 < 4:
                        total += float(x[n, c, i, j + 1] - x[n, c, i, j]) ** 2
        want.append(total / 40)  # per pixel of the image (2 x 5 x 4)
    assert total_variation(x).tolist() == pytest.approx(want, rel=1e-5)


def test_unsplit_inverts_a_client_half_it_never_saw_and_not_noise():
    """A clone of cnn_small's first block (random weights the attacker does not know) and images recovered from the
    victim's activations: closer to the images than UnSplit's own start (0.5 everywhere), and than what it makes of
    activations that carry no image."""
    images = small_digits().splits.test_x[:16]
    torch.manual_seed(0)
    victim, _ = split_model(build_model("cnn_small", 10, (1, 8, 8)), "s1")
    with torch.no_grad():
        observed = victim(images)
    settings = UnSplitSettings(outer=8, inner=40, lr=0.01)
    scores = {}
    for name, z in (("activations", observed), ("noise", torch.rand_like(observed) * observed.max())):
        torch.manual_seed(1)
        clone, _ = split_model(build_model("cnn_small", 10, (1, 8, 8)), "s1")
        history: list[dict] = []
        x_hat = unsplit(z, clone, (1, 8, 8), lambda x: x, settings, history)
        assert [h["attack/outer"] for h in history] == list(range(1, 9))
        assert history[-1]["attack/activation_mse"] < history[0]["attack/activation_mse"]
        assert x_hat.shape == images.shape and 0 <= float(x_hat.min()) and float(x_hat.max()) <= 1
        scores[name] = float(mse_per_image(x_hat, images).mean())
    start = float(mse_per_image(torch.full_like(images, 0.5), images).mean())
    assert scores["activations"] < 0.7 * start and scores["activations"] < 0.7 * scores["noise"], (scores, start)


class _Terminal(io.StringIO):
    """What a terminal shows, kept: a stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_unsplit_shows_its_progress_on_a_terminal_only(monkeypatch, capsys):
    """On a terminal stderr: a bar over UnSplit's steps naming the alternation, the phase and its loss, cleared at the
    end; the same result with or without it; on a stderr that is no terminal: nothing."""
    from lightning_sfl.privacy import progress

    images = small_digits().splits.test_x[:4]
    settings = UnSplitSettings(outer=2, inner=3)
    results = []
    for terminal in (None, _Terminal()):
        if terminal is not None:
            monkeypatch.setattr(progress, "INTERVAL", 0.0)  # draw at every step
            monkeypatch.setattr(sys, "stderr", terminal)
        torch.manual_seed(0)
        victim, _ = split_model(build_model("cnn_small", 10, (1, 8, 8)), "s1")
        clone, _ = split_model(build_model("cnn_small", 10, (1, 8, 8)), "s1")
        with torch.no_grad():
            observed = victim(images)
        results.append(unsplit(observed, clone, (1, 8, 8), lambda x: x, settings))
    assert capsys.readouterr() == ("", "")  # the first run's: no terminal, no bar
    shown = terminal.getvalue()
    for text in ("UnSplit 1/2 images", "UnSplit 2/2 clone", "12/12", "loss=", "activation_mse="):
        assert text in shown, (text, shown)
    assert shown.endswith("\r") and "\n" not in shown
    assert torch.equal(results[0], results[1])


def test_nopeek_lowers_the_distance_correlation_of_inputs_and_activations():
    """Five rounds with NoPeek at α = 50 against none, 32 rows a client a step (the distance correlation of a few
    rows is close to 1 whatever the map): the trained client half's activations of test images carry less distance
    correlation with them, the quantity NoPeek penalises (measured: 0.984 without, 0.963 with). With NoPeek on, the
    clients' own minibatch DCOR is logged every round (``train/nopeek_dcor``, in (0, 1]); without, it is not."""
    x = small_digits().splits.test_x[:200]
    dcor, logged = {}, {}
    for alpha in (0.0, 50.0):
        torch.manual_seed(0)
        model = SCALA(local_iters=3, lr=0.05, defences=[NoPeek(weight=alpha)] if alpha else [])
        dm = FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=128, seed=1)
        trainer = L.Trainer(max_epochs=5, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False)  # fmt: skip
        trainer.fit(model, dm)
        logged[alpha] = trainer.callback_metrics.get("train/nopeek_dcor")
        with torch.no_grad():
            dcor[alpha] = float(distance_correlation(x, model.client(x)))
    assert dcor[50.0] < dcor[0.0] - 0.01, dcor
    assert logged[0.0] is None and 0 < float(logged[50.0]) <= 1, logged


def _fit(cls, rounds: int, folder: Path, ckpt_path: str | None = None, **kwargs):
    torch.manual_seed(0)
    model = cls(local_iters=2, lr=0.05, momentum=0.5, **kwargs)
    trainer = L.Trainer(
        max_epochs=rounds,
        logger=CSVLogger(folder, name="csv", version=0),
        log_every_n_steps=1,
        callbacks=[ModelCheckpoint(dirpath=folder / "ckpt", save_last=True), CommunicationBytes()],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, small_digits(), ckpt_path=ckpt_path)
    return model


ALL_DEFENCES = [NoPeek(weight=0.5), ActivationNoise(scale=0.2, distribution="gaussian", bound="tanh")]


#: the inversion regulariser (SCALA-PE's, on another method) with a one-epoch warm-up of the decoders
INVERSION = InversionRegulariser(gamma=0.5, threshold=0.0, warmup_epochs=1)


@pytest.mark.parametrize("cls", [SCALA, GAS, SplitFedV1], ids=["scala", "gas", "splitfedv1_inversion"])
def test_resume_with_every_defence_on_is_exact_and_traffic_is_unchanged(cls, tmp_path):
    extra = {"covariance": "diag", "concurrency": 3, "flush_every": 3, "aggregate_every": 2} if cls is GAS else {}
    defended = {**extra, "defences": [*ALL_DEFENCES, *([INVERSION] if cls is SplitFedV1 else [])]}
    full = _fit(cls, 4, tmp_path / "full", **defended)
    _fit(cls, 2, tmp_path / "part", **defended)
    resumed = _fit(cls, 4, tmp_path / "part", str(tmp_path / "part" / "ckpt" / "last.ckpt"), **defended)
    transient = banks_left_out(full)
    for (n, a), b in zip(full.state_dict().items(), resumed.state_dict().values()):
        assert n.startswith(transient) or torch.equal(a, b), f"{n} differs after resume"
    want, got = csv_rounds(tmp_path / "full"), csv_rounds(tmp_path / "part")
    for epoch in (2, 3):
        for key in ("test/acc", "comm/cumulative_bytes", "train/client_loss"):
            assert got[epoch].get(key) == want[epoch].get(key), (epoch, key)
    plain = _fit(cls, 4, tmp_path / "plain", **extra)
    assert csv_rounds(tmp_path / "plain")[3]["comm/cumulative_bytes"] == want[3]["comm/cumulative_bytes"]
    assert not torch.equal(plain.client.net[0].weight, full.client.net[0].weight)  # the defences did act


DEFENCE_OPTIONS = (
    ("--model.defences+=NoPeek", "--model.defences.weight=0.5"),
    ("--model.defences+=ActivationNoise", "--model.defences.scale=0.3"),
    ("--model.defences+=ActivationNoise", "--model.defences.scale=0", "--model.defences.bound=tanh"),
    ("--model.defences+=Bottleneck", "--model.defences.channels=8"),
    ("--model.defences+=InversionRegulariser", "--model.defences.gamma=0.3"),
)


@pytest.mark.extended  # ~30 s on two cores; every defence trains in CI below
def test_every_defence_runs_from_a_digits_config(tmp_path):
    """Each defence option on the digits SCALA config, through the command line's entry point (Lightning imported
    once for the five: :mod:`cli_in_one_process`): a finished fit, no warning."""
    from cli_in_one_process import run_in_one_process

    base = ["fit", "--config", str(REPO / "configs/digits/scala.yaml"), "--trainer.max_epochs=2"]
    base += ["--trainer.logger=false", "--trainer.enable_progress_bar=false"]
    folders = [tmp_path / f"defence{i}" for i in range(len(DEFENCE_OPTIONS))]
    for folder in folders:
        folder.mkdir()
    runs = run_in_one_process([(f, [*base, *options]) for f, options in zip(folders, DEFENCE_OPTIONS)])
    for option, out in zip(DEFENCE_OPTIONS, runs):
        assert out.code == 0, f"{option}: {out.stderr[-3000:]}"
        assert "final test accuracy" in out.stdout and "Warning" not in out.stderr, option


def test_defences_need_a_plain_split_upload():
    """Plain FL methods have no ``defences`` (Semi-SFL's: ``test_semi_defences.py``); the regulariser refuses
    asynchronous rounds and Semi-SFL's phases."""
    with pytest.raises(TypeError, match="defences"):
        FedAvg(defences=[NoPeek()])
    with pytest.raises(ConfigError, match="^InversionRegulariser needs synchronous rounds; SemiSFL runs Phases$"):
        SemiSFL(defences=[InversionRegulariser(gamma=0.3)])
    with pytest.raises(ConfigError, match="distribution='poisson' must be one of"):
        SCALA(defences=[ActivationNoise(scale=0.1, distribution="poisson")])
    with pytest.raises(ConfigError, match="^InversionRegulariser needs synchronous rounds; GAS runs AsyncEvents$"):
        _ = GAS(defences=[InversionRegulariser(gamma=0.3)]).schedule
