"""The activation defences (NoPeek, noise): the distance correlation against a reference written from Székely et al.'s
definition in numpy, NoPeek's per-client sum, the noise's distributions, and one-line errors; defences as parts a split
method is given (configs, the legacy options and state keys they replace, who has the option)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lightning_sfl.defences import (
    ActivationNoise,
    Bottleneck,
    InversionRegulariser,
    NoPeek,
    from_legacy_options,
    renamed_legacy_state,
    resolve_defences,
)
from lightning_sfl.errors import ConfigError
from lightning_sfl.privacy.defences import add_noise, distance_correlation, nopeek_loss


def reference_dcor(x: np.ndarray, z: np.ndarray) -> float:
    """Distance correlation from its definition, pair by pair, in float64 (no vectorised centring)."""
    n = len(x)
    x, z = x.reshape(n, -1), z.reshape(n, -1)

    def centred(rows):
        d = [
            [math.sqrt(sum((rows[i][k] - rows[j][k]) ** 2 for k in range(rows.shape[1]))) for j in range(n)]
            for i in range(n)
        ]
        row_mean = [sum(d[i]) / n for i in range(n)]
        col_mean = [sum(d[i][j] for i in range(n)) / n for j in range(n)]
        grand = sum(row_mean) / n
        return [[d[i][j] - row_mean[i] - col_mean[j] + grand for j in range(n)] for i in range(n)]

    a, b = centred(x), centred(z)
    dcov2 = sum(a[i][j] * b[i][j] for i in range(n) for j in range(n)) / n**2
    dvar_x = sum(v * v for row in a for v in row) / n**2
    dvar_z = sum(v * v for row in b for v in row) / n**2
    return math.sqrt(dcov2) / math.sqrt(math.sqrt(dvar_x * dvar_z))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_distance_correlation_matches_its_definition(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(12, 1, 4, 4, generator=g, dtype=torch.float64)
    z = torch.relu(torch.randn(12, 3, 2, 2, generator=g, dtype=torch.float64) + x.mean((1, 2, 3)).view(-1, 1, 1, 1))
    got = float(distance_correlation(x, z))
    assert got == pytest.approx(reference_dcor(x.numpy(), z.numpy()), abs=1e-6)
    assert 0 < got < 1


def test_distance_correlation_extremes_and_gradient():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(40, 6, generator=g, dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=torch.float64))
    assert float(distance_correlation(x, 2.5 * x @ q)) == pytest.approx(1.0, abs=1e-6)  # a similarity of x
    independent = torch.randn(4000, 2, generator=g, dtype=torch.float64)
    assert float(distance_correlation(independent[:2000], independent[2000:])) < 0.1
    assert float(distance_correlation(x, torch.ones(40, 3, dtype=torch.float64))) == 0.0
    z = torch.randn(40, 3, generator=g, dtype=torch.float64, requires_grad=True)
    x_dup = torch.cat([x[:20], x[:20]])  # repeated rows: zero distances off the diagonal too
    distance_correlation(x_dup, z).backward()
    assert torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0


def test_nopeek_loss_is_the_sum_over_clients_of_their_own_rows():
    g = torch.Generator().manual_seed(4)
    x, z = torch.randn(10, 1, 4, 4, generator=g), torch.randn(10, 8, generator=g)
    owner = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 0, 1])  # client 2 has one row: no term
    want = sum(float(distance_correlation(x[owner == k], z[owner == k])) for k in (0, 1))
    assert float(nopeek_loss(x, z, owner, 3)) == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("distribution", ["laplace", "gaussian"])
def test_noise_has_the_distribution_and_scale_it_names(distribution):
    z = torch.zeros(200_000)
    eps = add_noise(z, 0.5, distribution, torch.Generator().manual_seed(0)).double()
    assert abs(float(eps.mean())) < 0.01
    if distribution == "laplace":  # Laplace(0, b): E|ε| = b, Var = 2b²
        assert float(eps.abs().mean()) == pytest.approx(0.5, rel=0.01)
        assert float(eps.var()) == pytest.approx(2 * 0.25, rel=0.02)
    else:
        assert float(eps.std()) == pytest.approx(0.5, rel=0.01)
        assert float(eps.abs().mean()) == pytest.approx(0.5 * math.sqrt(2 / math.pi), rel=0.01)
    again = add_noise(z[:10], 0.5, distribution, torch.Generator().manual_seed(0))
    assert torch.equal(again, add_noise(z[:10], 0.5, distribution, torch.Generator().manual_seed(0)))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: NoPeek(weight=-1.0), r"^NoPeek: weight=-1.0 must be a number >= 0$"),
        (lambda: ActivationNoise(scale=float("nan")), r"^ActivationNoise: scale=nan must be a number >= 0$"),
        (lambda: ActivationNoise(distribution="uniform"), "distribution='uniform' must be one of: laplace, gaussian"),
        (lambda: ActivationNoise(bound="sigmoid"), "bound='sigmoid' must be one of: none, tanh"),
        (lambda: Bottleneck(channels=2.5), r"^Bottleneck: channels=2.5 must be a whole number >= 1$"),
        (lambda: resolve_defences([NoPeek(), NoPeek()]), "two NoPeek"),
        (lambda: resolve_defences(["nopeek"]), "is not a defence; one of: NoPeek, ActivationNoise"),
    ],
)
def test_bad_defence_settings_are_one_line_errors(make, match):
    with pytest.raises(ConfigError, match=match):
        from lightning_sfl.defences import Defences

        Defences(make())


def test_a_defence_is_made_again_from_its_config():
    given = [Bottleneck(channels=4), InversionRegulariser(gamma=0.7, every=3), ActivationNoise(0.2, "gaussian", "tanh")]
    again = resolve_defences([d.config() for d in given])
    assert [type(d) for d in again] == [type(d) for d in given]
    assert [d.config() for d in again] == [d.config() for d in given]
    assert again[1].gamma == 0.7 and again[1].every == 3 and again[2].distribution == "gaussian"
    kept = NoPeek(weight=2.0)
    assert resolve_defences([kept])[0] is not kept  # each method its own copy


def test_every_method_whose_clients_upload_activations_has_the_option():
    """The FedAvg family and the asynchronous FL methods have no ``defences`` (nothing crosses a cut); every other
    registered method has it, GAS, AsyncSFL and Semi-SFL included; the semi-supervised methods that train the whole
    model, or no client (SupervisedOnly), have it (their family's) and refuse it as an option that changes nothing."""
    import inspect

    from lightning_sfl.algorithms import ALGORITHMS, SemiSupervised

    def options(cls):
        return {n for c in cls.__mro__ if "__init__" in vars(c) for n in inspect.signature(c.__init__).parameters}

    library = {name: cls for name, cls in ALGORITHMS.items() if cls.__module__.startswith("lightning_sfl.")}
    has = {name for name, cls in library.items() if "defences" in options(cls)}
    fl = {name for name, cls in library.items() if not cls.has_server_half}
    without = {name for name in fl if not issubclass(ALGORITHMS[name], SemiSupervised)}
    assert has == set(library) - without and {"gas", "async_sfl", "scala", "semi_sfl", "fedswitch_sl"} <= has
    assert "fedavg" in without and "fedbuff" in without
    refused = {n for n in has if "defences" in ALGORITHMS[n].unused_options()}
    whole = {n for n in has if not ALGORITHMS[n].has_server_half}
    assert whole == {"fedmatch", "fedswitch", "semifl"} and refused == whole | {"supervised_only"}  # (no clients)


def test_legacy_options_become_the_defences_the_method_then_built():
    """Checkpoints written before defences were parts record the defence options every method had."""
    legacy = {  # every method's defaults then (save_hyperparameters records them all)
        "nopeek_weight": 0.0, "activation_noise": 0.0, "noise_distribution": "laplace", "noise_bound": "none",
        "bottleneck_channels": None, "inversion_gamma": None, "inversion_threshold": 0.5,
        "inversion_regulariser": "ssim", "inversion_width": 16, "inversion_lr": 1e-3, "inversion_every": 1,
        "inversion_optimizer_state": "kept", "inversion_warmup_epochs": 30, "inversion_warmup_batch_size": 32,
    }  # fmt: skip
    pe = [Bottleneck(channels=8), InversionRegulariser(gamma=0.3)]

    def kinds(options, default=()):
        made = resolve_defences(from_legacy_options({"lr": 0.1, **legacy, **options}, list(default))["defences"])
        return [(type(d).__name__, d.config()["init_args"]) for d in made]

    assert kinds({}) == []
    got = kinds({"nopeek_weight": 0.5, "activation_noise": 0.3, "noise_bound": "tanh"})
    assert got == [("NoPeek", {"weight": 0.5}), ("ActivationNoise", {"scale": 0.3, "distribution": "laplace",
                                                                      "bound": "tanh"})]  # fmt: skip
    assert [k for k, _ in kinds({}, pe)] == ["Bottleneck", "InversionRegulariser"]  # SCALA-PE's defaults
    assert kinds({"inversion_gamma": 0.0, "bottleneck_channels": 0}, pe) == [  # γ = 0 was still simulated
        ("InversionRegulariser", InversionRegulariser(gamma=0.0).config()["init_args"])
    ]
    assert kinds({"bottleneck_channels": 4, "inversion_gamma": 0.5, "inversion_every": 2}) == [
        ("Bottleneck", {"channels": 4}),
        ("InversionRegulariser", InversionRegulariser(gamma=0.5, every=2).config()["init_args"]),
    ]
    assert from_legacy_options({"lr": 0.1}, pe) == {"lr": 0.1}  # nothing legacy: unchanged


def test_legacy_state_keys_are_renamed_both_ways():
    old = {"inversion.0.weight": 1, "inversion_params": 2, "inversion_buffers": 3, "client.net.0.bias": 4}
    new = renamed_legacy_state(old)
    assert new == {"defences.inversion.decoder.0.weight": 1, "defences.inversion.weights": 2,
                   "defences.inversion.statistics": 3, "client.net.0.bias": 4}  # fmt: skip
    assert renamed_legacy_state(new, reverse=True) == old


def test_descending_the_distance_correlation_decorrelates_a_client_half():
    """NoPeek's mechanism: SGD on DCOR(X, f(X)) alone, minibatches of 32 digits, lowers it on held-out images."""
    from _helpers import small_digits

    from lightning_sfl.models import build_model, split_model

    torch.manual_seed(0)
    client, _ = split_model(build_model("cnn_small", 10, (1, 8, 8)), "s2")
    x = small_digits().splits.train_x[:384]
    opt = torch.optim.SGD(client.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        before = float(distance_correlation(x[256:], client(x[256:])))
    for _ in range(100):
        rows = torch.randperm(256, generator=g)[:32]
        opt.zero_grad()
        distance_correlation(x[rows], client(x[rows])).backward()
        opt.step()
    with torch.no_grad():
        after = float(distance_correlation(x[256:], client(x[256:])))
    assert after < before - 0.015, (before, after)  # measured: 0.985 -> 0.960 on the first 128 training images
