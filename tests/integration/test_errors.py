"""Bad input costs one clear line (no traceback) and a failing run keeps its last good checkpoint."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from _helpers import REPO, round_steps
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_sfl.algorithms import SCALA
from lightning_sfl.checkpoint import check_checkpoint
from lightning_sfl.cli import main
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.errors import ConfigError, NonFiniteError
from lightning_sfl.loop import Step
from lightning_sfl.runtime.guards import check_finite

DIGITS = str(REPO / "configs" / "digits" / "scala.yaml")


def _cli_error(capsys, *args: str) -> str:
    """Run the CLI in-process; it must exit with code 2 and exactly one stderr line starting with 'error:'."""
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", DIGITS, "--trainer.logger=false", *args])
    assert exc.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "Traceback" not in err[0]
    return err[0]


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--data.alpha=11"], "alpha=11 must be a whole number of classes per client in [1, 10]"),
        (["--data.partition=dirichlet", "--data.beta=0"], "beta=0.0 must be > 0"),
        (["--data.participation=0"], "participation=0.0 must be in (0, 1]"),
        (["--data.participation=1.5"], "participation=1.5 must be in (0, 1]"),
        (["--data.num_clients=0"], "num_clients=0 must be >= 1"),
        (["--data.batch_size=3"], "batch_size=3 is smaller than the 5 clients per round"),
        (["--data.num_clients=5000", "--data.participation=0.001"], "num_clients=5000 is larger than"),
        (["--model.split_point=s9"], "split_point='s9' is not a cut point of model 'cnn_small'; valid: s1, s2"),
        (["--model.arch=alexnet_cifar"], "model='alexnet_cifar' expects input shape (3, 32, 32), got (1, 8, 8)"),
        (["--model.arch=bogus"], "arch='bogus' is not one of: alexnet_mnist"),
        (["--data.dataset=mnist"], "dataset='mnist' is not one of: digits, synthetic"),
        (["--data.partition=random"], "partition='random' is not one of: iid, quantity, dirichlet, shards"),
        (["--model=BogusAlgo"], "model='BogusAlgo' is not one of: ca_sfl, cs_sfl, lla_sfl, minibatch_sfl"),
        (["--data.dataset=cifar10", "--data.root=/nonexistent"], "expected /nonexistent/cifar-10-batches-py"),
        (["--model.client_selection=best"], "client_selection='best' is not one of: uniform, fedcbs"),
        (["--torch_threads=0"], "torch_threads=0 must be in [1, "),
        (["--client_state_memory=-1"], "client_state_memory=-1 MiB must be > 0"),
        (["--matmul_precision=low"], "matmul_precision"),
    ],
)
def test_bad_settings_give_one_line(capsys, run_dir, args, expected):
    assert expected in _cli_error(capsys, *args)


def test_registry_names_select_algorithms(run_dir, capsys):
    main(
        [
            "fit",
            "--config",
            DIGITS,
            "--model",
            "fedavg",
            "--trainer.max_epochs=1",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
        ]
    )
    assert "final test accuracy:" in capsys.readouterr().out


def test_matmul_precision_leaves_a_cpu_run_in_full_float32(run_dir, capsys):
    """``--matmul_precision`` sets torch's float32 matmul precision only on a CUDA device: on the CPU torch's setting
    would also let oneDNN compute float32 matmuls in TF32."""
    before = torch.get_float32_matmul_precision()
    main(["fit", "--config", DIGITS, "--matmul_precision=medium", "--trainer.max_epochs=1", "--trainer.logger=false",
          "--trainer.enable_progress_bar=false", "--trainer.accelerator=cpu"])  # fmt: skip
    assert "final test accuracy:" in capsys.readouterr().out
    assert torch.get_float32_matmul_precision() == before == "highest"


# ----------------------------------------------------------------------------- checkpoints
@pytest.fixture(scope="module")
def good_ckpt(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ckpt")
    dm = FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)
    L.Trainer(
        max_epochs=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ModelCheckpoint(dirpath=folder, save_last=True)],
    ).fit(SCALA(local_iters=1), dm)
    return folder / "last.ckpt"


def test_checkpoints_are_checked_safely(good_ckpt, tmp_path, capsys, run_dir):
    assert "client.net.0.weight" in check_checkpoint(good_ckpt)["state_dict"]
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(good_ckpt.read_bytes()[:2000])
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_text("not a checkpoint")
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {"fc.weight": torch.zeros(2)}}, foreign)
    evil = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {"client.net.0.weight": torch.zeros(1)}, "x": Path("/")}, evil)  # needs unpickling
    cases = {
        truncated: "is damaged (truncated, or not a checkpoint: no whole archive); no intact checkpoint is beside it",
        garbage: "is damaged (truncated, or not a checkpoint",
        foreign: "not a lightning_sfl",
        evil: "cannot be loaded safely",
        tmp_path / "missing.ckpt": "does not exist",
    }
    for path, text in cases.items():
        with pytest.raises(ConfigError, match=re.escape(text)):
            check_checkpoint(path)
        assert text in _cli_error(capsys, f"--ckpt_path={path}")
    assert "was written by lightning_sfl.algorithms.SCALA, not lightning_sfl.algorithms.FedAvg" in _cli_error(
        capsys, "--model=fedavg", f"--ckpt_path={good_ckpt}"
    )


# ----------------------------------------------------------------------------- numerical guards
def test_nan_stops_the_run_naming_round_and_client_and_keeps_last_good_checkpoint(tmp_path):
    dm = FederatedDataModule(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)
    model = SCALA(local_iters=2, lr=0.05)
    trainer = L.Trainer(
        max_epochs=5,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)],
    )

    class Poison(L.Callback):  # corrupt one client's input rows in round 3
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.current_epoch == 2 and batch_idx == 1:
                batch.x[batch.owner == 1] = float("nan")

    trainer.callbacks.append(Poison())
    with pytest.raises(NonFiniteError) as exc:
        trainer.fit(model, dm)
    client = int(round_steps(dm, 2)[0].clients[1])
    assert f"round 3, local iteration 2, client(s) [{client}]" in str(exc.value)
    ckpt = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert ckpt["epoch"] == 1  # end of round 2, the last good one
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values() if v.is_floating_point())


@pytest.mark.parametrize(
    ("rows", "bad_client"),
    [
        ([[3e38, 3e38], [1.0, 2.0]], None),  # finite values whose sum overflows: not an error
        ([[3e38, 3e38], [1.0, float("-inf")]], 7),
        ([[float("nan"), 0.0], [1.0, 2.0]], 5),
        ([[float("inf"), float("-inf")], [1.0, 2.0]], 5),  # the sum is NaN, not inf
    ],
)
def test_check_finite_on_its_own(rows, bad_client):
    """The guard's one-pass test (is the sum finite?) against the elementwise one: overflowing sums of finite rows
    pass, any NaN or infinity stops, naming the client of the row."""
    sizes = torch.tensor([1, 1])
    step = Step("local", 0, 1, False, torch.tensor([5, 7]), sizes, torch.arange(2), owner=torch.arange(2))
    values = torch.tensor(rows, dtype=torch.float32)
    if bad_client is None:
        check_finite(step, ("activations", values))
    else:
        with pytest.raises(NonFiniteError, match=rf"round 1, local iteration 2, client\(s\) \[{bad_client}\]"):
            check_finite(step, ("activations", values))


@pytest.mark.parametrize(
    ("acts", "logits", "blamed"),
    [
        ([[1.0], [2.0]], [[3e38, 3e38], [0.0, 0.0]], None),  # finite; the logits' sum overflows: not an error
        ([[float("nan")], [2.0]], [[0.0, 0.0], [float("nan"), 0.0]], ("activations", 5)),  # the first one is blamed
        ([[1.0], [2.0]], [[0.0, 0.0], [float("inf"), 0.0]], ("logits", 7)),
        ([[float("inf")], [2.0]], [[-3e38, -3e38], [0.0, 0.0]], ("activations", 5)),  # the sums together: -inf
    ],
)
def test_activations_and_logits_checked_together(acts, logits, blamed):
    """A local iteration checks its activations and logits with one flag; the message names the first non-finite
    tensor and its clients, as two separate checks would."""
    step = Step(
        "local", 0, 1, False, torch.tensor([5, 7]), torch.tensor([1, 1]), torch.arange(2), owner=torch.arange(2)
    )
    named = (("activations", torch.tensor(acts)), ("logits", torch.tensor(logits)))
    if blamed is None:
        check_finite(step, *named)
    else:
        with pytest.raises(NonFiniteError, match=rf"non-finite {blamed[0]} in round 1, .*client\(s\) \[{blamed[1]}\]"):
            check_finite(step, *named)


@pytest.mark.extended  # ~12 s on two cores; in CI: test_bad_inputs.py's
def test_divergence_from_the_cli_is_one_line(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_sfl.cli",
            "fit",
            "--config",
            DIGITS,
            "--trainer.logger=false",
            "--model.lr=1e6",
            "--trainer.max_epochs=20",
            "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: non-finite") and "round" in last and "Traceback" not in proc.stderr


def test_checkpoint_class_check_compares_classes_not_spellings(tmp_path):
    path = tmp_path / "c.ckpt"
    state = {"client.net.0.weight": torch.zeros(1)}
    torch.save({"state_dict": state, "lightning_sfl": {"algorithm": "lightning_sfl.algorithms.SCALA"}}, path)
    for same in ("lightning_sfl.SCALA", "lightning_sfl.algorithms.SCALA", "lightning_sfl.algorithms.scala.SCALA"):
        check_checkpoint(path, expected_class=same)
    with pytest.raises(
        ConfigError, match="was written by lightning_sfl.algorithms.SCALA, not lightning_sfl.algorithms.FedAvg"
    ):
        check_checkpoint(path, expected_class="lightning_sfl.FedAvg")
    torch.save({"state_dict": state, "lightning_sfl": {"algorithm": "os.system"}}, path)  # never imported
    with pytest.raises(ConfigError, match="was written by os.system, not lightning_sfl.algorithms.SCALA"):
        check_checkpoint(path, expected_class="lightning_sfl.SCALA")
