"""Randomised top-k, QSGD and C3-SL's circular convolution against independent computations (numpy sums and the
sequential draws of the paper's rule), their byte counts by hand at two settings each, the gradients a bound batch
sends back, the crossings a scheme refuses, and the subclass-search cache the CLI's parse uses."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lightning_sfl.compression import QSGD, CircularConvolution, Compression, Quantise, RandomTopK, TopK
from lightning_sfl.errors import ConfigError


def _rows(b=6, d=50, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).normal(size=(b, d)).astype(np.float32))


# ------------------------------------------------------------------------------------------------ randomised top-k
@pytest.mark.parametrize("sampling", ["groups", "weights"])
def test_random_topk_sends_exactly_k_distinct_entries_as_they_are(sampling):
    a = _rows(b=200, d=40)
    decoded, sent = RandomTopK(ratio=0.25, alpha=0.3, sampling=sampling).compress(a, torch.Generator().manual_seed(1))
    kept = decoded != 0
    assert (kept.sum(dim=1) == 10).all() and torch.equal(decoded[kept], a[kept])  # values not rescaled
    assert sent == 10 * (4 + 2)  # top-k's bytes: values and uint16 indices


def _sequential_groups(scores: np.ndarray, k: int, alpha: float, rng) -> set[int]:
    """The paper's rule drawn one entry at a time: an undrawn top-k entry with probability (1−α)/N₁ each, another one
    with α/N₂ each."""
    top = set(np.argsort(-np.abs(scores))[:k].tolist())
    left_top, left_other, chosen = sorted(top), sorted(set(range(len(scores))) - top), set()
    for _ in range(k):
        weights = [(1 - alpha) / len(left_top)] * len(left_top) if left_top else []
        weights += [alpha / len(left_other)] * len(left_other) if left_other else []
        weights = np.array(weights) / sum(weights)
        pick = rng.choice(len(weights), p=weights)
        item = (left_top + left_other)[pick]
        (left_top if item in top else left_other).remove(item)
        chosen.add(item)
    return chosen


def test_random_topk_draws_non_top_entries_as_often_as_the_papers_sequential_rule():
    """The share of non-top-k entries sent, vectorised draws vs the sequential rule (numpy), within 4 standard
    errors; α = 0.2, k = 5 of 12 (the non-top group can run out: the cap is exercised)."""
    rows = _rows(b=4000, d=12, seed=3)
    decoded, _ = RandomTopK(ratio=5 / 12, alpha=0.2).compress(rows, torch.Generator().manual_seed(0))
    top = torch.zeros_like(rows, dtype=torch.bool).scatter_(1, rows.abs().topk(5, dim=1).indices, True)
    ours = ((decoded != 0) & ~top).sum(dim=1).double()
    rng = np.random.default_rng(0)
    reference = []
    for r in rows.numpy()[:1500]:
        top_set = set(np.argsort(-np.abs(r))[:5].tolist())
        reference.append(len(_sequential_groups(r, 5, 0.2, rng) - top_set))
    reference = np.array(reference, dtype=float)
    error = math.sqrt(ours.var().item() / len(ours) + reference.var() / len(reference))
    assert abs(ours.mean().item() - reference.mean()) < 4 * error
    assert abs(ours.mean().item() - 5 * 0.2) < 0.1  # E = k·α


def test_random_topk_is_plain_topk_at_evaluation_and_draws_in_training():
    a = _rows()
    compressor = RandomTopK(ratio=0.2, alpha=0.5)
    assert torch.equal(compressor.evaluate(a), TopK(ratio=0.2).compress(a)[0])
    drawn = compressor.compress(a, torch.Generator().manual_seed(0))[0]
    assert not torch.equal(drawn, compressor.evaluate(a)) and compressor.draws


def test_random_topk_gradient_goes_through_what_was_sent():
    a = _rows().requires_grad_(True)
    decoded, _ = RandomTopK(ratio=0.2, alpha=0.5).compress(a, torch.Generator().manual_seed(0))
    decoded.sum().backward()
    assert torch.equal(a.grad, (decoded != 0).float())


# ------------------------------------------------------------------------------------------------ QSGD
def test_qsgd_is_unbiased_on_its_levels_and_rounds_to_nearest_at_evaluation():
    v = _rows(b=1, d=30, seed=5).double()
    compressor = QSGD(levels=3)
    draws = torch.stack([compressor.compress(v, torch.Generator().manual_seed(i))[0] for i in range(4000)])
    norm = v.norm().item()
    levels = draws.abs() / norm * 3
    assert torch.allclose(levels, levels.round(), atol=1e-9)  # on the levels l/s
    assert torch.equal(torch.sign(draws[draws != 0]), torch.sign(v.expand_as(draws)[draws != 0]))
    spread = draws.std(dim=0) / math.sqrt(len(draws))
    assert ((draws.mean(dim=0) - v).abs() <= 5 * spread + 1e-12).all()  # unbiased
    nearest = norm * np.sign(v.numpy()) * np.round(3 * np.abs(v.numpy()) / norm) / 3
    assert np.allclose(compressor.evaluate(v).numpy(), nearest)


def test_qsgd_counts_the_norm_and_a_sign_and_level_an_entry_packed():
    assert QSGD(levels=1).compress(torch.ones(2, 1000))[1] == 4 + 1000 * 2 // 8  # ternary: 2 bits an entry
    assert QSGD(levels=4).compress(torch.ones(1, 10, dtype=torch.float64))[1] == 8 + math.ceil(10 * 4 / 8)  # 1+3 bits


# ------------------------------------------------------------------------------------------------ C3-SL
def _numpy_c3sl(rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Bind each group of R rows by circular convolution (direct sums), sum, unbind by circular correlation."""
    r, d = keys.shape
    out = []
    for start in range(0, len(rows), r):
        group = rows[start : start + r]
        group = np.vstack([group, np.zeros((r - len(group), d))])
        bound = np.zeros(d)
        for i in range(r):
            for n in range(d):
                bound[n] += sum(keys[i, m] * group[i, (n - m) % d] for m in range(d))
        for i in range(min(r, len(rows) - start)):
            out.append([sum(keys[i, m] * bound[(n + m) % d] for m in range(d)) for n in range(d)])
    return np.array(out)


@pytest.mark.parametrize("unit_keys", [False, True])
def test_c3sl_binds_and_unbinds_as_the_direct_sums_do(unit_keys):
    compressor = CircularConvolution(group=3, key_seed=4, unit_keys=unit_keys)
    rows = _rows(b=5, d=16, seed=2).double()
    decoded, sent = compressor.compress(rows, sizes=torch.tensor([5]))
    keys = compressor.keys(16, torch.float64, torch.device("cpu")).numpy()
    assert np.allclose(decoded.numpy(), _numpy_c3sl(rows.numpy(), keys), atol=1e-10)
    norms = np.linalg.norm(keys, axis=1)
    assert np.allclose(norms, 1.0) if unit_keys else not np.allclose(norms, 1.0)
    assert sent.tolist() == [2 * 16 * 8]  # 5 rows in 2 groups of 3: two float64 vectors


def test_c3sl_groups_within_each_clients_rows_and_counts_a_vector_a_group():
    compressor = CircularConvolution(group=2)
    rows = _rows(b=8, d=32)
    decoded, sent = compressor.compress(rows, sizes=torch.tensor([3, 5]))
    assert sent.tolist() == [2 * 32 * 4, 3 * 32 * 4]
    alone, _ = compressor.compress(rows[3:], sizes=torch.tensor([5]))
    assert torch.allclose(decoded[3:], alone)  # the second client's rows are bound with its own only


def test_c3sl_sends_back_gradients_bound_the_same_way():
    """∂L/∂a_r = k_r ⋆ (Σ_r' k_r' ⊛ ∂L/∂â_r'): what autograd gives the client is C3-SL's gradient of one group."""
    compressor = CircularConvolution(group=2, key_seed=1)
    rows = _rows(b=2, d=16, seed=1).double().requires_grad_(True)
    decoded, _ = compressor.compress(rows)
    upstream = _rows(b=2, d=16, seed=9).double()
    (decoded * upstream).sum().backward()
    keys = compressor.keys(16, torch.float64, torch.device("cpu")).numpy()
    assert np.allclose(rows.grad.numpy(), _numpy_c3sl(upstream.numpy(), keys), atol=1e-10)
    gradients, sent = Compression([compressor]).compress("gradients", upstream, sizes=torch.tensor([2]))
    assert gradients is upstream and sent.tolist() == [16 * 8]  # one vector down for the group


def test_c3sl_reads_back_an_estimate_of_each_row():
    rows = _rows(b=64, d=1024, seed=0)
    decoded, _ = CircularConvolution(group=2).compress(rows)
    cosine = torch.nn.functional.cosine_similarity(decoded, rows, dim=1)
    assert 0.5 < cosine.mean() < 0.7  # about 1/sqrt(3): the bound partner and the key's own echo add noise


# ------------------------------------------------------------------------------------------------ crossings
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RandomTopK(ratio=1), "RandomTopK: ratio=1 sends every entry"),
        (lambda: RandomTopK(alpha=0), "alpha=0 must be in (0, 1]"),
        (lambda: RandomTopK(sampling="gumbel"), "sampling='gumbel' must be one of: groups, weights"),
        (lambda: QSGD(levels=0), "QSGD: levels=0 must be an integer from 1 to 32768"),
        (lambda: CircularConvolution(group=1), "group=1 must be an integer >= 2"),
        (lambda: CircularConvolution(crossing="model"), "crossing='model' must be activations or body_outputs"),
        (
            lambda: Compression([CircularConvolution(), TopK(crossing="gradients")]).check(),
            "CircularConvolution carries the gradients back in its encoding",
        ),
    ],
)
def test_bad_settings_are_one_line(make, message):
    with pytest.raises(ConfigError, match="^[^\n]*$") as err:
        make()
    assert message in str(err.value)


def test_draws_and_groups_of_rows_run_on_one_process_the_model_exchanges_on_several():
    assert Compression([TopK(), Quantise(bits=8, crossing="gradients")]).one_process_only() is None
    assert "RandomTopK on the activations" in Compression([RandomTopK()]).one_process_only()
    assert "CircularConvolution" in Compression([CircularConvolution()]).one_process_only()
    assert Compression([QSGD(crossing="model")]).one_process_only() is None
    from lightning_sfl.algorithms import SCALA

    assert "Quantise on the activations" in SCALA(compression=[Quantise(stochastic=True)]).one_process_only()


# ------------------------------------------------------------------------------------------------ the CLI's cache
def test_the_subclass_search_cache_sees_classes_of_modules_imported_since(tmp_path, monkeypatch):
    import sys

    from jsonargparse import _typehints

    from lightning_sfl.subclass_cache import cache_subclass_searches

    cache_subclass_searches()
    assert _typehints.get_all_subclass_paths.cached
    before = _typehints.get_all_subclass_paths(TopK)
    (tmp_path / "my_sparse_scheme.py").write_text(
        "from lightning_sfl.compression import TopK\nclass HalfTopK(TopK):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_sparse_scheme  # noqa: F401

    after = _typehints.get_all_subclass_paths(TopK)
    assert "my_sparse_scheme.HalfTopK" in after and "my_sparse_scheme.HalfTopK" not in before
    assert after[: len(before)] == before
    monkeypatch.delitem(sys.modules, "my_sparse_scheme")
