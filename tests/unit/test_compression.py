"""The compressors against independent numpy computations: top-k keeps exactly k entries a row, the largest in
magnitude; quantisation is within half a step (a step with stochastic rounding, unbiased); the bytes a row sends are
counted by hand at two settings each; the gradient goes back through the mask (top-k) or straight through
(quantisation); the identity settings return the rows themselves; bad settings are one line."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lightning_sfl.compression import Compression, Quantise, TopK, resolve_compression
from lightning_sfl.compression.functional import quantise_decode, quantise_encode
from lightning_sfl.errors import ConfigError


def _rows(b=6, d=50, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).normal(size=(b, d)).astype(np.float32))


@pytest.mark.parametrize("ratio", [0.1, 0.37, 1.0])
def test_topk_decodes_what_numpy_keeps(ratio):
    a = _rows()
    decoded, _ = TopK(ratio=ratio).compress(a)
    ref = a.numpy()
    k = math.ceil(ratio * ref.shape[1])
    keep = np.argsort(-np.abs(ref), axis=1)[:, :k]
    expected = np.zeros_like(ref)
    np.put_along_axis(expected, keep, np.take_along_axis(ref, keep, axis=1), axis=1)
    assert np.array_equal(decoded.detach().numpy(), expected)
    assert ((decoded != 0).sum(dim=1) == k).all()


def test_topk_sends_values_and_indices_at_their_width():
    a = torch.zeros(2, 1024)
    assert TopK(ratio=0.1).compress(a + 1)[1] == 103 * 4 + 103 * 2  # k = ⌈102.4⌉, float32 values, uint16 indices
    assert TopK(ratio=0.5).compress(torch.ones(1, 70_000, dtype=torch.float64))[1] == 35_000 * (8 + 4)  # int32
    assert TopK(ratio=1.0).compress(a)[1] == 1024 * 4  # the dense row: no index


def test_quantisation_matches_numpy_and_its_error_bound():
    a = _rows(d=200)
    for bits in (2, 4, 8):
        q, low, step = quantise_encode(a, bits)
        ref = a.numpy()  # float32 throughout, as sent (IEEE sums and quotients; both round half to even)
        m = ref.min(axis=1, keepdims=True)
        s = (ref.max(axis=1, keepdims=True) - m) / np.float32(2**bits - 1)
        assert np.array_equal(q.numpy(), np.clip(np.round((ref - m) / s), 0, 2**bits - 1).astype(np.uint8))
        decoded = quantise_decode(q, low, step).numpy()
        assert np.array_equal(decoded, m + s * q.numpy().astype(np.float32))
        assert (np.abs(decoded - ref) <= s / 2 * (1 + 1e-5)).all()  # within half a step


def test_stochastic_rounding_is_unbiased_and_within_a_step():
    a = torch.tensor([[0.0, 0.3, 1.0, 2.2, 3.0]]).repeat(4000, 1)
    q, low, step = quantise_encode(a, 2, torch.Generator().manual_seed(0))  # step 1: codes of 0, 0.3, 1, 2.2, 3
    decoded = quantise_decode(q, low, step)
    assert ((decoded - a).abs() < step + 1e-6).all()
    torch.testing.assert_close(decoded.mean(dim=0), a[0], atol=0.03, rtol=0)


def test_quantised_rows_send_their_codes_packed_and_two_scales():
    assert Quantise(bits=8).compress(_rows(d=1024))[1] == 1024 + 2 * 4  # a quarter of the float32 row + m, s
    assert Quantise(bits=4).compress(_rows(d=1023))[1] == 512 + 2 * 4  # ⌈1023·4/8⌉ = 512
    assert Quantise(bits=2).compress(_rows(d=10).double())[1] == 3 + 2 * 8  # float64 scales


def test_the_gradient_goes_through_the_mask_or_straight_through():
    a = _rows().requires_grad_(True)
    w = torch.randn_like(a)
    decoded, _ = TopK(ratio=0.2).compress(a)
    (g,) = torch.autograd.grad((w * decoded).sum(), a)
    assert torch.equal(g, w * (decoded != 0))
    decoded, _ = Quantise(bits=4).compress(a)
    (g,) = torch.autograd.grad((w * decoded).sum(), a)
    assert torch.equal(g, w)


def test_identity_settings_return_the_rows_themselves():
    a = _rows()
    assert TopK(ratio=1.0).compress(a)[0] is a and Quantise(bits=32).compress(a)[0] is a


def test_compressors_round_trip_through_their_configs():
    given = [TopK(ratio=0.25, crossing="gradients"), Quantise(bits=4, stochastic=True)]
    again = resolve_compression([c.config() for c in given])
    assert [c.config() for c in again] == [c.config() for c in given]
    assert given[0].config() == {
        "class_path": "lightning_sfl.compression.TopK",
        "init_args": {"ratio": 0.25, "crossing": "gradients", "error_feedback": False},
    }
    with pytest.raises(ConfigError, match="is not a compressor"):
        resolve_compression([{"class_path": "os.system", "init_args": {}}])  # (a file names no code to import)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TopK(ratio=0), "TopK: ratio=0 must be in (0, 1]"),
        (lambda: Quantise(bits=3), "Quantise: bits=3 must be one of: 2, 4, 8, 16, 32"),
        (lambda: Quantise(bits=32, stochastic=True), "stochastic=True changes nothing with bits=32"),
        (lambda: TopK(crossing="labels"), "crossing='labels' must be one of: activations, gradients, body_outputs"),
        (lambda: TopK(error_feedback=True), "error_feedback=True is kept per client for crossing='model' only"),
        (lambda: TopK(ratio=1, crossing="model", error_feedback=True), "changes nothing with ratio=1"),
        (lambda: Compression([TopK(), Quantise()]), "two compressors of the activations crossing"),
    ],
)
def test_bad_settings_are_one_line(make, message):
    with pytest.raises(ConfigError, match="^[^\n]*$") as err:
        make()
    assert message in str(err.value)


def test_methods_refuse_a_crossing_they_do_not_have():
    from lightning_sfl.algorithms import SCALA, SFLLocalLoss

    with pytest.raises(ConfigError, match="SFLLocalLoss's server sends the clients no gradients"):
        SFLLocalLoss(compression=[TopK(crossing="gradients")])
    with pytest.raises(ConfigError, match="SCALA has no body_outputs crossing .a crossing of U-shaped runs: give"):
        SCALA(compression=[TopK(crossing="body_outputs")])
    SCALA(compression=[TopK(crossing="body_outputs")], tail_point="s4")  # U-shaped: there
    from lightning_sfl.algorithms import FedAvg, FedBuff, FedDyn, SplitFedV3

    with pytest.raises(ConfigError, match="FedAvg has no activations crossing .its clients train the whole model"):
        FedAvg(compression=[TopK()])
    FedAvg(compression=[TopK(crossing="model")])
    for cls in (FedDyn, FedBuff, SplitFedV3):
        with pytest.raises(ConfigError, match="crossing='model' is for the methods that average them"):
            cls(compression=[TopK(crossing="model")])
    model = SCALA(compression=[Quantise(bits=8)])
    assert model.hparams["compression"] == [Quantise(bits=8).config()]


def test_the_evaluated_model_sees_its_activations_as_deployed():
    """At inference the activations cross the cut too: the global model's logits are the server half's on the decoded
    activations (stochastic rounding rounds to nearest there)."""
    from lightning_sfl.algorithms import SCALA
    from lightning_sfl.compression.functional import topk_decode, topk_encode

    model = SCALA(compression=[TopK(ratio=0.2)]).eval()
    x = torch.randn(3, *model.hparams.input_shape)
    with torch.no_grad():
        acts = model.client(x)
        flat = acts.flatten(1)
        decoded = topk_decode(*topk_encode(flat, math.ceil(0.2 * flat.shape[1])), flat.shape[1]).reshape(acts.shape)
        assert torch.equal(model(x), model.server(decoded))
        assert not torch.equal(model(x), model.server(acts))
        stochastic = SCALA(compression=[Quantise(bits=2, stochastic=True)]).eval()
        assert torch.equal(stochastic(x), stochastic(x))  # no draw at inference
