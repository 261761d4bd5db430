"""SCALA-PE (SCALA journal §5.7): its regulariser against an independent computation, its identities with SCALA, its
per-client decoders and its bad settings (the attack command: tests/integration/test_attack.py)."""

from __future__ import annotations

import copy
import re
import subprocess
import sys

import pytest
import torch
from _helpers import REPO, make_step, quiet_trainer, reference_ssim, small_digits

from lightning_sfl.algorithms import SCALA, SCALAPE
from lightning_sfl.callbacks import CommunicationBytes, SimulatedClock
from lightning_sfl.defences import Bottleneck, InversionRegulariser
from lightning_sfl.errors import ConfigError
from lightning_sfl.loop import WarmupRounds
from lightning_sfl.loop.selection import UniformSelection
from lightning_sfl.privacy.inversion import inversion_decoder
from lightning_sfl.wandb.offline import read_offline_run

KEYS = ("comm/", "clock/")


def pe_defences(**options) -> list:
    """SCALA-PE's defences (a bottleneck of 8 channels and the regulariser with ``options``; a warm-up of 2 passes,
    :data:`SHORT_WARMUP`, unless ``warmup_epochs`` is given: the tests of the warm-up give it)."""
    return [Bottleneck(channels=8), InversionRegulariser(**{"warmup_epochs": 2, **options})]


def fit(cls, rounds: int = 2, callbacks=(), **kwargs):
    """``cls`` fitted ``rounds`` rounds on :func:`small_digits`; SCALA-PE with its regulariser's options given as
    ``inversion_<option>`` (:func:`pe_defences`)."""
    torch.manual_seed(0)
    if cls is SCALAPE:
        options = {k.removeprefix("inversion_"): kwargs.pop(k) for k in list(kwargs) if k.startswith("inversion_")}
        kwargs["defences"] = pe_defences(**options)
    model = cls(**{"local_iters": 2, "lr": 0.05, **kwargs})
    trainer = quiet_trainer(rounds, callbacks=list(callbacks))
    trainer.fit(model, small_digits())
    return model, trainer


def weights(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in [*model.client.parameters(), *model.server.parameters()]])


@pytest.mark.parametrize(
    "options,name",
    [
        ({"threshold": 1.5}, "InversionRegulariser: threshold"),
        ({"threshold": -0.1}, "InversionRegulariser: threshold"),
        ({"gamma": -0.3}, "InversionRegulariser: gamma"),
        ({"regulariser": "psnr"}, "InversionRegulariser: regulariser"),
        ({"every": 0}, "InversionRegulariser: every"),
        ({"optimizer_state": "forever"}, "InversionRegulariser: optimizer_state"),
        ({"width": 0}, "InversionRegulariser: width"),
        ({"warmup_epochs": -1}, "InversionRegulariser: warmup_epochs"),
        ({"warmup_batch_size": 0}, "InversionRegulariser: warmup_batch_size"),
        ({"lr": 0}, "InversionRegulariser: lr"),
    ],
)
def test_bad_settings_are_one_line_errors_naming_the_argument(options, name):
    with pytest.raises(ConfigError, match=rf"^{name}=") as err:
        SCALAPE(defences=pe_defences(**options))
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"^channels=8 \(the bottleneck's\) needs a convolutional cut"):
        SCALAPE(split_point="s5")


def test_with_gamma_zero_it_is_scala_with_the_bottleneck_in_weights_traffic_and_simulated_time():
    """The decoders warm up and train, but with γ = 0 nothing of them reaches the clients: the global model is SCALA's,
    and the warm-up steps add no bytes and no simulated seconds (they train no client half)."""
    metrics = {}
    for name, cls, kwargs in (
        ("pe", SCALAPE, {"inversion_gamma": 0.0}),
        ("base", SCALA, {"defences": [Bottleneck(8)]}),
    ):
        model, trainer = fit(cls, callbacks=[CommunicationBytes(), SimulatedClock()], **kwargs)
        metrics[name] = (model, {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(KEYS)})
    (pe, got), (base, want) = metrics["pe"], metrics["base"]
    assert torch.equal(weights(pe), weights(base))
    assert int(pe.defences.inversion.steps.dense().sum()) > 0 and bool(
        pe.schedule.warm.any()
    )  # the simulated attackers did train
    assert {"comm/cumulative_bytes", "clock/elapsed_seconds"} <= got.keys() and got == want


def test_warm_up_is_adam_on_mse_over_the_clients_shard_as_a_plain_torch_loop_computes_it():
    """The warm-up handler against ``torch.optim.Adam`` on a copy of the decoder (train mode), on the pairs of a client
    that has not taken part yet, with the activations of the global client half."""
    model, _ = fit(SCALAPE, rounds=1, inversion_warmup_epochs=1)
    dm = small_digits()
    schedule = WarmupRounds(local_iters=1, selection=UniformSelection(), epochs=2, batch_size=7)
    steps = [s for s in dm.plan(3, schedule) if s.kind == "warmup"]
    fresh = [i for i, k in enumerate(steps[0].clients.tolist()) if not model.schedule.warm[k]]
    assert fresh, "round 3 of the fresh schedule should bring a client the fit's round 0 did not"
    pos = fresh[0]
    k = int(steps[0].clients[pos])
    assert torch.equal(
        model.defences.inversion.weights[k], model.defences.inversion._flat.flat_parameters()
    )  # never trained
    reference = copy.deepcopy(model.defences.inversion.decoder).requires_grad_(True).train()
    opt = torch.optim.Adam(reference.parameters(), lr=model.defences.inversion.lr)
    model.defences.inversion._warmup_adam.clear()
    for step in steps:
        start, size = int(step.sizes[:pos].sum()), int(step.sizes[pos])
        model.defences.inversion.warm_up(step, model.client)
        if size:
            x = step.x[start : start + size]
            opt.zero_grad()
            ((reference(model.client(x).detach()) - model.defences.inversion.images(x)) ** 2).mean().backward()
            opt.step()
    assert sum(int(s.sizes[pos]) for s in steps) == 2 * int(dm.client_stats.sizes[k])  # two epochs of its shard
    got = model.defences.inversion.weights[k]
    want = torch.nn.utils.parameters_to_vector(reference.parameters()).detach()
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    assert not torch.equal(got, model.defences.inversion._flat.flat_parameters())
    assert int(model.defences.inversion.steps[k]) == 0  # the online Adam state is untouched by the warm-up


#: Without a warm-up in CI; with 1 and 3 warm-up epochs (~5 s each on two cores) with ``-m extended``.
@pytest.mark.parametrize(
    "epochs", [0, pytest.param(1, marks=pytest.mark.extended), pytest.param(3, marks=pytest.mark.extended)]
)
def test_decoders_step_every_inversion_every_local_iterations_whatever_the_warm_up(epochs):
    model, _ = fit(SCALAPE, rounds=2, local_iters=3, inversion_every=2, inversion_warmup_epochs=epochs)
    steps = model.defences.inversion.steps.dense()
    assert int(steps.sum()) == 2 * 2 * 4  # local iterations 0 and 2 of 3, 4 clients, 2 rounds


def test_the_regulariser_changes_training_when_it_is_active():
    off, _ = fit(SCALAPE, inversion_gamma=0.0)
    on, _ = fit(SCALAPE, inversion_gamma=1.0, inversion_threshold=0.0)  # hinge at 0: active from the first step
    assert not torch.equal(weights(on), weights(off))


def test_each_selected_client_trains_its_own_decoder_once_per_local_iteration():
    model, trainer = fit(SCALAPE, rounds=2)
    k = model.client_stats.num_clients
    steps = model.defences.inversion.steps.dense()
    assert steps.shape == (k,) and int(steps.sum()) == 2 * 2 * 4  # rounds · T · clients per round
    untouched = steps == 0
    assert untouched.any()  # 8 clients, 4 a round, 2 rounds: someone sat out
    assert torch.equal(
        model.defences.inversion.weights.dense()[untouched],
        model.defences.inversion._flat.flat_parameters().expand(int(untouched.sum()), -1),
    )
    trained = ~untouched
    initial = model.defences.inversion._flat.flat_parameters()
    assert (model.defences.inversion.weights.dense()[trained] != initial).any(dim=1).all()
    assert "train/inversion_ssim" in trainer.callback_metrics


def test_inversion_every_and_reset_of_the_optimiser_state():
    every, _ = fit(SCALAPE, rounds=2, inversion_every=2)
    assert int(every.defences.inversion.steps.dense().sum()) == 2 * 1 * 4  # one decoder step of the 2 local iterations
    reset, _ = fit(SCALAPE, rounds=2, inversion_optimizer_state="reset")
    kept, _ = fit(SCALAPE, rounds=2)
    assert (
        int(reset.defences.inversion.steps.dense().max()) == 2 <= int(kept.defences.inversion.steps.dense().max())
    )  # restart counts per round
    assert torch.equal(weights(reset), weights(kept))  # no effect on the model while the hinge is 0


def test_the_inversion_term_is_gamma_times_the_sum_of_the_clients_hinges():
    """The clients' term against a computation from scratch: each client's decoder (its row of the stores, eval mode)
    decodes its activations; R_k = max(mean SSIM − τ, 0) with a written-out SSIM; the gradient reaches the activations
    only."""
    model, _ = fit(SCALAPE, rounds=1, inversion_gamma=0.7, inversion_every=5)
    torch.manual_seed(3)
    step = make_step([1, 6], [3, 2])
    model.defences.inversion._iteration = 1  # the round's local iteration 1 of every 5: the decoders do not step
    x = torch.rand(5, 1, 8, 8)
    step = step.replace(
        x=(x - model.defences.inversion.pixel_mean) / model.defences.inversion.pixel_std,
        owner=torch.tensor([0, 0, 0, 1, 1]),
    )
    acts = torch.randn(5, 8, 4, 4, requires_grad=True)
    means = {}
    for k, rows in ((1, slice(0, 3)), (6, slice(3, 5))):
        decoder = inversion_decoder((8, 4, 4), (1, 8, 8), 16)
        torch.nn.utils.vector_to_parameters(model.defences.inversion.weights[k], decoder.parameters())
        state, offset = decoder.state_dict(), 0
        for name, value in state.items():  # the store's row: every float buffer, in named order
            if value.is_floating_point() and "running_" in name:
                state[name] = model.defences.inversion.statistics[k][offset : offset + value.numel()].view_as(value)
                offset += value.numel()
        assert offset == model.defences.inversion.statistics.shape[1]
        decoder.load_state_dict(state)
        with torch.no_grad():
            means[k] = float(reference_ssim(decoder.eval()(acts[rows]), x[rows]).mean())
    model.defences.inversion.threshold = tau = (means[1] + means[6]) / 2  # one client above the hinge, one below
    before = model.defences.inversion.weights.dense()
    got, _ = model.defences.inversion.client_terms(step, acts, log=lambda *a, **k: None)
    assert torch.equal(model.defences.inversion.weights.dense(), before)
    want = 0.7 * sum(max(m - tau, 0.0) for m in means.values())
    assert want > 0 and float(got.detach()) == pytest.approx(want, abs=1e-5)
    got.backward()
    above = slice(0, 3) if means[1] > means[6] else slice(3, 5)
    below = slice(3, 5) if means[1] > means[6] else slice(0, 3)
    assert acts.grad[above].abs().sum() > 0 and acts.grad[below].abs().sum() == 0


def test_images_are_the_inputs_de_normalised():
    model, _ = fit(SCALAPE, rounds=1)
    dm = small_digits()
    raw = dm.splits.train_x[:4]
    torch.testing.assert_close(
        model.defences.inversion.images(dm.splits.to_float(raw)), raw.float().clamp(0, 1), atol=1e-6, rtol=0
    )


@pytest.mark.extended  # ~25 s on two cores; SCALA-PE trains in test_algorithms' registry-driven runs
def test_a_two_round_run_of_the_digits_config_trains_and_reaches_wandb(tmp_path):
    """``lightning-sfl fit --config configs/digits/scala_pe.yaml`` for 2 rounds, with the CLI's default loggers (W&B
    offline): it trains (the server loss falls, accuracy rises from round 1 to round 2, measured against the run's own
    first round so that the CPU's kernels cannot move the bar) and the simulated attackers' SSIM reaches W&B's own run
    files."""
    cmd = [sys.executable, "-m", "lightning_sfl.cli", "fit", "--config", str(REPO / "configs/digits/scala_pe.yaml")]
    cmd += ["--trainer.max_epochs=2", "--trainer.enable_progress_bar=false", "--dissimilarity.every_n_rounds=0"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    final = re.search(r"final test accuracy: (\d\.\d{4}) after 2 rounds", out.stdout)
    assert final, out.stdout[-500:]
    (run_folder,) = (tmp_path / "runs").iterdir()
    run = read_offline_run(run_folder)
    acc = [row["test/acc"] for row in run.rows_with("test/acc")]
    loss = [row["train/server_loss"] for row in run.rows_with("train/server_loss")]
    assert len(acc) == len(loss) == 2 and float(final.group(1)) == pytest.approx(acc[-1], abs=1e-4)
    assert loss[1] < 0.5 * loss[0], loss  # measured on two CPUs: 7.9 -> 1.7
    assert acc[1] > acc[0], acc  # 0.097 -> 0.181 (30 of 360 test images) where round 2 is below 0.2
    ssim = [row["train/inversion_ssim"] for row in run.rows_with("train/inversion_ssim")]
    assert len(ssim) == 2 and all(0 < v <= 1 for v in ssim)
    bottleneck, inversion = run.config["defences"]
    assert bottleneck["init_args"]["channels"] == 8 and inversion["init_args"]["gamma"] == 0.3


def test_the_cifar10_config_is_ressfls_setting():
    """configs/cifar10/scala_pe.yaml: VGG-11 cut after its second block (128×8×8), a bottleneck of 8 channels (8×8×8
    cross the cut), 16-channel simulated decoders back to 3×32×32 images."""
    import yaml

    init = yaml.safe_load((REPO / "configs/cifar10/scala_pe.yaml").read_text())["model"]["init_args"]
    model = SCALAPE(**{**init, "num_classes": 10, "input_shape": (3, 32, 32)})
    x = torch.zeros(2, 3, 32, 32)
    cut = model.client.net[:-1](x)  # the model's own cut, before the bottleneck
    assert cut.shape[1:] == (128, 8, 8) and model.client(x).shape[1:] == (8, 8, 8)
    decoder = model.defences.inversion.decoder
    assert decoder[0].out_channels == 16 and decoder(model.client(x)).shape[1:] == (3, 32, 32)
