"""Privacy pieces: reconstruction metrics and the regulariser against independent computations, the inversion
decoders, the per-client Adam, and the bottleneck at the cut (shapes, errors, bytes)."""

from __future__ import annotations

import math

import pytest
import torch
from _helpers import REPO, quiet_trainer, reference_ssim, small_digits

from lightning_sfl.algorithms import SCALA, SCALAPE, SplitFedV1
from lightning_sfl.callbacks import CommunicationBytes
from lightning_sfl.defences import Bottleneck
from lightning_sfl.errors import ConfigError
from lightning_sfl.privacy.inversion import FlatModule, adam_update, inversion_decoder
from lightning_sfl.privacy.metrics import mse_per_image, psnr_per_image, regulariser, ssim_per_image


def test_ssim_matches_a_written_out_reference_on_digit_sized_and_colour_images():
    torch.manual_seed(0)
    for shape in [(3, 1, 8, 8), (2, 3, 12, 10)]:
        x = torch.rand(shape)
        x_hat = (x + 0.2 * torch.randn(shape)).clamp(0, 1)
        torch.testing.assert_close(ssim_per_image(x_hat, x).double(), reference_ssim(x_hat, x), atol=1e-5, rtol=0)
    assert torch.allclose(ssim_per_image(x, x), torch.ones(len(x)))


def test_mse_and_psnr_per_image_by_hand_and_psnr_is_averaged_per_image():
    x = torch.zeros(2, 1, 4, 4)
    x_hat = torch.stack([torch.full((1, 4, 4), 0.1), torch.full((1, 4, 4), 0.01)])
    torch.testing.assert_close(mse_per_image(x_hat, x), torch.tensor([0.01, 0.0001]))
    torch.testing.assert_close(psnr_per_image(x_hat, x), torch.tensor([20.0, 40.0]))
    pooled = 10 * math.log10(1 / 0.00505)  # ≈ 22.97 dB: not what ResSFL and Table VI average
    assert float(psnr_per_image(x_hat, x).mean()) == pytest.approx(30.0) != pytest.approx(pooled)
    assert float(psnr_per_image(x, x)[0]) == pytest.approx(100.0)  # a perfect copy stays finite


def test_regulariser_is_the_hinge_on_each_clients_mean_ssim_and_minus_mse():
    torch.manual_seed(1)
    x = torch.rand(5, 1, 8, 8)
    x_hat = (x + torch.tensor([0.05, 0.4, 0.05, 0.6, 0.1]).view(-1, 1, 1, 1) * torch.randn(5, 1, 8, 8)).clamp(0, 1)
    owner = torch.tensor([0, 0, 2, 2, 2])  # client 1 has no rows
    s = reference_ssim(x_hat, x)
    tau = 0.5
    want = torch.stack([(s[:2].mean() - tau).clamp_min(0), torch.zeros((), dtype=s.dtype), (s[2:].mean() - tau)])
    got = regulariser(x_hat, x, owner, 3, "ssim", tau)
    torch.testing.assert_close(got.double(), want.clamp_min(0), atol=1e-5, rtol=0)
    assert got[0] > 0 and got[1] == 0
    assert float(regulariser(x_hat, x, owner, 3, "ssim", 1.0).abs().sum()) == 0  # SSIM never exceeds 1
    mse = ((x_hat - x) ** 2).mean(dim=(1, 2, 3))
    torch.testing.assert_close(
        regulariser(x_hat, x, owner, 3, "mse", tau), -torch.stack([mse[:2].mean(), 0 * mse[0], mse[2:].mean()])
    )


def test_regulariser_gradient_reaches_the_reconstruction_only_above_the_threshold():
    x = torch.rand(2, 1, 8, 8)
    close = (x + 0.01).clamp(0, 1).requires_grad_(True)
    regulariser(close, x, torch.tensor([0, 0]), 1, "ssim", 0.5).sum().backward()
    assert close.grad.abs().sum() > 0
    far = torch.rand(2, 1, 8, 8).requires_grad_(True)
    assert float(ssim_per_image(far.detach(), x).mean()) < 0.5
    regulariser(far, x, torch.tensor([0, 0]), 1, "ssim", 0.5).sum().backward()
    assert far.grad.abs().sum() == 0


@pytest.mark.parametrize(
    "act,image,ups",
    [((8, 4, 4), (1, 8, 8), 1), ((8, 7, 7), (1, 28, 28), 2), ((8, 8, 8), (3, 32, 32), 2), ((4, 2, 2), (1, 16, 16), 3)],
)
def test_decoder_maps_activations_to_images_in_the_unit_interval(act, image, ups):
    decoder = inversion_decoder(act, image, 16)
    transposed = [m for m in decoder if isinstance(m, torch.nn.ConvTranspose2d)]
    assert len(transposed) == ups and decoder[0].out_channels == 16
    out = decoder(torch.randn(3, *act)).detach()
    assert out.shape == (3, *image) and 0 <= float(out.min()) and float(out.max()) <= 1
    assert inversion_decoder((8, 3, 3), (1, 28, 28), 16)(torch.randn(2, 8, 3, 3)).shape == (2, 1, 28, 28)


def test_decoder_refuses_a_flat_activation():
    with pytest.raises(ConfigError, match=r"convolutional cut"):
        inversion_decoder((128,), (1, 8, 8), 16)


def test_adam_update_equals_torch_adam():
    torch.manual_seed(0)
    p = torch.randn(7)
    ref = p.clone().requires_grad_(True)
    opt = torch.optim.Adam([ref], lr=1e-2)
    m, v = torch.zeros(7), torch.zeros(7)
    for t in range(1, 5):
        g = torch.randn(7)
        ref.grad = g.clone()
        opt.step()
        adam_update(p, g, m, v, t, 1e-2)
    torch.testing.assert_close(p, ref.detach(), atol=1e-7, rtol=1e-6)


def test_flat_module_runs_one_row_and_updates_only_its_statistics():
    torch.manual_seed(0)
    decoder = inversion_decoder((8, 4, 4), (1, 8, 8), 16)
    flat = FlatModule(decoder)
    params = flat.flat_parameters().repeat(3, 1)
    params[1] += 0.01 * torch.randn_like(params[1])
    buffers = flat.flat_buffers().repeat(3, 1)
    a = torch.randn(4, 8, 4, 4)
    copy = inversion_decoder((8, 4, 4), (1, 8, 8), 16)
    torch.nn.utils.vector_to_parameters(params[1], copy.parameters())
    copy.eval()
    torch.testing.assert_close(flat(params[1], buffers[1], a, train=False), copy(a))
    before = buffers.clone()
    flat(params[1], buffers[1], a, train=True)
    assert not torch.equal(buffers[1], before[1]) and torch.equal(buffers[[0, 2]], before[[0, 2]])


# ---------------------------------------------------------------------------------------------- bottleneck at the cut
def test_bottleneck_narrows_the_cut_and_keeps_the_model_whole():
    torch.manual_seed(0)
    model = SplitFedV1(defences=[Bottleneck(channels=8)])  # any split method
    x = torch.randn(5, 1, 8, 8)
    a = model.client(x)
    assert a.shape == (5, 8, 4, 4)
    down, up = model.client.net[-1], model.server.net[0]
    assert (down.in_channels, down.out_channels, down.kernel_size, down.stride) == (64, 8, (3, 3), (1, 1))
    assert (up.in_channels, up.out_channels, up.kernel_size, up.stride) == (8, 64, (3, 3), (1, 1))
    assert torch.equal(model(x), model.server(a)) and model(x).shape == (5, 10)


@pytest.mark.parametrize(
    "make,match",
    [
        (
            lambda: SCALA(defences=[Bottleneck(8)], split_point="s5"),
            r"^channels=8 \(the bottleneck's\) needs a convolu",
        ),
        (lambda: SCALA(defences=[Bottleneck(-1)]), r"^Bottleneck: channels=-1 must be a whole number >= 1"),
        (lambda: SCALA(defences=[Bottleneck(2.5)]), r"^Bottleneck: channels=2.5 must be a whole number >= 1"),
        (lambda: SCALA(defences=[Bottleneck(8), Bottleneck(4)]), r"^defences: two Bottleneck"),
    ],
)
def test_bad_bottlenecks_are_one_line_errors(make, match):
    with pytest.raises(ConfigError, match=match) as err:
        make()
    assert "\n" not in str(err.value)


def test_a_config_written_for_another_method_keeps_each_methods_own_bottleneck():
    """``--config configs/digits/scala.yaml --model scala_pe`` (what ``compare`` does too) resolves SCALA's defaults
    into the config; SCALA-PE must still get its 8 channels, and ``defences: []`` turns its bottleneck off."""
    from lightning_sfl.lightning_cli import resolved_config

    def build(*args, **init):
        model = resolved_config(["--config", str(REPO / "configs/digits/scala.yaml"), *args])["model"]
        cls = {"SCALAPE": SCALAPE, "SCALA": SCALA}[model["class_path"].rpartition(".")[2]]
        return cls(**{**model["init_args"], **init}).client(torch.zeros(1, 1, 8, 8)).shape[1]

    assert build("--model", "scala_pe") == 8 and build() == 64
    assert build("--model", "scala_pe", defences=[]) == 64
    assert build("--model.defences+=Bottleneck", "--model.defences.channels=4") == 4


def test_byte_ledger_counts_the_narrower_activations():
    """Activations up and gradients down per round: rows · b·H·W · 4 bytes, b = 8 instead of 64 (cnn_small at s2)."""
    traffic = {}
    for channels in (None, 8):
        torch.manual_seed(0)
        model = SCALA(local_iters=3, lr=0.05, defences=[Bottleneck(channels)] if channels else [])
        trainer = quiet_trainer(1, callbacks=[CommunicationBytes()])
        trainer.fit(model, small_digits())
        traffic[channels] = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("comm/")}
    rows = 3 * 24  # T local iterations of B rows
    for channels, c in ((None, 64), (8, 8)):
        assert traffic[channels]["comm/up/activations_bytes"] == rows * c * 4 * 4 * 4
        assert traffic[channels]["comm/down/gradients_bytes"] == rows * c * 4 * 4 * 4
    assert traffic[8]["comm/up/labels_bytes"] == traffic[None]["comm/up/labels_bytes"]
