"""Compression beyond the activations: the clients' model updates (the ``model`` crossing, FL methods too), error
feedback kept per client, U-shaped runs' four crossings and C3-SL's bound batches — the server's average against an
independent one of the decoded updates, bytes by hand against the uncompressed run, identity settings bitwise, exact
resume with the residuals, and the ratio the communication callback logs."""

from __future__ import annotations

import math

import pytest
import torch
from _helpers import flat_params, quiet_trainer, small_digits, trained_checkpoint
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_sfl.algorithms import SCALA, FedAvg, SplitFedV1
from lightning_sfl.callbacks import CommunicationBytes
from lightning_sfl.compression import QSGD, CircularConvolution, Quantise, TopK
from lightning_sfl.compression.functional import topk_decode, topk_encode
from lightning_sfl.runtime.aggregate import normalized_weights

#: cnn_small cut at s2 on the 8x8 digits: an activation of 64 x 4 x 4 float32 entries.
WIDTH = 64 * 4 * 4


def _fit(cls=FedAvg, rounds=2, **kwargs):
    torch.manual_seed(0)
    model = cls(local_iters=2, lr=0.05, **kwargs)
    trainer = quiet_trainer(rounds, callbacks=[CommunicationBytes()])
    trainer.fit(model, small_digits())
    return model, trainer


class Watched(FedAvg):
    """FedAvg that keeps, at each aggregation, the global model before it, the clients' models and their weights."""

    def aggregate(self, step):
        self.__dict__.setdefault("seen", []).append(
            (flat_params(self.client.net).clone(), [flat_params(s).clone() for s in self.bank.slots],
             self.aggregation_weights(step).clone())
        )  # fmt: skip
        super().aggregate(step)
        self.seen[-1] += (flat_params(self.client.net).clone(),)


def test_the_server_averages_the_decoded_updates_and_counts_their_bytes():
    model, trainer = _fit(Watched, rounds=1, compression=[TopK(ratio=0.1, crossing="model")])
    start, clients, weights, after = model.seen[0]
    updates = torch.stack(clients) - start
    k = math.ceil(0.1 * len(start))
    decoded = topk_decode(*topk_encode(updates, k), len(start))
    p = normalized_weights(weights)
    expected = (start.double() + (p[:, None] * decoded.double()).sum(0)).float()
    assert torch.equal(after, expected)
    plain, dense = _fit(rounds=1)
    full = float(dense.callback_metrics["comm/up/full_model_bytes"])  # cnn_small: parameters only, no buffers
    per_client = full / len(clients)
    assert per_client == len(start) * 4
    assert float(trainer.callback_metrics["comm/up/full_model_bytes"]) == len(clients) * k * (4 + 4)  # int32 indices
    assert float(trainer.callback_metrics["comm/up/full_model_ratio"]) == pytest.approx(per_client / (k * 8))
    assert "comm/up/full_model_ratio" not in dense.callback_metrics


@pytest.mark.parametrize("cls", [FedAvg, SplitFedV1])
def test_identity_settings_of_the_model_exchange_are_the_uncompressed_run_bitwise(cls):
    plain, dense = _fit(cls)
    same, trainer = _fit(cls, compression=[TopK(ratio=1.0, crossing="model")])
    assert torch.equal(flat_params(plain), flat_params(same))
    kind = "comm/up/full_model_bytes" if cls is FedAvg else "comm/up/client_half_bytes"
    assert float(trainer.callback_metrics[kind]) == float(dense.callback_metrics[kind]) > 0


def test_error_feedback_keeps_what_each_clients_encoding_left_out():
    model, _ = _fit(Watched, rounds=1, compression=[TopK(ratio=0.05, crossing="model", error_feedback=True)])
    start, clients, _, _ = model.seen[0]
    k = math.ceil(0.05 * len(start))
    store = model.exchange_residuals
    assert store.rows_held() == len(clients)
    residuals = store[store.clients_held()]
    updates = torch.stack(clients) - start
    kept = topk_decode(*topk_encode(updates, k), len(start))
    expected = updates - kept  # the first round: e = Δ − decode(encode(Δ))
    assert torch.allclose(residuals.sort(dim=0).values, expected.sort(dim=0).values)


def test_a_resumed_run_with_error_feedback_and_stochastic_levels_is_the_uninterrupted_one(tmp_path):
    options = dict(compression=[QSGD(levels=2, crossing="model", error_feedback=True)])
    full = trained_checkpoint(FedAvg, tmp_path / "full", rounds=3, **options)
    trained_checkpoint(FedAvg, tmp_path / "part", rounds=2, **options)
    torch.manual_seed(1)
    model = FedAvg(local_iters=2, lr=0.05, **options)
    trainer = quiet_trainer(3, enable_checkpointing=True, callbacks=[ModelCheckpoint(dirpath=tmp_path / "resumed")])
    trainer.fit(model, small_digits(), ckpt_path=tmp_path / "part" / "last.ckpt")
    saved = torch.load(full, weights_only=False)["state_dict"]
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items() if k in saved)
    uninterrupted = FedAvg.load_from_checkpoint(full, weights_only=False)
    assert torch.equal(flat_params(uninterrupted.client), flat_params(model.client))
    held = model.exchange_residuals.clients_held()
    assert len(held) > 0 and torch.equal(uninterrupted.exchange_residuals[held], model.exchange_residuals[held])


def test_u_shaped_runs_compress_their_four_crossings_and_count_them_by_hand():
    plain, dense = _fit(SCALA, rounds=1, tail_point="s4")
    given = [
        TopK(ratio=0.5),
        Quantise(bits=8, crossing="body_outputs"),
        Quantise(bits=4, crossing="body_gradients"),
        TopK(ratio=0.25, crossing="gradients"),
    ]
    model, trainer = _fit(SCALA, rounds=1, tail_point="s4", compression=given)
    got, want = trainer.callback_metrics, dense.callback_metrics
    rows = float(want["comm/up/activations_bytes"]) / (WIDTH * 4)
    body = float(want["comm/down/body_outputs_bytes"]) / rows / 4  # entries of a body output
    assert float(got["comm/up/activations_bytes"]) == rows * math.ceil(0.5 * WIDTH) * 6
    assert float(got["comm/down/body_outputs_bytes"]) == rows * (body + 8)
    assert float(got["comm/up/body_gradients_bytes"]) == rows * (math.ceil(body * 4 / 8) + 8)
    assert float(got["comm/down/gradients_bytes"]) == rows * math.ceil(0.25 * WIDTH) * 6
    assert not torch.equal(flat_params(model), flat_params(plain))
    identity = [TopK(ratio=1.0, crossing=c) for c in ("activations", "body_outputs", "body_gradients", "gradients")]
    same, _ = _fit(SCALA, rounds=1, tail_point="s4", compression=identity)
    assert torch.equal(flat_params(same), flat_params(plain))


def test_c3sl_sends_a_vector_for_each_group_of_a_clients_rows_both_ways():
    model, trainer = _fit(SCALA, rounds=1, compression=[CircularConvolution(group=4)])
    plain, dense = _fit(SCALA, rounds=1)
    up, down = (float(trainer.callback_metrics[f"comm/{k}_bytes"]) for k in ("up/activations", "down/gradients"))
    full = float(dense.callback_metrics["comm/up/activations_bytes"])
    assert up == down and 3 < full / up <= 4  # a client's last group may hold fewer than 4 rows
    for kind in ("up/activations", "down/gradients"):
        assert float(trainer.callback_metrics[f"comm/{kind}_ratio"]) == pytest.approx(full / up)
    assert not torch.equal(flat_params(model.client), flat_params(plain.client))
