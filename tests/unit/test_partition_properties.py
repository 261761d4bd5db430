"""Property tests (hypothesis) for the partitioners over random client counts, class counts, skews and sizes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lightning_sfl.data.partition import dirichlet, iid, quantity, shards

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")  # numpy NaN/overflow warnings are bugs here


@st.composite
def labelled_data(draw):
    """Labels ``[n]`` with ``num_classes`` classes (every class present), unbalanced sizes."""
    num_classes = draw(st.integers(2, 12))
    per_class = draw(st.lists(st.integers(1, 60), min_size=num_classes, max_size=num_classes))
    seed = draw(st.integers(0, 2**16))
    y = np.repeat(np.arange(num_classes), per_class)
    y = y[np.random.default_rng(seed).permutation(len(y))]
    return torch.as_tensor(y), num_classes


def _check_disjoint(parts, n):
    idx = torch.cat(parts)
    assert len(torch.unique(idx)) == len(idx), "a sample was used twice"
    assert int(idx.min()) >= 0 and int(idx.max()) < n
    assert all(len(p) > 0 for p in parts)


def _deterministic(fn, *args):
    a, b = fn(*args), fn(*args)
    assert all(torch.equal(p, q) for p, q in zip(a, b))
    return a


@SETTINGS
@given(data=labelled_data(), num_clients=st.integers(1, 40), alpha=st.integers(1, 12), seed=st.integers(0, 99))
def test_quantity_properties(data, num_clients, alpha, seed):
    y, num_classes = data
    try:
        parts = _deterministic(quantity, y, num_clients, alpha, seed)
    except ValueError as err:  # only for impossible requests, with a clear message
        msg = str(err)
        assert ("alpha=" in msg or "num_clients=" in msg) and "\n" not in msg
        too_many_classes = alpha > num_classes
        too_many_portions = any(
            int((y == c).sum()) < -(-num_clients * alpha // num_classes) for c in range(num_classes)
        )
        assert too_many_classes or too_many_portions or num_clients > len(y)
        return
    _check_disjoint(parts, len(y))
    assert all(len(torch.unique(y[p])) <= alpha for p in parts), "quantity skew must honour alpha"
    if num_clients * alpha >= num_classes:
        assert sum(len(p) for p in parts) == len(y), "every sample is used when every class has a portion"


@SETTINGS
@given(data=labelled_data(), num_clients=st.integers(1, 30), beta=st.floats(0.01, 100.0), seed=st.integers(0, 99))
def test_dirichlet_properties(data, num_clients, beta, seed):
    y, _ = data
    try:
        parts = _deterministic(dirichlet, y, num_clients, beta, seed)
    except ValueError as err:
        assert "empty" in str(err) or "num_clients=" in str(err)
        return
    _check_disjoint(parts, len(y))
    assert sum(len(p) for p in parts) == len(y)


@SETTINGS
@given(data=labelled_data(), num_clients=st.integers(1, 30), per_client=st.integers(1, 4), seed=st.integers(0, 99))
def test_shards_and_iid_properties(data, num_clients, per_client, seed):
    y, _ = data
    try:
        parts = _deterministic(shards, y, num_clients, per_client, seed)
    except ValueError as err:
        assert "shards" in str(err) or "num_clients=" in str(err)
        assert num_clients * per_client > len(y)
    else:
        _check_disjoint(parts, len(y))
        assert len({len(p) for p in parts}) == 1
    if num_clients <= len(y):
        _check_disjoint(_deterministic(iid, y, num_clients, seed), len(y))
    else:
        with pytest.raises(ValueError, match="num_clients="):
            iid(y, num_clients, seed)
