"""U-shaped split learning (``--model.tail_point``, :mod:`lightning_sfl.runtime.u_shape`): the identity with the
plain split and with FedAvg at every tail point, the body's objective against the plain server's, no label reaching
a server-side computation, the bytes of the two new crossings, exact resume, and one-line errors."""

from __future__ import annotations

import pytest
import torch
from _helpers import extended_params, quiet_trainer
from test_algorithms import _dm, train

from lightning_sfl.algorithms import ALGORITHMS, SCALA, MiniBatchSFL, SplitFedV1
from lightning_sfl.errors import ConfigError
from lightning_sfl.models import build_model, split_model
from lightning_sfl.models.split import tail_points
from lightning_sfl.runtime.aggregate import flat_parameters

#: cnn_small cut at s2: the tail points that leave weights in the body and in the tail.
TAIL_POINTS = ("s3", "s4", "s5")


def _weights(model) -> torch.Tensor:
    """The global model's weights, layer after layer (head, body, tail; or client half, server half)."""
    parts = [model.client, model.server] + ([model.tail] if getattr(model, "tail", None) is not None else [])
    return torch.cat([p.detach().flatten() for part in parts for p in part.parameters()])


def test_the_tail_points_of_cnn_small_cut_at_s2():
    model = build_model("cnn_small", 10, (1, 8, 8))
    _, server = split_model(model, "s2")
    assert tail_points(model.cut_points, "s2", server) == list(TAIL_POINTS)
    _, server = split_model(model, "s4")  # the body would be Flatten alone: no weights
    assert tail_points(model.cut_points, "s4", server) == ["s5"]


@pytest.mark.parametrize("bank", ["sequential", "stacked"])
@pytest.mark.parametrize("tail_point", extended_params(TAIL_POINTS, {"s3", "s5"}))  # CI: s4; -m extended: all three
def test_u_shaped_splitfedv1_equals_splitfedv1_and_fedavg(tail_point, bank):
    """With a copy of the body per client, each client's head, body copy and tail train on its own loss: FedAvg on
    the unsplit model (plain SGD, float64), as SplitFedV1 is."""
    u, _ = train("splitfedv1", rounds=2, precision="64-true", tail_point=tail_point, client_bank=bank)
    plain, _ = train("splitfedv1", rounds=2, precision="64-true", client_bank=bank)
    fedavg, _ = train("fedavg", rounds=2, precision="64-true", client_bank=bank)
    assert u.u_shaped and not plain.u_shaped
    torch.testing.assert_close(_weights(u), _weights(plain), rtol=0, atol=1e-12)
    torch.testing.assert_close(_weights(u), _weights(fedavg), rtol=0, atol=1e-12)


def test_one_iteration_of_u_shaped_minibatch_sfl_trains_head_and_body_as_the_plain_server_does():
    """One body trains on ``Σ_k (B_k/B)·L_k``, the mean over the concatenated batch that trains the plain server half,
    and the heads get ``∂(Σ_k L_k)/∂A``: after one iteration (every tail still the global one) heads and body equal
    plain MiniBatch-SFL's; the tails, each trained on its own client's loss and then averaged with weights ``|D_k|``,
    differ from the server's tail, trained on the mean."""
    u, _ = train(MiniBatchSFL, rounds=1, local_iters=1, precision="64-true", tail_point="s4", dm=_dm())
    plain, _ = train(MiniBatchSFL, rounds=1, local_iters=1, precision="64-true", dm=_dm())

    def head_and_body(m):
        return torch.cat([p.detach().flatten() for p in [*m.client.parameters(), *m.server.parameters()]])

    n = sum(p.numel() for p in [*u.client.parameters(), *u.server.parameters()])
    torch.testing.assert_close(head_and_body(u), head_and_body(plain)[:n], rtol=0, atol=1e-12)
    assert not torch.allclose(_weights(u)[n:], _weights(plain)[n:], rtol=0, atol=1e-9)


@pytest.mark.parametrize("pooled", [False, True])
def test_no_label_reaches_a_server_side_computation(pooled):
    """The server's hooks and the body's layers see activations and row counts, never a label: ``server_forward``
    gets a step without ``y`` and ``label_counts``, nothing calls the server's loss, and no tensor the body's layers
    take in is a label tensor."""
    seen = []

    class Instrumented(SCALA):
        def server_forward(self, a, step):
            seen.append(("server_forward", step.y, step.label_counts))
            return super().server_forward(a, step)

        def server_loss(self, logits, step):
            seen.append(("server_loss",))
            return super().server_loss(logits, step)

    torch.manual_seed(0)
    model = Instrumented(local_iters=2, lr=0.05, tail_point="s4", pooled_label_counts=pooled)
    inputs = []
    for layer in model.server.net:
        layer.register_forward_pre_hook(lambda module, args: inputs.extend(args))
    dm = _dm()
    quiet_trainer(1).fit(model, dm)
    assert seen and all(call == ("server_forward", None, None) for call in seen)
    assert inputs and all(t.is_floating_point() and t.dim() > 1 for t in inputs)


def test_the_two_new_crossings_are_counted_and_labels_stay_home():
    """Per iteration, ``H`` ``[B, 256]`` down and ``∂L/∂H`` up (cnn_small's body output at s4: 64·2·2 float32
    values a row), no labels up; with pooled label counts, ``N`` counts up and ``P_s`` down per client, and a
    second gradient up."""
    rows, iterations = 24, 3
    _, trainer = train("scala", rounds=1, local_iters=iterations, tail_point="s4")
    m = {k: float(v) for k, v in trainer.callback_metrics.items()}
    assert m["comm/down/body_outputs_bytes"] == m["comm/up/body_gradients_bytes"] == rows * iterations * 256 * 4
    assert "comm/up/labels_bytes" not in m and m["comm/up/activations_bytes"] == rows * iterations * 64 * 4 * 4 * 4
    _, trainer = train("scala", rounds=1, local_iters=iterations, tail_point="s4", pooled_label_counts=True)
    m = {k: float(v) for k, v in trainer.callback_metrics.items()}
    clients = 4
    assert m["comm/up/body_gradients_bytes"] == 2 * rows * iterations * 256 * 4
    assert m["comm/up/label_counts_bytes"] == clients * iterations * 10 * 8
    assert m["comm/down/label_prior_bytes"] == clients * iterations * 10 * 4


def test_pooled_label_counts_train_the_body_on_eq_14():
    """With ``P_s`` (eq. 14) the body trains otherwise than on the clients' eq.-15 losses."""
    plain, _ = train("scala", rounds=1, local_iters=2, precision="64-true", tail_point="s4")
    pooled, _ = train("scala", rounds=1, local_iters=2, precision="64-true", tail_point="s4", pooled_label_counts=True)
    assert not torch.allclose(_weights(plain), _weights(pooled))


@pytest.mark.parametrize(
    ("switches", "message"),
    [
        (
            {"pooled_label_counts": True, "server_logit_adjustment": False},
            "pooled_label_counts=True needs server_logit_adjustment=True: without it the server uses no P_s",
        ),
        ({"pooled_label_counts": True, "concat_activations": False}, "pooled_label_counts=True needs concat_activ"),
        ({"server_logit_adjustment": False}, "server_logit_adjustment=False changes nothing in U-shaped SCALA"),
    ],
)
def test_u_shaped_scala_refuses_the_switches_that_change_nothing(switches, message):
    """Without the server-side adjustment, or with a body copy per client, the body uses no ``P_s``: the clients would
    send their counts for nothing (and the label attack would credit the server with them); without the counts the
    body trains on the clients' losses, and the server-side switch has nothing to adjust (issue 67)."""
    with pytest.raises(ConfigError, match=message):
        SCALA(tail_point="s4", **switches)


U_SHAPED = sorted(name for name, cls in ALGORITHMS.items() if getattr(cls, "supports_tail", False))


def test_the_methods_that_run_u_shaped():
    assert U_SHAPED == ["ca_sfl", "cs_sfl", "lla_sfl", "minibatch_sfl", "scala", "splitfedv1", "splitfedv2"]


#: Left to ``-m extended``: the methods that differ from one in CI by their server copies or their selection only.
U_SHAPED_EXTENDED = {"ca_sfl", "cs_sfl", "lla_sfl", "minibatch_sfl"}


@pytest.mark.parametrize("name", extended_params(U_SHAPED, U_SHAPED_EXTENDED))
def test_every_u_shaped_method_trains_and_its_global_model_ends_in_the_tail(name):
    model, trainer = train(name, tail_point="s5")
    assert model.u_shaped and trainer.global_step == 2 * 2
    assert torch.isfinite(_weights(model)).all()
    x = torch.randn(3, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(model(x), model.tail(model.server(model.client(x))))
    assert 0.0 <= float(trainer.callback_metrics["test/acc"]) <= 1.0


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: SplitFedV1(tail_point="s2"), "tail_point='s2' must be a cut point deeper than split_point='s2'"),
        (lambda: SplitFedV1(tail_point="s9"), "valid: s3, s4, s5"),
        (lambda: SplitFedV1(split_point="s5", tail_point="s5"), "valid: none"),
        (lambda: ALGORITHMS["splitfedv3"](tail_point="s4"), "SplitFedV3 does not run U-shaped"),
        (lambda: ALGORITHMS["gas"](tail_point="s4"), "GAS does not run U-shaped"),
        (lambda: SCALA(pooled_label_counts=True), "pooled_label_counts=true is an option of U-shaped SCALA"),
    ],
)
def test_bad_tail_options_are_one_line(build, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()


@pytest.mark.parametrize("aggregation", ["server", "none"])
def test_resume_at_a_round_boundary_is_exact(aggregation, tmp_path):
    """U-shaped SCALA with momentum (the tails' optimiser state too; ``none``: every client's own tail in its store):
    2 rounds, then 2 more from the checkpoint, equal to 4 uninterrupted rounds, bitwise."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from lightning_sfl.runtime.state import dense_client_states

    def fit(rounds: int, folder, ckpt_path=None):
        torch.manual_seed(0)
        model = SCALA(
            local_iters=2,
            lr=0.05,
            momentum=0.5,
            tail_point="s4",
            pooled_label_counts=True,
            tail_aggregation=aggregation,
        )
        trainer = L.Trainer(
            max_epochs=rounds,
            logger=False,
            callbacks=[ModelCheckpoint(dirpath=folder, save_last=True)],
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(model, _dm(), ckpt_path=ckpt_path)
        return model

    full = fit(4, tmp_path / "full")
    fit(2, tmp_path / "part")
    resumed = fit(4, tmp_path / "part", ckpt_path=str(tmp_path / "part" / "last.ckpt"))
    want, got = full.state_dict(), resumed.state_dict()
    assert want.keys() == got.keys() and any(k.startswith("tail.") for k in want)
    for key, value in want.items():
        assert torch.equal(value, got[key]), key
    stores, resumed_stores = dense_client_states(full), dense_client_states(resumed)
    assert ("client_tails" in stores) == (aggregation == "none")
    for key, value in stores.items():
        assert torch.equal(value, resumed_stores[key]), key


def test_scala_runs_u_shaped_from_the_command_line(tmp_path, monkeypatch):
    """``lightning-sfl fit --config configs/digits/scala.yaml --model.tail_point s4`` (two rounds, its CSV log): the run
    records the option, trains, sends no labels, and warns about nothing."""
    import csv
    import warnings

    from _helpers import REPO

    from lightning_sfl.lightning_cli import SFLCLI
    from lightning_sfl.process.quiet import quiet_dependencies

    monkeypatch.chdir(tmp_path)
    args = ["fit", "--config", str(REPO / "configs" / "digits" / "scala.yaml"), "--model.tail_point", "s4"]
    args += ["--trainer.max_epochs=2", "--trainer.enable_checkpointing=false", "--trainer.enable_progress_bar=false"]
    args += ["--trainer.logger=lightning.pytorch.loggers.CSVLogger", f"--trainer.logger.save_dir={tmp_path}"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_dependencies()
        cli = SFLCLI(args=args)
    assert [str(w.message) for w in caught if not issubclass(w.category, DeprecationWarning)] == []
    assert cli.model.u_shaped and cli.model.hparams.tail_point == "s4" and cli.trainer.current_epoch == 2
    with open(next(tmp_path.rglob("metrics.csv"))) as f:
        rows = list(csv.DictReader(f))
    assert len([r for r in rows if r.get("test/acc")]) == 2
    assert [float(r["comm/down/body_outputs_bytes"]) > 0 for r in rows if r.get("comm/down/body_outputs_bytes")] == [
        True,
        True,
    ]
    assert "comm/up/labels_bytes" not in rows[0]


def test_who_averages_the_tails():
    """``separate``: the same averages as ``server`` (only who computes them differs), bitwise; ``none``: with one
    client the same run, with several the tails stay each client's own (a row per trained client), the evaluated tail
    their ``|D_k|`` mean, and no tail crosses the network."""
    kw = {"rounds": 2, "precision": "64-true", "tail_point": "s4"}
    server, t_server = train("splitfedv1", **kw)
    separate, _ = train("splitfedv1", tail_aggregation="separate", **kw)
    assert torch.equal(_weights(server), _weights(separate))
    one = {"num_clients": 1, "participation": 1.0, "batch_size": 16}
    a, _ = train("splitfedv1", dm=_dm(**one), **kw)
    b, _ = train("splitfedv1", dm=_dm(**one), tail_aggregation="none", **kw)
    torch.testing.assert_close(_weights(a), _weights(b), rtol=0, atol=1e-12)
    kept, t_kept = train("splitfedv1", tail_aggregation="none", **kw)
    tails = kept.client_tails.dense()
    assert tails.shape[0] == 8 and len({tuple(t[:4].tolist()) for t in tails}) > 2
    w = kept.client_sizes.double()
    torch.testing.assert_close(flat_parameters(kept.tail.net).detach(), (w @ tails) / w.sum())
    head = sum(v.numel() * 8 for v in kept.client.net.state_dict().values())  # float64 bytes of a head
    down = "comm/down/client_half_bytes"  # the last round's: 4 clients
    assert float(t_kept.callback_metrics[down]) == 4 * head  # their heads only
    assert float(t_server.callback_metrics[down]) > 4 * head


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"tail_point": "s4", "tail_aggregation": "nobody"},
            "tail_aggregation='nobody' must be one of: server, separate, none",
        ),
        ({"tail_aggregation": "none"}, "tail_aggregation='none' is an option of U-shaped runs: give tail_point"),
    ],
)
def test_bad_tail_aggregation_is_one_line(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SplitFedV1(**kwargs)


def test_the_system_model_charges_the_tail_and_the_two_crossings():
    """The clients' costs of a U-shaped method: the tail's FLOPs with the head's, the body's output (down) and its
    gradient (up, instead of a label) in each row's bits; the wireless cell's per-iteration barrier then takes longer
    than the plain split's."""
    from lightning_sfl.system.flops import training_flops_per_sample
    from lightning_sfl.system.timing import LABEL_BYTES
    from lightning_sfl.system.wireless import WirelessCell

    plain, u = SCALA(), SCALA(tail_point="s4")  # cnn_small cut at s2; the body's output at s4: 64x2x2
    a, b = plain.client_costs(), u.client_costs()
    tail = training_flops_per_sample(u.tail.net, (64, 2, 2))
    assert b.tail_training_flops == tail > 0 and a.tail_training_flops == 0
    assert b.training_flops == pytest.approx(training_flops_per_sample(u.client.net, (1, 8, 8)) + tail)
    assert b.tail_row_bytes == 256 * 4
    assert b.activation_row_bits - a.activation_row_bits == 8 * (256 * 4 - LABEL_BYTES)
    seconds = []
    for costs in (a, b):
        cell = WirelessCell(barrier="iteration", include_downlink=True)
        cell.bind(10, 0, costs)
        clients, samples, iterations = torch.arange(4), torch.full((4,), 80), torch.full((4,), 5)
        seconds.append(cell.barrier_seconds(clients, samples, iterations))
    assert seconds[1] > seconds[0]
