"""FedRS: the restricted softmax by hand, both scalings, α = 1 equals FedAvg, and a lower α moves the
classifier rows of missing classes less."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from _helpers import quiet_trainer, round_steps, small_digits

from lightning_sfl.algorithms.fedavg import FedAvg
from lightning_sfl.algorithms.fedrs import FedRS, fedrs_scale
from lightning_sfl.errors import ConfigError


def _fit(cls, **kwargs):
    torch.manual_seed(0)
    model = cls(local_iters=2, lr=0.1, **kwargs)
    model0 = copy.deepcopy(model)
    quiet_trainer(2, limit_val_batches=0).fit(model, small_digits())
    return model0, model


def test_scalings_by_hand():
    counts = torch.tensor([[10.0, 0.0, 5.0, 1.0], [0.0, 3.0, 3.0, 0.0]])
    torch.testing.assert_close(fedrs_scale(counts, 0.2, "binary"), torch.tensor([[1, 0.2, 1, 1], [0.2, 1, 1, 0.2]]))
    graded = fedrs_scale(counts, 0.2, "graded")
    want = [[1.0, 0.2, 0.2 + 0.8 * 0.5, 0.2 + 0.8 * 0.1], [0.2, 1.0, 1.0, 0.2]]
    torch.testing.assert_close(graded, torch.tensor(want))
    with pytest.raises(ConfigError, match="scaling='soft' is not one of: binary, graded"):
        FedRS(scaling="soft")
    with pytest.raises(ConfigError, match=r"rs_alpha=1.5 must be in \[0, 1\]"):
        FedRS(rs_alpha=1.5)


def test_row_loss_is_the_restricted_softmax_of_the_paper():
    """``CE(α_c·w_cᵀh + b_c)`` computed from the classifier's weights on the features, by hand."""
    _, model = _fit(FedRS, rs_alpha=0.3)  # bound to the federation, with trained weights
    dm = small_digits()
    step = round_steps(dm, 0)[0]
    step = step.replace(x=dm.splits.to_float(step.x))
    feats, logits = model.bank.forward_features(step.x, step.local_sizes, step.slots)
    last = len(model.client.net) - 1
    counts = model.client_counts(step)
    want = []
    for i in range(len(step.y)):
        k = int(step.owner[i])
        params = dict(model.bank.slots[int(step.slots_tensor[k])].named_parameters())  # the client's own copy
        alpha_c = torch.where(counts[k] > 0, 1.0, 0.3)
        z = alpha_c * (params[f"{last}.weight"] @ feats[i].flatten()) + params[f"{last}.bias"]
        want.append(F.cross_entropy(z[None], step.y[i : i + 1]))
    torch.testing.assert_close(model.row_loss(logits, step), torch.stack(want), rtol=1e-5, atol=1e-6)


def test_alpha_one_equals_fedavg_and_a_lower_alpha_moves_missing_rows_less():
    _, ref = _fit(FedAvg)
    _, same = _fit(FedRS, rs_alpha=1.0)
    for (n, p), q in zip(same.client.net.named_parameters(), ref.client.net.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6, msg=n)
    for scaling in ("binary", "graded"):
        _, other = _fit(FedRS, rs_alpha=0.1, scaling=scaling)
        diff = max(
            (p - q).abs().max().item() for p, q in zip(other.client.net.parameters(), ref.client.net.parameters())
        )
        assert diff > 1e-4, scaling
