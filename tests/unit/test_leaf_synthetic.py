"""Synthetic(λ, µ), FedProx's generator (:mod:`lightning_sfl.data.leaf_synthetic`), against its defining equations,
and as a dataset with its own clients (``--data.dataset leaf_synthetic --data.partition natural``)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from _helpers import REPO

from lightning_sfl.data import FederatedDataModule, load_dataset
from lightning_sfl.data.leaf_synthetic import fedprox_synthetic, input_covariance, logistic_labels, stacked_synthetic
from lightning_sfl.errors import ConfigError


def test_shapes_sizes_and_split_follow_the_generator():
    data = fedprox_synthetic(0.5, 0.5, num_clients=30, seed=1)
    assert len(data.train_x) == len(data.weights) == 30
    for xtr, ytr, xte, yte, w, b, v in zip(data.train_x, data.train_y, data.test_x, data.test_y, data.weights,
                                           data.biases, data.input_means):  # fmt: skip
        n = len(ytr) + len(yte)
        assert n >= 50 and len(ytr) == int(0.9 * n)  # ⌊LogNormal(4, 2)⌋ + 50, then ⌊0.9·n⌋ train
        assert xtr.shape == (len(ytr), 60) and xte.shape == (len(yte), 60) and xtr.dtype == np.float32
        assert w.shape == (60, 10) and b.shape == (10,) and v.shape == (60,)
        assert np.array_equal(ytr, logistic_labels(xtr.astype(np.float64), w, b))  # y = argmax(x·W_k + b_k)
    sizes = np.array([len(y) + len(t) for y, t in zip(data.train_y, data.test_y)])
    assert np.median(sizes) > 60 and sizes.max() > 3 * np.median(sizes)  # heavy-tailed (median e⁴ + 50 ≈ 105)


def test_per_client_draws_and_the_input_covariance():
    """``W_k, b_k ~ N(u_k, 1)``, ``v_k ~ N(B_k, 1)``, ``u_k ~ N(0, λ)``, ``B_k ~ N(0, µ)``, ``x − v_k ~ N(0, Σ)``."""
    data = fedprox_synthetic(1.0, 2.0, num_clients=200, num_classes=10, seed=3)
    for k in range(5):
        assert abs(np.concatenate([data.weights[k].ravel(), data.biases[k]]).mean() - data.model_shifts[k]) < 0.2
        assert abs(data.weights[k].std() - 1.0) < 0.1 and abs(data.input_means[k].mean() - data.input_shifts[k]) < 0.5
    assert abs(data.model_shifts.std() - 1.0) < 0.15 and abs(data.input_shifts.std() - 2.0) < 0.3
    big = int(np.argmax([len(y) for y in data.train_y]))
    residual = data.train_x[big].astype(np.float64) - data.input_means[big]
    assert len(residual) > 2000
    ratio = residual.var(axis=0) / input_covariance(60)  # Σ = diag(j^−1.2)
    assert np.all(np.abs(ratio - 1) < 0.25) and abs(ratio.mean() - 1) < 0.05


def test_lambda_moves_no_label_and_the_iid_variant_shares_one_model():
    rng = np.random.default_rng(0)
    x, w, b = rng.normal(size=(500, 60)), rng.normal(size=(60, 10)), rng.normal(size=10)
    for shift in (-3.0, 0.7, 5.0):  # u_k added to every entry of W_k and b_k: every logit moves by u_k·(Σx + 1)
        assert np.array_equal(logistic_labels(x, w + shift, b + shift), logistic_labels(x, w, b))
    iid = fedprox_synthetic(0.0, 0.0, num_clients=10, iid=True, seed=2)
    assert all(np.array_equal(w, iid.weights[0]) for w in iid.weights)
    assert all(np.array_equal(v, np.zeros(60)) for v in iid.input_means)
    skewed = fedprox_synthetic(0.0, 0.0, num_clients=10, seed=2)
    assert not np.array_equal(skewed.weights[0], skewed.weights[1])  # Synthetic(0, 0) is still non-IID


def test_the_same_seed_draws_the_same_data_and_another_does_not():
    a, b, c = (fedprox_synthetic(0.5, 0.5, num_clients=20, seed=s) for s in (4, 4, 5))
    assert all(np.array_equal(x, y) for x, y in zip(a.train_x, b.train_x))
    assert all(np.array_equal(x, y) for x, y in zip(a.test_y, b.test_y))
    assert not np.array_equal(a.train_x[0][:10], c.train_x[0][:10])


def test_the_dataset_keeps_the_clients_it_was_drawn_with():
    splits = load_dataset("leaf_synthetic", leaf_lambda=1.0, leaf_mu=1.0, leaf_clients=25, seed=7)
    drawn = fedprox_synthetic(1.0, 1.0, num_clients=25, seed=7)
    assert splits.input_shape == (60, 1, 1) and splits.num_classes == 10 and len(splits.client_rows) == 25
    for rows, x, y in zip(splits.client_rows, drawn.train_x, drawn.train_y):
        assert torch.equal(splits.train_x[rows].view(-1, 60), torch.from_numpy(x))
        assert torch.equal(splits.train_y[rows], torch.from_numpy(y))
    assert len(splits.test_y) == sum(len(y) for y in drawn.test_y)  # every client's test rows, pooled
    dm = FederatedDataModule(dataset="leaf_synthetic", partition="natural", num_clients=25, participation=0.2,
                             batch_size=50, leaf_lambda=1.0, leaf_mu=1.0, seed=7)  # fmt: skip
    assert [len(r) for r in dm.client_indices] == [len(y) for y in drawn.train_y]
    assert "Synthetic(λ=1.0, µ=1.0)" in dm.describe()


@pytest.mark.parametrize(
    "kwargs,text",
    [
        ({"dataset": "digits", "partition": "natural"}, "partition='natural' (the dataset's own clients) goes with"),
        ({"dataset": "leaf_synthetic", "partition": "iid"}, "goes with dataset='leaf_synthetic'"),
        ({"dataset": "leaf_synthetic", "partition": "natural", "leaf_mu": -1.0}, "must be >= 0"),
    ],
)
def test_bad_settings_are_one_line(kwargs, text):
    with pytest.raises(ConfigError, match=text.replace("(", r"\(").replace(")", r"\)")):
        FederatedDataModule(num_clients=20, **kwargs)


def test_the_config_trains_the_logistic_model_through_the_cli(tmp_path, monkeypatch):
    """``configs/leaf_synthetic/fedavg.yaml`` (FedAvg, 100 clients as drawn, the 60 → 10 logistic model): accuracy
    after 10 rounds is well above that after 1, on the pooled test rows of all clients."""
    from lightning_sfl.lightning_cli import SFLCLI

    monkeypatch.chdir(tmp_path)
    config = str(REPO / "configs/leaf_synthetic/fedavg.yaml")
    acc = {}
    for rounds in (1, 10):
        cli = SFLCLI(args=["fit", "--config", config, f"--trainer.max_epochs={rounds}", "--trainer.logger=false",
                           "--trainer.enable_checkpointing=false", "--trainer.enable_progress_bar=false"])  # fmt: skip
        acc[rounds] = float(cli.trainer.callback_metrics["test/acc"])
    assert acc[10] > acc[1] + 0.1, acc  # measured: 0.17 -> 0.35


def _reference_synthetic(lam, mu, num_clients, size_mu=4.0, iid=False, seed=0, dim=60, num_classes=10):
    """The generator before issue 57 (verbatim but for names): per client its own arrays, drawn in this order."""
    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(size_mu, 2.0, num_clients).astype(np.int64) + 50
    scale = np.sqrt(input_covariance(dim))
    shared_w, shared_b = rng.normal(0.0, 1.0, (dim, num_classes)), rng.normal(0.0, 1.0, num_classes)
    train_x, train_y, test_x, test_y = [], [], [], []
    for n in sizes:
        if iid:
            w, b, v = shared_w, shared_b, np.zeros(dim)
        else:
            u, shift = rng.normal(0.0, lam), rng.normal(0.0, mu)
            w, b, v = (
                rng.normal(u, 1.0, (dim, num_classes)),
                rng.normal(u, 1.0, num_classes),
                rng.normal(shift, 1.0, dim),
            )
        x = v + rng.normal(0.0, 1.0, (int(n), dim)) * scale
        y = logistic_labels(x, w, b)
        order = rng.permutation(int(n))
        cut = int(0.9 * n)
        train_x.append(x[order[:cut]].astype(np.float32))
        train_y.append(y[order[:cut]])
        test_x.append(x[order[cut:]].astype(np.float32))
        test_y.append(y[order[cut:]])
    return train_x, train_y, test_x, test_y


@pytest.mark.parametrize(
    "lam,mu,clients,size_mu,iid,seed",
    [
        (1.0, 1.0, 40, 4.0, False, 0),
        (0.5, 0.5, 25, 4.0, False, 3),
        (0.0, 0.0, 30, 0.0, True, 1),
        (1.0, 2.0, 200, 0.0, False, 9),
    ],
)
def test_both_forms_of_the_generator_draw_what_it_drew_before(lam, mu, clients, size_mu, iid, seed):
    """``fedprox_synthetic`` (per client) and ``stacked_synthetic`` (one array: what the data module holds) give the
    previous generator's rows, bitwise: the committed Synthetic(λ, µ) studies' data are unchanged."""
    want = _reference_synthetic(lam, mu, clients, size_mu, iid, seed)
    per_client = fedprox_synthetic(lam, mu, num_clients=clients, size_mu=size_mu, iid=iid, seed=seed)
    stacked = stacked_synthetic(lam, mu, num_clients=clients, size_mu=size_mu, iid=iid, seed=seed)
    for got, ref in zip((per_client.train_x, per_client.train_y, per_client.test_x, per_client.test_y), want):
        assert len(got) == clients and all(np.array_equal(g, r) and g.dtype == r.dtype for g, r in zip(got, ref))
    for got, ref in zip((stacked.train_x, stacked.train_y, stacked.test_x, stacked.test_y), want):
        assert np.array_equal(got, np.concatenate(ref)) and got.dtype == ref[0].dtype
    assert stacked.train_sizes.tolist() == [len(y) for y in want[1]]
    assert stacked.test_sizes.tolist() == [len(y) for y in want[3]]


def test_smaller_clients_keep_fedproxs_floor_and_the_data_module_passes_them_on():
    """``--data.leaf_size_log_mean 0``: ``⌊LogNormal(0, 2)⌋ + 50`` rows a client (still at least 50, heavy tailed),
    what ``configs/leaf_synthetic/fedavg_10k.yaml`` draws for 10,000 clients."""
    small = stacked_synthetic(1.0, 1.0, num_clients=2000, size_mu=0.0, seed=0)
    sizes = small.train_sizes + small.test_sizes
    assert sizes.min() >= 50 and 50 <= np.median(sizes) <= 52 and 53 < sizes.mean() < 62 and sizes.max() > 300
    dm = FederatedDataModule(dataset="leaf_synthetic", partition="natural", num_clients=300, participation=0.1,
                             batch_size=64, leaf_lambda=1.0, leaf_mu=1.0, leaf_size_log_mean=0.0, seed=4)  # fmt: skip
    drawn = stacked_synthetic(1.0, 1.0, num_clients=300, size_mu=0.0, seed=4)
    assert dm.client_sizes.tolist() == drawn.train_sizes.tolist() and len(dm.splits.test_y) == drawn.test_sizes.sum()
    assert torch.equal(dm.splits.train_x.view(-1, 60), torch.from_numpy(drawn.train_x))


@pytest.mark.parametrize(
    "knobs,text",
    [
        ({"leaf_size_log_std": -1.0}, "leaf_size_log_std=-1.0 must be >= 0"),
        ({"leaf_size_log_mean": 50.0}, "leaf_size_log_mean=50.0 must be in [-20, 20]"),
        ({"leaf_size_log_mean": float("nan")}, "leaf_size_log_mean=nan must be in"),
    ],
)
def test_bad_client_sizes_are_one_line(knobs, text):
    with pytest.raises(ConfigError, match=re.escape(text)):
        FederatedDataModule(dataset="leaf_synthetic", partition="natural", num_clients=20, **knobs)
