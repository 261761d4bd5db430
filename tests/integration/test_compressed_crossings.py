"""Compressed crossings in training: ``configs/digits/scala_topk.yaml`` and ``scala_int8.yaml`` run from the command
line and their activation bytes per round are the hand count against the same run uncompressed; the identity
settings give runs bitwise equal to uncompressed ones; the server trains on what it decodes and the clients
backpropagate what they decode; a resumed run with stochastic rounding equals the uninterrupted one."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from _helpers import REPO, flat_params, quiet_trainer, small_digits
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_sfl.algorithms import SCALA, SplitFedV1
from lightning_sfl.callbacks import CommunicationBytes
from lightning_sfl.compression import Quantise, TopK

#: cnn_small cut at s2 on the 8x8 digits: an activation of 64 x 4 x 4 float32 entries.
WIDTH = 64 * 4 * 4


def _cli_rounds(tmp_path, config: str) -> dict[int, dict[str, str]]:
    from lightning_sfl.lightning_cli import SFLCLI
    from lightning_sfl.process.quiet import quiet_dependencies

    folder = tmp_path / config
    args = ["fit", "--config", str(REPO / "configs" / "digits" / f"{config}.yaml"), "--trainer.max_epochs=2"]
    args += ["--trainer.enable_checkpointing=false", "--trainer.enable_progress_bar=false"]
    args += ["--trainer.logger=lightning.pytorch.loggers.CSVLogger", f"--trainer.logger.save_dir={folder}"]
    quiet_dependencies()
    cli = SFLCLI(args=args)
    assert cli.trainer.current_epoch == 2
    rounds: dict[int, dict[str, str]] = {}
    with open(next(folder.rglob("metrics.csv"))) as f:
        for row in (r for r in csv.DictReader(f) if r.get("epoch")):
            rounds.setdefault(int(row["epoch"]), {}).update({k: v for k, v in row.items() if v != ""})
    return rounds


def test_the_configs_send_the_hand_counted_bytes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dense = _cli_rounds(tmp_path, "scala")
    topk = _cli_rounds(tmp_path, "scala_topk")
    int8 = _cli_rounds(tmp_path, "scala_int8")
    k = math.ceil(0.1 * WIDTH)
    for epoch in (0, 1):
        rows = float(dense[epoch]["comm/up/activations_bytes"]) / (WIDTH * 4)
        assert rows == int(rows) > 0
        assert float(topk[epoch]["comm/up/activations_bytes"]) == rows * k * (4 + 2)  # values + uint16 indices
        assert float(int8[epoch]["comm/up/activations_bytes"]) == rows * (WIDTH + 2 * 4)  # codes + min and step
        for run in (topk, int8):  # the other crossings stay dense
            assert run[epoch]["comm/down/gradients_bytes"] == dense[epoch]["comm/down/gradients_bytes"]
            assert run[epoch]["comm/up/labels_bytes"] == dense[epoch]["comm/up/labels_bytes"]
    assert float(topk[1]["test/acc"]) > 0.3 and float(int8[1]["test/acc"]) > 0.3


def _fit(cls=SCALA, rounds=2, **kwargs):
    torch.manual_seed(0)
    model = cls(local_iters=2, lr=0.05, **kwargs)
    trainer = quiet_trainer(rounds, callbacks=[CommunicationBytes()])
    trainer.fit(model, small_digits())
    return model, trainer


@pytest.mark.parametrize("cls", [SCALA, SplitFedV1])
def test_identity_settings_are_the_uncompressed_run_bitwise(cls):
    plain, dense = _fit(cls)
    same, trainer = _fit(cls, compression=[TopK(ratio=1.0), Quantise(bits=32, crossing="gradients")])
    assert torch.equal(flat_params(plain), flat_params(same))
    for kind in ("comm/up/activations_bytes", "comm/down/gradients_bytes"):
        assert float(trainer.callback_metrics[kind]) == float(dense.callback_metrics[kind]) > 0


class Received(SCALA):
    """SCALA that keeps, per iteration, what its clients computed and what the server received."""

    def client_forward(self, step):
        out = super().client_forward(step)
        self.__dict__.setdefault("computed", []).append(out.detach().clone())
        return out

    def split_losses(self, acts, a, step):
        self.__dict__.setdefault("received", []).append(a.detach().clone())
        return super().split_losses(acts, a, step)


def test_the_server_trains_on_what_it_decodes_and_the_clients_on_what_they_decode():
    model, trainer = _fit(Received, rounds=1, compression=[TopK(ratio=0.1)])
    k = math.ceil(0.1 * WIDTH)
    for computed, received in zip(model.computed, model.received, strict=True):
        computed, received = computed.flatten(1), received.flatten(1)
        threshold = computed.abs().sort(dim=1, descending=True).values[:, k - 1 : k]  # the k-th largest |a|
        kept = computed.abs() > threshold  # every larger entry arrives as it was computed, nothing smaller arrives
        assert torch.equal(received[kept], computed[kept]) and (received[computed.abs() < threshold] == 0).all()
        assert ((received != 0).sum(dim=1) <= k).all()
    plain, dense = _fit(rounds=1)
    compressed, sparse = _fit(rounds=1, compression=[TopK(ratio=0.5, crossing="gradients")])
    assert not torch.equal(flat_params(compressed.client), flat_params(plain.client))  # the clients' gradients differ
    rows = float(dense.callback_metrics["comm/down/gradients_bytes"]) / (WIDTH * 4)
    assert float(sparse.callback_metrics["comm/down/gradients_bytes"]) == rows * math.ceil(0.5 * WIDTH) * (4 + 2)


def test_a_resumed_run_with_stochastic_rounding_is_the_uninterrupted_one(tmp_path):
    from _helpers import trained_checkpoint

    options = dict(compression=[Quantise(bits=2, stochastic=True)])
    full = trained_checkpoint(SCALA, tmp_path / "full", rounds=3, **options)
    trained_checkpoint(SCALA, tmp_path / "part", rounds=2, **options)
    torch.manual_seed(1)
    model = SCALA(local_iters=2, lr=0.05, **options)
    trainer = quiet_trainer(3, enable_checkpointing=True, callbacks=[ModelCheckpoint(dirpath=tmp_path / "resumed")])
    trainer.fit(model, small_digits(), ckpt_path=tmp_path / "part" / "last.ckpt")
    saved = torch.load(full, weights_only=True)["state_dict"]
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items() if k in saved)
