"""The W&B callbacks end to end, read back from what W&B itself stored (no mocks).

One real 3-round SCALA fit on digits runs in a subprocess (W&B's mode is process-wide) with an offline
``WandbLogger`` and a ``CSVLogger``; the offline run is then decoded with :mod:`lightning_sfl.wandb.offline`
and checked against the run's own ``test/acc`` and an independent computation from the data module.
"""

from __future__ import annotations

import csv
import math
import os
import re
import subprocess
import sys
import textwrap

import lightning as L
import numpy as np
import pytest
import torch
from _helpers import REPO
from lightning.pytorch.loggers import CSVLogger

from lightning_sfl.algorithms import SCALA
from lightning_sfl.callbacks.partition_report import PNG_NAME, partition_statistics
from lightning_sfl.callbacks.per_class import PerClassAccuracy
from lightning_sfl.data import FederatedDataModule
from lightning_sfl.wandb.offline import find_offline_runs, read_offline_run

DM_KW = dict(dataset="digits", num_clients=8, alpha=2, participation=0.5, batch_size=24, seed=1)
ROUNDS, EVERY = 3, 2  # reports in rounds 2 (every 2nd) and 3 (the last)
N_CLASSES = 10

SCRIPT = textwrap.dedent(
    """
    import sys

    import lightning as L
    import torch
    import wandb
    from lightning.pytorch.loggers import CSVLogger, WandbLogger

    from lightning_sfl.algorithms import SCALA
    from lightning_sfl.callbacks.partition_report import PartitionReport
    from lightning_sfl.callbacks.per_class import PerClassAccuracy
    from lightning_sfl.callbacks.wandb_axis import WandbRoundAxis
    from lightning_sfl.data import FederatedDataModule

    out, rounds, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dm = FederatedDataModule(**{dm_kw})
    trainer = L.Trainer(
        max_epochs=rounds,
        logger=[WandbLogger(offline=True, save_dir=out, project="t"), CSVLogger(out, name="csv")],
        callbacks=[WandbRoundAxis(), PartitionReport(), PerClassAccuracy(every_n_rounds=every)],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    trainer.fit(SCALA(local_iters=2, lr=0.05), dm)
    wandb.finish()
    """
).replace("{dm_kw}", repr(DM_KW))


@pytest.fixture(scope="module")
def fit_run(tmp_path_factory):
    """``(offline run, csv rows, output dir)`` of the subprocess fit."""
    out = tmp_path_factory.mktemp("wandb_fit")
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DIR=str(out))
    env.update({k: str(out / k.lower()) for k in ("WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR")})
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out), str(ROUNDS), str(EVERY)],
        env=env,
        cwd=out,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    runs = find_offline_runs(out / "wandb")
    assert len(runs) == 1, runs
    with open(out / "csv" / "version_0" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    return read_offline_run(runs[0]), rows, out


def _eval_rows(run):
    """The coordinator's evaluation rows, by round."""
    rows = {int(r["round"]): r for r in run.rows_with("test/acc")}
    assert sorted(rows) == list(range(1, ROUNDS + 1))
    return rows


# ---------------------------------------------------------------- reader and round axis
def test_history_rows_of_test_acc_carry_the_round(fit_run):
    run, _, _ = fit_run
    rows = run.rows_with("test/acc")
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert all(0.0 <= r["test/acc"] <= 1.0 for r in rows)
    assert run.summary["round"] == ROUNDS
    assert run.config["num_clients"] == 8 and run.config["lr"] == 0.05  # hyper-parameters reached the config


def test_round_is_the_x_axis_and_wins_over_global_step(fit_run):
    run, _, _ = fit_run
    globs = [m for m in run.metrics if m.get("glob_name") == "*"]
    assert [m["step_metric"] for m in globs] == ["trainer/global_step", "round"], "Lightning first, then ours"
    assert globs[-1]["options"]["step_sync"]
    assert any(m.get("name") == "round" for m in run.metrics)
    # wandb-core applied the definition: it inserted the latest round into rows that did not log it
    train_rows = run.rows_with("train/server_loss")
    assert [r["round"] for r in train_rows] == [1, 2, 3]


# ---------------------------------------------------------------- per-class accuracy
def test_per_class_table_chart_and_confusion_matrix_match_the_run(fit_run):
    run, _, _ = fit_run
    evals = _eval_rows(run)
    test_y = FederatedDataModule(**DM_KW).splits.test_y
    support = torch.bincount(test_y, minlength=N_CLASSES).tolist()
    reports = run.rows_with("per_class/table")
    assert [int(r["round"]) for r in reports] == [2, 3], "every 2nd round and the last"
    for row in reports:
        r = int(row["round"])
        for key in ("per_class/table", "per_class/bar_chart_table", "per_class/confusion_matrix_table"):
            assert row[key]["_type"] == "table-file" and row[key]["path"] in run.tables
        table = run.load_table(row["per_class/table"])
        assert table["columns"] == ["class", "accuracy", "support"]
        assert len(table["data"]) == N_CLASSES
        assert [c for c, _, _ in table["data"]] == list(range(N_CLASSES))
        assert [s for _, _, s in table["data"]] == support
        for c, acc, _ in table["data"]:
            assert 0.0 <= acc <= 1.0
            assert acc == pytest.approx(evals[r][f"test/acc_class_{c}"], abs=1e-6)
        assert run.load_table(row["per_class/bar_chart_table"])["data"] == table["data"]
        cm = run.load_table(row["per_class/confusion_matrix_table"])
        assert cm["columns"] == ["Actual", "Predicted", "nPredictions"]
        assert len(cm["data"]) == N_CLASSES**2
        m = np.zeros((N_CLASSES, N_CLASSES))
        for a, p, count in cm["data"]:
            m[int(a), int(p)] = count
        assert m.sum(axis=1).tolist() == support
        np.testing.assert_allclose(np.diag(m) / m.sum(axis=1), [acc for _, acc, _ in table["data"]], atol=1e-6)
        assert m.trace() / m.sum() == pytest.approx(evals[r]["test/acc"], abs=1e-6)
    charts = run.config["_wandb"]["visualize"]
    assert charts["per_class/bar_chart"]["panel_config"]["panelDefId"] == "wandb/bar/v0"
    assert charts["per_class/confusion_matrix"]["panel_config"]["panelDefId"] == "wandb/confusion_matrix/v1"


def test_per_class_scalars_are_logged_once_in_reporting_rounds(fit_run):
    run, csv_rows, _ = fit_run
    logged = [r for r in csv_rows if r.get("test/acc_class_0")]
    assert [int(float(r["round"])) for r in logged] == [2, 3]
    assert not any(k.startswith("per_class/acc") for k in csv_rows[0]), "one key family only"
    tables = {int(row["round"]): run.load_table(row["per_class/table"]) for row in run.rows_with("per_class/table")}
    for r in logged:
        table = tables[int(float(r["round"]))]
        for c, acc, _ in table["data"]:
            assert float(r[f"test/acc_class_{c}"]) == pytest.approx(acc, abs=1e-6)


def test_every_n_rounds_selects_the_reporting_rounds():
    cb = PerClassAccuracy(every_n_rounds=3)
    last = 7
    assert [r for r in range(1, last + 1) if cb.should_log(r, last_round=r == last)] == [3, 6, 7]
    assert [r for r in range(1, 5) if PerClassAccuracy().should_log(r)] == [1, 2, 3, 4]
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError):
            PerClassAccuracy(every_n_rounds=bad)


def test_per_class_reuses_the_evaluation_forward(tmp_path):
    """Standalone ``validate``: one forward of the global model per test batch (the evaluation's own, reaching the
    callback through ``validation_step``'s outputs), and the scalars equal an independent per-class accuracy."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = SCALA(local_iters=2, lr=0.05)
    calls = []
    hook = model.register_forward_hook(lambda m, a, o: calls.append(len(a[0])))
    trainer = L.Trainer(
        logger=CSVLogger(tmp_path),
        callbacks=[PerClassAccuracy()],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    dm = FederatedDataModule(**DM_KW, test_batch_size=128)
    trainer.validate(model, dm, verbose=False)
    n_test = len(dm.splits.test_y)
    assert sum(calls) == n_test and len(calls) == math.ceil(n_test / 128)
    hook.remove()
    with torch.no_grad():
        preds = model(dm.splits.to_float(dm.splits.test_x)).argmax(1).numpy()
    y = dm.splits.test_y.numpy()
    m = trainer.callback_metrics
    for c in range(N_CLASSES):
        assert float(m[f"test/acc_class_{c}"]) == pytest.approx((preds[y == c] == c).mean(), abs=1e-6)
    assert not any(k.startswith("per_class/acc") for k in m)


# ---------------------------------------------------------------- partition report
def _independent_stats(counts: np.ndarray) -> dict[str, float]:
    from scipy.stats import entropy

    sizes = counts.sum(1)
    p_k = counts / sizes[:, None]
    p = counts.sum(0) / counts.sum()
    return {
        "num_clients": len(counts),
        "size_min": sizes.min(),
        "size_median": float(np.median(sizes)),
        "size_max": sizes.max(),
        "mean_classes_per_client": np.count_nonzero(counts, axis=1).mean(),
        "mean_max_class_share": p_k.max(1).mean(),
        "mean_kl_to_global": np.mean([entropy(q, p) for q in p_k]),
        "mean_emd_to_global": np.mean([0.5 * np.abs(q - p).sum() for q in p_k]),
    }


def test_partition_heatmap_and_statistics_reach_wandb(fit_run):
    run, csv_rows, out = fit_run
    (row,) = run.rows_with("partition/heatmap")
    image = row["partition/heatmap"]
    assert image["_type"] == "image-file" and image["format"] == "png"
    assert image["path"] in run.images
    assert run.file(image["path"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "quantity" in image["caption"] and "K=8" in image["caption"]
    assert row["round"] == 0
    png = out / "csv" / "version_0" / PNG_NAME  # also saved in the (CSV) log dir
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    expected = _independent_stats(FederatedDataModule(**DM_KW).label_counts.numpy().astype(float))
    for key, value in expected.items():
        assert row[f"partition/{key}"] == pytest.approx(value, rel=1e-9), key
        assert run.summary[f"partition/{key}"] == pytest.approx(value, rel=1e-9), key
    (csv_row,) = [r for r in csv_rows if r.get("partition/num_clients")]
    assert float(csv_row["partition/mean_kl_to_global"]) == pytest.approx(expected["mean_kl_to_global"])


def test_partition_statistics_hand_example():
    counts = torch.tensor([[2, 2, 0, 0], [0, 0, 4, 0], [0, 0, 0, 8]])
    # P = [2, 2, 4, 8] / 16 = [1/8, 1/8, 1/4, 1/2]
    # KL: client 0: ln(0.5 / (1/8)) = ln 4; client 1: ln(1 / (1/4)) = ln 4; client 2: ln(1 / (1/2)) = ln 2
    # EMD (= total variation): 0.5·(0.375 + 0.375 + 0.25 + 0.5) = 0.75; 0.5·(1/8 + 1/8 + 3/4 + 1/2) = 0.75;
    #   0.5·(1/8 + 1/8 + 1/4 + 1/2) = 0.5
    stats = partition_statistics(counts)
    assert stats == pytest.approx(
        {
            "num_clients": 3,
            "size_min": 4,
            "size_median": 4,
            "size_max": 8,
            "mean_classes_per_client": 4 / 3,
            "mean_max_class_share": (0.5 + 1 + 1) / 3,
            "mean_kl_to_global": 5 / 3 * math.log(2),
            "mean_emd_to_global": 2 / 3,
        }
    )
    iid = partition_statistics(torch.full((4, 3), 5))
    assert iid["mean_kl_to_global"] == 0 and iid["mean_emd_to_global"] == 0 and iid["mean_max_class_share"] == 1 / 3
    assert partition_statistics(torch.tensor([[1, 0], [3, 0], [5, 5], [7, 0]]))["size_median"] == 5  # (3 + 7) / 2
    with pytest.raises(ValueError, match="no samples"):
        partition_statistics(torch.tensor([[1, 2], [0, 0]]))


@pytest.mark.extended  # ~40 s on two cores; in CI: the fit above
def test_cli_run_puts_every_callbacks_keys_into_the_wandb_offline_files(tmp_path):
    """The real command with its default loggers: every callback's keys reach W&B's own offline run file."""
    repo = REPO
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(tmp_path),
        "WANDB_CACHE_DIR": str(tmp_path / "cache"),
        "WANDB_CONFIG_DIR": str(tmp_path / "config"),
        "WANDB_DATA_DIR": str(tmp_path / "data"),
    }
    cmd = [
        sys.executable,
        "-m",
        "lightning_sfl.cli",
        "fit",
        "--config",
        str(repo / "configs/digits/scala.yaml"),
        "--trainer.max_epochs=3",
        "--dissimilarity.every_n_rounds=2",
        "--trainer.enable_progress_bar=false",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_folder,) = (tmp_path / "runs").iterdir()  # one folder per run, and its W&B run named after it
    run = read_offline_run(run_folder)
    assert run.run["display_name"] == run_folder.name and run.run["job_type"] == "fit", run.run
    assert set(run.run["tags"]) == {"SCALA", "digits", "quantity", "seed0"}
    assert re.fullmatch(r"scala-digits-quantity2-[0-9a-f]{10}", run.run["run_group"])  # the seeds of this setting
    assert (run_folder / "config.yaml").is_file() and (run_folder / "checkpoints" / "last.ckpt").is_file()
    keys = run.keys()
    for key in (
        "test/acc",
        "test/acc_class_9",
        "round",
        "comm/up/activations_bytes",
        "comm/down/gradients_bytes",
        "comm/cumulative_bytes",
        "clock/round_seconds",
        "clock/elapsed_seconds",
        "dissimilarity/client_half",
        "dissimilarity/server_half",
        "dissimilarity/total",
        "partition/mean_kl_to_global",
        "train/server_loss",
    ):
        assert key in keys, key
    assert any(k.startswith("per_class/") for k in keys)
    assert run.images and run.tables  # partition heatmap; per-class table and confusion matrix
    assert [r["round"] for r in run.rows_with("test/acc")] == [1, 2, 3]
    # what produced the run: the resolved config (method class, seed, rounds, system model) and the package
    import lightning_sfl

    config, produced = run.config["config"], run.config["lightning_sfl"]
    assert config["model"]["class_path"] == produced["method"] == "lightning_sfl.algorithms.SCALA"
    assert config["seed_everything"] == 0 and config["trainer"]["max_epochs"] == 3 and config["torch_threads"] == 1
    assert config["clock"]["init_args"]["flops_high"] == 5e9 and produced["version"] == lightning_sfl.__version__
    assert produced["commit"] is None or len(produced["commit"].split("+")[0]) == 40
