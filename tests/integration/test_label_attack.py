"""``lightning-sfl attack --attack labels`` (:mod:`lightning_sfl.privacy.label_attack`): what a split run's server
learns of the labels, from a U-shaped run's gradients against the plain run's labels (the reference arm), its files
and the W&B run read back from W&B's own offline files."""

from __future__ import annotations

import json
import os

import lightning as L
import pytest
import torch
from _helpers import REPO
from cli_in_one_process import run_command, run_in_one_process
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_sfl.algorithms import SCALA
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.privacy.label_attack import tail_labels
from lightning_sfl.wandb.offline import read_offline_run


def _checkpoint(folder, binary_class=None, **kwargs):
    """SCALA trained 3 rounds on digits (20 clients, 5 a round; ``binary_class``: one class against the rest)."""
    torch.manual_seed(0)
    dm = FederatedDataModule(dataset="digits", num_clients=20, alpha=2, participation=0.25, batch_size=64, seed=0,
                             binary_class=binary_class)  # fmt: skip
    model = SCALA(local_iters=5, lr=0.05, num_classes=dm.num_classes, **kwargs)
    trainer = L.Trainer(
        max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[ModelCheckpoint(dirpath=folder, save_last=True)],
    )  # fmt: skip
    trainer.fit(model, dm)
    return folder / "last.ckpt"


def _attack(ckpt, cwd, *args):
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SILENT"}
    out = run_command(["attack", "--attack", "labels", "--ckpt_path", str(ckpt), *args], cwd=cwd, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out, json.loads((ckpt.parent / "attack-1" / "metrics.json").read_text())


def test_a_u_shaped_servers_gradients_give_the_labels_away_on_a_binary_task(tmp_path):
    """Undefended U-shaped SCALA on digits' class 3 against the rest (about 10 % positives), at a fixed seed: every
    attack beats chance (measured: norm and direction AUC 1.0, clusters, known tail 1.0); the scores reach W&B."""
    ckpt = _checkpoint(tmp_path / "u", binary_class=3, tail_point="s4")
    out, m = _attack(ckpt, tmp_path)
    assert m["sent"] == "body_gradients" and m["classes"] == 2 and m["tail_point"] == "s4"
    assert 0.05 < m["positive_share"] < 0.2
    assert m["norm_auc"] > 0.8 and m["direction_auc"] > 0.8 and 0.5 < m["norm_auc_per_batch"] <= 1
    assert m["cluster_accuracy"] > 0.9 and m["known_tail_accuracy"] > 0.9
    assert m["histogram_l1"] < 0.5
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("labels attack on SCALA after 3 rounds") and "norm AUC" in last
    run = read_offline_run(tmp_path / "u" / "attack-1")
    assert run.summary["attack/norm_auc"] == pytest.approx(m["norm_auc"]) and run.config["method"] == "SCALA"


@pytest.mark.extended  # ~12 s on two cores; in CI: the binary task's attacks (above)
def test_the_plain_split_is_the_reference_arm_and_ten_classes_leak_through_clusters(tmp_path):
    """The plain split's server holds the labels (every attack exact); U-shaped on ten classes, the clusters named by
    four known rows a class and the known tail recover most labels, far above chance (0.1)."""
    _, plain = _attack(_checkpoint(tmp_path / "plain"), tmp_path, "--no_wandb")
    assert plain["sent"] == "labels" and plain["cluster_accuracy"] == plain["known_tail_accuracy"] == 1.0
    _, u = _attack(_checkpoint(tmp_path / "u", tail_point="s5"), tmp_path, "--no_wandb")
    assert u["sent"] == "body_gradients" and "norm_auc" not in u
    assert u["cluster_accuracy"] > 0.5 and u["known_tail_accuracy"] > 0.9 and u["completion_accuracy"] > 0.2


def test_a_known_tail_gives_the_labels_through_its_jacobian():
    """An MLP tail (Flatten, Linear, ReLU, Linear): per row, least squares on the tail's Jacobian recovers every label
    from the gradient of the mean cross-entropy w.r.t. its input; the linear path agrees on a linear tail."""
    torch.manual_seed(0)
    tail = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    h = torch.randn(40, 4, 2, 2, requires_grad=True)
    y = torch.randint(0, 10, (40,))
    (g,) = torch.autograd.grad(torch.nn.functional.cross_entropy(tail(h), y), h)
    assert torch.equal(tail_labels(tail, h.detach(), g), y)
    linear = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 10))
    (g,) = torch.autograd.grad(torch.nn.functional.cross_entropy(linear(h), y), h)
    assert torch.equal(tail_labels(linear, h.detach(), g), y)


def test_the_gradient_attacks_do_worse_under_a_strong_defence():
    """U-shaped SCALA on digits' class 3 against the rest, 3 rounds, at a fixed seed, attacked in-process: Gaussian
    noise of 4 times the batch's largest gradient norm and max-norm each bring the norm attack toward chance and the
    gradient attacks (direction, clusters, known tail) down; model completion works on the body's own outputs, which
    no defence of the tail's upload changes."""
    from lightning_sfl.defences import GradientNoise, MaxNorm
    from lightning_sfl.privacy.label_attack import label_attacks

    def attacked(defences):
        torch.manual_seed(0)
        dm = FederatedDataModule(dataset="digits", num_clients=20, alpha=2, participation=0.25, batch_size=64, seed=0,
                                 binary_class=3)  # fmt: skip
        model = SCALA(local_iters=5, lr=0.05, num_classes=2, tail_point="s4", defences=defences)
        trainer = L.Trainer(max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False)  # fmt: skip
        trainer.fit(model, dm)
        options = {"rows_per_client": 64, "known_per_class": 4, "completion_epochs": 100, "seed": 0}
        return label_attacks(model.eval(), dm.client_stats, dm.splits, **options)

    plain = attacked([])
    assert plain["norm_auc"] > 0.9 and plain["direction_auc"] > 0.9 and plain["known_tail_accuracy"] > 0.9
    for defended in (attacked([GradientNoise(scale=4.0)]), attacked([MaxNorm()])):
        assert abs(defended["norm_auc"] - 0.5) < abs(plain["norm_auc"] - 0.5) - 0.2
        assert abs(defended["direction_auc"] - 0.5) < abs(plain["direction_auc"] - 0.5)
        assert defended["cluster_accuracy"] < plain["cluster_accuracy"]
        assert defended["known_tail_accuracy"] < plain["known_tail_accuracy"] - 0.2


def test_randomised_labels_are_what_a_plain_server_receives_and_what_u_shaped_gradients_give_away():
    """RR_ε with ε = 1 over ten classes keeps about 23 % of the labels (e/(e + 9)), drawn once in the fit: a plain
    split's server receives those (its attacks agree with the truth about that often), and a U-shaped server's
    gradients give those away, not the true labels."""
    from lightning_sfl.defences import RandomisedLabels
    from lightning_sfl.defences.labels import keep_probability
    from lightning_sfl.privacy.label_attack import label_attacks

    def attacked(**kwargs):
        torch.manual_seed(0)
        dm = FederatedDataModule(dataset="digits", num_clients=20, alpha=2, participation=0.25, batch_size=64, seed=0)
        model = SCALA(local_iters=5, lr=0.05, defences=[RandomisedLabels(epsilon=1.0)], **kwargs)
        trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False)  # fmt: skip
        trainer.fit(model, dm)
        options = {"rows_per_client": 64, "known_per_class": 4, "completion_epochs": 50, "seed": 0}
        return model, label_attacks(model.eval(), dm.client_stats, dm.splits, **options)

    model, plain = attacked()
    keep = keep_probability(1.0, 10)
    assert plain["sent"] == "labels" and plain["cluster_accuracy"] == pytest.approx(keep, abs=0.05)
    assert model.defences["randomised_labels"].noisy is not None
    _, u = attacked(tail_point="s5")
    assert u["sent"] == "body_gradients" and u["known_tail_accuracy"] == pytest.approx(keep, abs=0.05)


def test_tails_kept_from_the_server_take_the_known_tail_attack_away_not_the_gradients_leak(tmp_path):
    """``tail_aggregation="none"``: every client keeps its own tail (read back from the checkpoint's per-client
    store for what each one sends); the server knows no tail, so the known-tail attack is gone, while the gradients'
    clusters still give most labels away."""
    ckpt = _checkpoint(tmp_path / "none", tail_point="s5", tail_aggregation="none")
    out, m = _attack(ckpt, tmp_path, "--no_wandb")
    assert m["tail_aggregation"] == "none" and "known_tail_accuracy" not in m
    assert m["cluster_accuracy"] > 0.5
    assert "known tail (unknown to the server)" in out.stdout.strip().splitlines()[-1]


def test_attack_last_takes_the_fits_options_after_a_double_dash(tmp_path):
    """``attack --config C --ckpt_path last -- OPTIONS`` finds the latest ``fit --config C OPTIONS`` (the options name
    its run folder, as the configs do) and builds the data with them; without them there is no such fit (one line),
    and options without a config are refused in one line."""
    config = str(REPO / "configs/digits/scala.yaml")
    options = ["--model.tail_point=s4", "--data.binary_class=3"]
    fit = ["fit", "--config", config, "--trainer.max_epochs=1", "--trainer.enable_progress_bar=false",
           "--trainer.logger=false", *options]  # fmt: skip
    attack = ["attack", "--attack", "labels", "--config", config, "--ckpt_path", "last", "--no_wandb"]
    commands = [fit, [*attack, "--", *options], attack, ["attack", "--ckpt_path", "x.ckpt", "--", *options]]
    fitted, found, missing, no_config = run_in_one_process([(tmp_path, argv) for argv in commands])
    assert fitted.code == 0, fitted.stderr[-2000:]
    assert found.code == 0, found.stderr[-2000:]
    (run_folder,) = (tmp_path / "runs").iterdir()
    m = json.loads((run_folder / "attack-1" / "metrics.json").read_text())
    assert m["tail_point"] == "s4" and m["classes"] == 2 and m["sent"] == "body_gradients" and m["rounds"] == 1
    assert missing.code == 2 and missing.stderr.startswith("error: ckpt_path='last': no "), missing.stderr[-2000:]
    assert no_config.code == 2 and no_config.stderr.strip().splitlines() == [
        "error: the fit's options after -- (--model.tail_point=s4 --data.binary_class=3) need the --config it ran with"
    ]
