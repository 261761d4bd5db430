"""``lightning-sfl compare``: summary math on synthetic metrics, the per-method config rewrite, and an
end-to-end comparison on digits (files, table, identical shards per seed, in-process == subprocess)."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.nn.functional as F
from _helpers import REPO

from lightning_sfl import compare
from lightning_sfl.algorithms import ALGORITHMS, REGISTRY, SCALA, SplitFedAlgorithm, SplitMethod
from lightning_sfl.compare import RunResult
from lightning_sfl.lightning_cli import SFLCLI
from lightning_sfl.losses import sum_of_client_means

CONFIG = str(REPO / "configs/digits/scala.yaml")


class PlainSFL(SplitMethod):
    """A test-only method without SCALA's switches and with an argument of its own."""

    def __init__(self, smoothing: float = 0.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.smoothing = smoothing

    def server_loss(self, logits, step):
        return F.cross_entropy(logits, step.y, label_smoothing=self.smoothing)

    def client_loss(self, logits, step):
        rows = F.cross_entropy(logits, step.y, reduction="none", label_smoothing=self.smoothing)
        return sum_of_client_means(rows, step.owner, step.sizes)


class Broken(PlainSFL):
    """Crashes in its first local iteration."""

    def server_loss(self, logits, batch):
        raise RuntimeError("broken on purpose")


PLAIN = f"{PlainSFL.__module__}.PlainSFL"
BROKEN = f"{Broken.__module__}.Broken"


# ====================================================================== synthetic metrics
def _compare(argv: list[str]) -> None:
    """``lightning-sfl compare ARGV`` without W&B runs (``--wandb false``): what these tests check is in the CSV logs
    and the report; compare's W&B runs are tests/integration/test_compare_wandb.py's."""
    compare.main(["--wandb", "false", *argv])


def _run(method: str, seed: int, accs, cum_bytes=None, **extra) -> RunResult:
    records = []
    for i, acc in enumerate(accs, 1):
        rec = {"round": float(i), "test/acc": acc}
        if cum_bytes is not None:
            rec["comm/cumulative_bytes"] = cum_bytes * i
        rec.update({k: v[i - 1] for k, v in extra.items()})
        records.append(rec)
    return RunResult(method, seed, records)


def _rows_by_method(table: str) -> dict[str, list[str]]:
    rows = {}
    for line in table.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_read_lightning_metrics_merges_eval_and_train_rows_by_round(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text(
        "comm/cumulative_bytes,comm/total_bytes,epoch,round,step,test/acc,train/server_loss\n"
        ",,0,1.0,4,0.25,\n"
        "100.0,100.0,0,,4,,2.5\n"
        ",,1,2.0,9,0.5,\n"
        "200.0,100.0,1,,9,,nan\n"
    )
    records = compare.read_lightning_metrics(path)
    assert [r["round"] for r in records] == [1, 2]
    assert records[0] == {
        "round": 1,
        "comm/cumulative_bytes": 100.0,
        "comm/total_bytes": 100.0,
        "test/acc": 0.25,
        "train/server_loss": 2.5,
    }
    assert records[1]["test/acc"] == 0.5 and math.isnan(records[1]["train/server_loss"])
    assert compare.divergence_round(records) == 2


def test_summary_math_matches_hand_computed_values():
    target = 0.8
    results = [
        # method a, 3 seeds: final 0.5/0.7/0.9, best 0.8/0.7/0.9, reaches 0.8 at round 2/never/2,
        # 1.2/1.3/1.4 MB per round over 3 rounds
        _run("a", 0, [0.3, 0.8, 0.5], cum_bytes=1.2e6),
        _run("a", 1, [0.6, 0.7, 0.7], cum_bytes=1.3e6),
        _run("a", 2, [0.2, 0.9, 0.9], cum_bytes=1.4e6),
        # method b: one seed that never reaches the target
        _run("b", 0, [0.1, 0.4], cum_bytes=5e5),
        # method c: one crash, one completed run
        RunResult("c", 0, [], error="RuntimeError: boom"),
        _run("c", 1, [0.81, 0.79], cum_bytes=2e6),
    ]
    rows = {r.method: r for r in compare.summarize(results, target)}

    a = rows["a"]
    assert a.final_acc == [0.5, 0.7, 0.9]
    assert compare.format_acc(a.final_acc) == "70.00 ± 20.00"  # sample std: sqrt((400 + 0 + 400) / 2) = 20
    assert a.best_acc == [0.8, 0.7, 0.9]
    assert compare.format_acc(a.best_acc) == "80.00 ± 10.00"  # sqrt((0 + 100 + 100) / 2) = 10
    assert a.rounds_to_target == [2, None, 2]
    assert compare.format_rounds(a.rounds_to_target) == "2.0 (2/3 seeds)"
    assert a.total_bytes == pytest.approx([3.6e6, 3.9e6, 4.2e6])
    assert compare.format_bytes(sum(a.total_bytes) / 3) == "3.9 MB"

    b = rows["b"]
    assert compare.format_acc(b.final_acc) == "40.00 ± 0.00"  # one seed: std 0.00
    assert compare.format_rounds(b.rounds_to_target) == "—"
    assert compare.format_bytes(b.total_bytes[0]) == "1.0 MB"

    c = rows["c"]
    assert c.n_completed == 1 and c.failures == [(0, "RuntimeError: boom")]
    assert compare.format_rounds(c.rounds_to_target) == "1.0"

    table = compare.format_table(list(rows.values()), target)
    header = table.splitlines()[0]
    assert "rounds to ≥ 80%" in header and "total comm (MB)" in header
    cells = _rows_by_method(table)
    # traffic to 80 %: seeds 0 and 2 reach it at round 2, after 2 × 1.2 and 2 × 1.4 MB
    assert cells["a"][:6] == ["3/3", "70.00 ± 20.00", "80.00 ± 10.00", "2.0 (2/3 seeds)", "2.6 (2/3 seeds)", "3.9 MB"]
    assert cells["b"][:6] == ["1/1", "40.00 ± 0.00", "40.00 ± 0.00", "—", "—", "1.0 MB"]
    assert "traffic to ≥ 80% (MB)" in header and "time to" not in header  # no run logged the clock
    assert cells["c"][0] == "1/2" and "failed: seed 0" in cells["c"][-1]
    assert "rounds to" not in compare.format_table(list(rows.values()), None)


def test_time_and_traffic_to_several_targets():
    """Each target gets rounds, simulated time and traffic to reach it, from the round first reaching it."""
    seconds = {"clock/elapsed_seconds": [10.0, 25.0, 45.0]}
    runs = [
        _run("m", 0, [0.5, 0.7, 0.9], cum_bytes=1e6, **seconds),  # 60 %: round 2, 25 s, 2 MB; 85 %: round 3
        _run("m", 1, [0.65, 0.8, 0.8], cum_bytes=3e6, **seconds),  # 60 %: round 1, 10 s, 3 MB; 85 %: never
    ]
    (row,) = compare.summarize(runs, [0.6, 0.85])
    assert row.reached[0.6] == [compare.Reach(2, 25.0, 2e6), compare.Reach(1, 10.0, 3e6)]
    assert row.reached[0.85] == [compare.Reach(3, 45.0, 3e6), None]
    table = compare.format_table([row], [0.6, 0.85])
    header = [c.strip() for c in table.splitlines()[0].strip("|").split("|")]
    assert header[4:10] == [
        "rounds to ≥ 60%",
        "time to ≥ 60% (s)",
        "traffic to ≥ 60% (MB)",
        "rounds to ≥ 85%",
        "time to ≥ 85% (s)",
        "traffic to ≥ 85% (MB)",
    ]
    assert _rows_by_method(table)["m"][3:9] == [
        "1.5",
        "17.5",
        "2.5",
        "3.0 (1/2 seeds)",
        "45.0 (1/2 seeds)",
        "3.0 (1/2 seeds)",
    ]
    assert row.rounds_to_target == [2, 1]  # the first target's


def test_rounds_to_target_partial_reach_mean():
    assert compare.format_rounds([3, 5, None, 10]) == "6.0 (3/4 seeds)"
    assert compare.format_rounds([4, 5]) == "4.5"
    assert compare.format_rounds([None, None]) == "—"
    assert compare.rounds_to_target([{"round": 1, "test/acc": 0.5}, {"round": 2, "test/acc": 0.9}], 0.9) == 2


def test_bytes_formatting_uses_decimal_megabytes():
    assert compare.format_bytes(0) == "0.0 MB"
    assert compare.format_bytes(12_345_678) == "12.3 MB"
    assert compare.format_bytes(1_000_000) == "1.0 MB"  # not 0.95 (MiB)
    assert compare.format_bytes(2_560_000_000) == "2560.0 MB"


def test_mean_std_is_the_sample_std():
    assert compare.mean_std([1.0, 2.0, 3.0, 4.0]) == pytest.approx((2.5, 1.2909944))
    assert compare.mean_std([7.0]) == (7.0, 0.0)


def test_diverged_runs_count_as_completed_and_are_noted():
    run = _run("d", 0, [0.2, 0.1, 0.1], cum_bytes=1e6, **{"train/server_loss": [1.0, math.nan, math.nan]})
    assert run.status == "diverged" and run.diverged_at == 2
    (row,) = compare.summarize([run], 0.5)
    assert row.n_completed == 1 and row.diverged == [(0, 2)]
    assert "diverged: seed 0" in compare.summary_cells(row, 0.5)[-1]


def test_accuracy_curves_mean_min_max_over_seeds():
    results = [_run("m", 0, [0.2, 0.4]), _run("m", 1, [0.4, 0.8]), RunResult("m", 2, [], error="x")]
    c = compare.accuracy_curves(results)["m"]
    assert c["round"] == [1.0, 2.0]
    assert c["mean"] == pytest.approx([0.3, 0.6])
    assert c["min"] == [0.2, 0.4] and c["max"] == [0.4, 0.8] and c["n"] == [2.0, 2.0]
    assert all(math.isnan(t) for t in c["seconds"])  # no clock logged


def test_accuracy_curves_average_the_simulated_time_over_seeds():
    a, b = _run("m", 0, [0.2, 0.4]), _run("m", 1, [0.4, 0.8])
    for run, times in ((a, [1.0, 3.0]), (b, [2.0, 7.0])):
        for rec, t in zip(run.records, times):
            rec["clock/elapsed_seconds"] = t
    assert compare.accuracy_curves([a, b])["m"]["seconds"] == pytest.approx([1.5, 5.0])


def test_metrics_csv_round_trip(tmp_path):
    results = [_run("a", 0, [0.25, 0.5], cum_bytes=10.0, **{"test/acc_class_0": [0.0, 1.0]}), _run("b", 3, [0.75])]
    crashed = _run("c", 1, [0.5])  # crashed after logging a round: failed, also when read back
    crashed.error = "error: non-finite logits"
    results.append(crashed)
    compare.write_metrics_csv(results, tmp_path / "m.csv")
    with open(tmp_path / "m.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["method"], r["seed"], r["round"], r["test_acc"]) for r in rows] == [
        ("a", "0", "1", "0.25"),
        ("a", "0", "2", "0.5"),
        ("b", "3", "1", "0.75"),
        ("c", "1", "1", "0.5"),
    ]
    assert rows[1]["cumulative_bytes"] == "20.0" and rows[2]["cumulative_bytes"] == ""
    back = compare.read_metrics_csv(tmp_path / "m.csv")
    assert [r.records for r in back] == [r.records for r in results]
    assert [r.status for r in back] == ["ok", "ok", "failed"]


# ====================================================================== config rewrite and command line
def test_init_parameters_follow_kwargs_up_the_mro():
    base = compare.init_parameters(SplitFedAlgorithm)
    assert {"arch", "lr", "local_iters", "split_point"} <= base
    assert compare.init_parameters(SCALA) == base | {
        "defences",
        "compression",
        "tail_point",
        "tail_aggregation",
        "concat_activations",
        "server_logit_adjustment",
        "client_logit_adjustment",
        "missing_class_floor",
        "pooled_label_counts",
    }
    split = {"defences", "compression", "tail_point", "tail_aggregation"}
    assert compare.init_parameters(PlainSFL) == base | split | {"smoothing"}


def test_method_config_is_what_the_cli_resolves_and_keeps_only_accepted_init_args():
    base = compare.resolve_config([CONFIG])
    assert base["model"]["init_args"]["concat_activations"] is True
    scala_cfg, dropped = compare.method_config([CONFIG], base, SCALA, [])
    assert dropped == [] and scala_cfg["model"]["init_args"] == base["model"]["init_args"]
    plain_cfg, dropped = compare.method_config([CONFIG], base, PlainSFL, ["--model.lr=0.2", "--data.alpha=1"])
    scala_only = ["client_logit_adjustment", "concat_activations", "missing_class_floor", "pooled_label_counts"]
    scala_only += ["server_logit_adjustment"]
    assert sorted(dropped) == [f"model.init_args.{k}" for k in scala_only]
    init = plain_cfg["model"]["init_args"]
    assert plain_cfg["model"]["class_path"] == PLAIN and not set(scala_only) & set(init)
    assert init["lr"] == 0.2 and init["smoothing"] == PlainSFL().smoothing  # the override, PlainSFL's default
    assert {k: init[k] for k in ("arch", "split_point", "local_iters")} == {
        k: base["model"]["init_args"][k] for k in ("arch", "split_point", "local_iters")
    }
    assert plain_cfg["data"] == {**base["data"], "alpha": 1} and base["data"]["alpha"] == 2


def test_configs_merge_in_order_and_a_new_class_path_resets_init_args(tmp_path):
    overlay = tmp_path / "o.yaml"
    overlay.write_text("data:\n  partition: dirichlet\n  beta: 0.1\n")
    merged = compare.resolve_config([CONFIG, overlay])
    assert merged["data"]["partition"] == "dirichlet" and merged["data"]["num_clients"] == 20
    other = tmp_path / "m.yaml"
    other.write_text(f"model:\n  class_path: {PLAIN}\n  init_args:\n    smoothing: 0.1\n")
    model = compare.resolve_config([CONFIG, other])["model"]
    assert model["class_path"] == PLAIN and model["init_args"]["smoothing"] == 0.1
    assert "concat_activations" not in model["init_args"] and model["init_args"]["local_iters"] == 5
    with pytest.raises(ValueError, match="alpha"):
        compare.resolve_config([CONFIG], ["--data.alpha=abc"])


def test_options_a_method_has_no_use_for_are_left_out_of_its_config():
    """A config or an override that several methods share may set an option one of them refuses as changing nothing
    (``unused_options``: supervised-only's clients, FedAvg's cut): that method's config has it at its default, and says
    it was dropped; the run is checked (built) without it."""
    semi = str(REPO / "configs/digits/semi_sfl.yaml")
    base = compare.resolve_config([semi])
    config, dropped = compare.method_config([semi], base, ALGORITHMS["supervised_only"], [], check=True)
    init = config["model"]["init_args"]
    assert (init["local_iters"], init["client_batch_size"], init["supervised_steps"]) == (5, 64, 30)
    refused = {"model.init_args.client_batch_size", "model.init_args.local_iters"}  # threshold: at its default
    assert refused <= set(dropped) and "model.init_args.threshold" not in dropped  # (and Semi-SFL's own options)
    kept, dropped = compare.method_overrides(["--model.split_point=s1", "--model.lr=0.1"], ALGORITHMS["fedavg"])
    assert kept == ["--model.lr=0.1"] and dropped == ["--model.split_point=s1"]


def test_a_shared_cut_is_left_at_its_default_for_a_method_without_one(tmp_path):
    """A config cutting at s3 (or at a module's name) compared with FedAvg: FedAvg's config has the default cut,
    ``s2`` as text (not the JSON ``"s2"``, quotes included, which no model has), and it is built."""
    shared = tmp_path / "s3.yaml"
    shared.write_text("model:\n  class_path: lightning_sfl.algorithms.SCALA\n  init_args:\n    split_point: s3\n")
    configs = [str(REPO / "configs/digits/scala.yaml"), str(shared)]
    config, dropped = compare.method_config(configs, compare.resolve_config(configs), ALGORITHMS["fedavg"], [],
                                            check=True)  # fmt: skip
    assert config["model"]["init_args"]["split_point"] == "s2" and "model.init_args.split_point" in dropped


def test_model_overrides_a_class_does_not_accept_are_dropped_for_it():
    tokens = [
        "--model.concat_activations=false",
        "--model.lr",
        "0.05",
        "--data.alpha=1",
        "--model.init_args.smoothing=0.1",
    ]
    assert compare.method_overrides(tokens, SCALA) == (
        ["--model.concat_activations=false", "--model.lr", "0.05", "--data.alpha=1"],
        ["--model.init_args.smoothing=0.1"],
    )
    kept, dropped = compare.method_overrides(tokens, PlainSFL)
    assert kept == ["--model.lr", "0.05", "--data.alpha=1", "--model.init_args.smoothing=0.1"]
    assert dropped == ["--model.concat_activations=false"]
    for bad in (["--data.seed=3"], ["--seed_everything", "1"], ["--model", "SCALA"], ["--trainer.logger=false"]):
        with pytest.raises(ValueError, match="cannot be overridden"):
            compare.check_overrides(bad)


def test_command_line_parses_overrides_and_round_trips(tmp_path):
    argv = [
        "--config",
        CONFIG,
        "--methods",
        "scala",
        PLAIN,
        "--overrides",
        "--data.alpha=1",
        "--model.lr 0.05",
        "--seeds",
        "0",
        "2",
        "--out",
        str(tmp_path / "o"),
        "--target_acc",
        "0.9",
        "--",
        "--trainer.max_epochs=3",
    ]
    args = compare.parse_args(argv)
    assert args.overrides == ["--data.alpha=1", "--model.lr", "0.05", "--trainer.max_epochs=3"]
    assert args.methods == ["scala", PLAIN] and args.seeds == [0, 2] and args.target_acc == [0.9] and args.jobs == 1
    line = compare.command_line(args)
    assert line.startswith("lightning-sfl compare --config ")
    again = compare.parse_args(shlex.split(line)[2:])
    assert vars(again) == vars(args)
    default = compare.parse_args(["--config", CONFIG, "--out", "x"]).methods
    assert default == [m for m in ALGORITHMS if REGISTRY[m].family in ("split", "fl")]  # the synchronous families
    assert "scala" in default and "fedavg" in default and not {"gas", "semi_sfl"} & set(default)
    with pytest.raises(SystemExit):
        compare.parse_args(["--config", CONFIG, "--out", "x", "--methods", "no_such_method"])
    with pytest.raises(SystemExit):
        compare.parse_args(["--config", CONFIG, "--out", "x", "--overrides", "--data.seed=1"])


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exc:
        compare.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for opt in compare.OPTIONS:
        assert opt in out


# ====================================================================== end to end on digits
def _two_methods() -> list[str]:
    """Two registered methods with the same client selection (uniform), one with SCALA's switches, one without."""
    return ["scala", "minibatch_sfl"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare") / "digits"
    methods = _two_methods()
    argv = [
        "--config",
        CONFIG,
        "--methods",
        *methods,
        BROKEN,
        "--seeds",
        "0",
        "1",
        "--out",
        str(out),
        "--target_acc",
        "0.15",
        "--overrides",
        "--trainer.max_epochs=2",
        "--model.lr=0.1",
    ]
    _compare(argv)
    return out, methods


def test_end_to_end_writes_table_metrics_and_plot(compared):
    from PIL import Image

    out, methods = compared
    for name in ("metrics.csv", "results.md", "accuracy.png", "accuracy_time.png", "accuracy_traffic.png"):
        assert (out / name).is_file(), name

    text = (out / "results.md").read_text()
    assert "lightning-sfl compare --config" in text and "--trainer.max_epochs=2" in text
    assert "digits" in text and "rounds (`trainer.max_epochs`): 2" in text
    rows = _rows_by_method(text)
    assert set(rows) == {*methods, BROKEN}
    for m in methods:
        runs, final, best, to_target, time_to, traffic_to, comm, _notes = rows[m]
        assert runs == "2/2"
        for cell in (final, best):
            mean, std = map(float, re.fullmatch(r"(\d+\.\d\d) ± (\d+\.\d\d)", cell).groups())
            assert 0 <= mean <= 100 and std >= 0
        assert to_target == "—" or re.fullmatch(r"\d\.\d( \(1/2 seeds\))?", to_target)
        for cell in (time_to, traffic_to):  # the CLI's clock logs time, its CommunicationBytes the bytes
            assert (cell == "—") == (to_target == "—") and (cell == "—" or float(cell.split()[0]) > 0)
        assert float(re.fullmatch(r"(\d+\.\d) MB", comm).group(1)) > 0
    assert rows[BROKEN][:7] == ["0/2", "—", "—", "—", "—", "—", "—"]
    assert "failed: seed 0, 1" in rows[BROKEN][-1] and "RuntimeError: broken on purpose" in text

    with open(out / "metrics.csv") as f:
        metrics = list(csv.DictReader(f))
    assert len(metrics) == 2 * 2 * len(methods)  # 2 rounds × (methods × seeds) completed runs
    assert {(r["method"], r["seed"], r["round"]) for r in metrics} == {
        (m, s, r) for m in methods for s in ("0", "1") for r in ("1", "2")
    }
    for r in metrics:
        assert 0 <= float(r["test_acc"]) <= 1 and float(r["cumulative_bytes"]) > 0 and r["status"] == "ok"
    # the table's final accuracy is the mean of the last rounds in metrics.csv
    for m in methods:
        last = [float(r["test_acc"]) for r in metrics if r["method"] == m and r["round"] == "2"]
        assert rows[m][1].startswith(f"{100 * sum(last) / 2:.2f} ± ")

    with Image.open(out / "accuracy.png") as img:
        img.verify()
    with Image.open(out / "accuracy.png") as img:
        assert img.format == "PNG" and img.size[0] >= 400 and img.size[1] >= 300
    assert (out / "accuracy.png").stat().st_size > 10_000


def test_each_method_gets_only_the_init_args_its_class_accepts(compared):
    import yaml

    out, methods = compared
    for m in [*methods, BROKEN]:
        cls = compare.resolve_method(m)
        cfg = yaml.safe_load((out / "runs" / compare._dir_name(m) / "seed0" / "run_config.yaml").read_text())
        assert cfg["model"]["class_path"] == compare.class_path(cls)
        assert set(cfg["model"]["init_args"]) <= compare.init_parameters(cls)
        resolved = out / "runs" / compare._dir_name(m) / "seed0" / "logs" / "config.yaml"  # written by LightningCLI
        assert yaml.safe_load(resolved.read_text())["model"]["init_args"]["lr"] == 0.1  # the override applied
    assert f"`{BROKEN}` (`{compare.class_path(Broken)}`)" in (out / "results.md").read_text()
    assert "dropped: `model.init_args.concat_activations`" in (out / "results.md").read_text()


def test_identical_shards_and_draws_per_seed_across_methods(compared, run_dir):
    out, methods = compared
    per_seed = {}
    for seed in (0, 1):
        for m in methods:
            args = shlex.split((out / "runs" / compare._dir_name(m) / f"seed{seed}" / "command.txt").read_text())
            assert args[:2] == ["lightning-sfl", "fit"]
            assert f"--data.seed={seed}" in args and f"--seed_everything={seed}" in args
            cli = SFLCLI(args=args[2:], run=False)  # the run's parsed config, without training (no subcommand)
            dm = cli.datamodule
            shards = [idx.tolist() for idx in dm.client_indices]
            first = dm.plan(0, cli.model.schedule)[0]
            per_seed.setdefault(seed, []).append((shards, first.clients.tolist(), first.y.tolist()))
        assert all(p == per_seed[seed][0] for p in per_seed[seed]), f"seed {seed}: shards differ across methods"
    assert per_seed[0][0][0] != per_seed[1][0][0]  # and another seed gives other shards


def test_subprocess_jobs_reproduce_the_in_process_runs(compared, tmp_path, monkeypatch):
    out, methods = compared
    other = tmp_path / "jobs"
    # a lightning_sfl/ folder in the working directory (as at the repository root with a non-editable install,
    # where it lacks lightning_sfl.callbacks) must not shadow the installed package in the child processes
    decoy = tmp_path / "cwd" / "lightning_sfl"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise ImportError('the working directory shadowed the package')\n")
    monkeypatch.chdir(decoy.parent)
    _compare(
        [
            "--config",
            CONFIG,
            "--methods",
            methods[0],
            "--seeds",
            "0",
            "1",
            "--out",
            str(other),
            "--jobs",
            "2",
            "--overrides",
            "--trainer.max_epochs=2",
            "--model.lr=0.1",
        ]
    )
    assert (other / "runs" / compare._dir_name(methods[0]) / "seed0" / "log.txt").is_file()

    def key(path):
        with open(path) as f:
            return [
                (r["seed"], r["round"], r["test_acc"], r["cumulative_bytes"])
                for r in csv.DictReader(f)
                if r["method"] == methods[0]
            ]

    assert key(other / "metrics.csv") == key(out / "metrics.csv") != []
    assert not list(other.rglob("*.ckpt"))  # checkpoints removed unless --keep_checkpoints


def test_all_runs_failing_exits_nonzero_but_writes_results(tmp_path):
    out = tmp_path / "fail"
    with pytest.raises(SystemExit) as exc:
        _compare(["--config", CONFIG, "--methods", BROKEN, "--out", str(out), "--overrides", "--trainer.max_epochs=1"])
    assert exc.value.code == 1
    assert "0/1" in (out / "results.md").read_text() and (out / "accuracy.png").is_file()


@pytest.mark.extended  # ~35 s on two cores; --reuse of finished runs runs in CI below
def test_reuse_runs_only_missing_runs_and_reports_all(tmp_path, capsys):
    from lightning_sfl.compare import main as compare

    args = [
        "--config",
        str(REPO / "configs/digits/scala.yaml"),
        "--methods",
        "scala",
        "fedavg",
        "--seeds",
        "0",
        "--out",
        str(tmp_path),
        "--overrides",
        "--trainer.max_epochs=1",
    ]
    compare(args)
    first = (tmp_path / "metrics.csv").read_text()
    fedavg_dir = next((tmp_path / "runs").glob("fedavg*"))
    import shutil

    shutil.rmtree(fedavg_dir)
    capsys.readouterr()
    compare([*args[:-2], "--reuse", *args[-2:]])
    out = capsys.readouterr().out
    assert "reusing 1 finished runs" in out
    assert (tmp_path / "metrics.csv").read_text() == first
    assert "--reuse" not in (tmp_path / "results.md").read_text()  # it does not change results


def _logged_round_end(metrics_csv: Path, rounds: int) -> bool:
    """``metrics_csv`` (being written) holds the end-of-round training row of round ``rounds``."""
    try:
        with open(metrics_csv, newline="") as f:
            rows = list(csv.DictReader(f))
        return any(r.get("train/client_loss") and r.get("epoch") and float(r["epoch"]) >= rounds - 1 for r in rows)
    except (OSError, ValueError, csv.Error):  # not there yet, or a line half written
        return False


@pytest.mark.extended  # ~40 s on two cores; --reuse of another comparison's finished runs runs in CI
def test_reuse_continues_a_killed_run_from_its_last_checkpoint_exactly(tmp_path, capsys):
    """A comparison killed (SIGKILL to its process group) in its run's third round: ``--reuse`` continues the run
    from its last checkpoint (``fit --ckpt_path last``, its CSV log continued) and every round's metrics equal an
    uninterrupted comparison's. (The kill lands after round 2's end-of-round row: Lightning writes a round's checkpoint
    just before it logs the round's training metrics, and a kill between the two loses that row.)"""
    args = ["--config", CONFIG, "--methods", "scala", "--seeds", "0", "--overrides", "--trainer.max_epochs=40"]
    killed = ["--out", str(tmp_path / "killed")]
    cmd = [sys.executable, "-m", "lightning_sfl.cli", "compare", "--wandb", "false", *args[:6], *killed, *args[6:]]
    run = tmp_path / "killed" / "runs" / "scala" / "seed0"
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not _logged_round_end(run / "logs" / "metrics.csv", 2) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    holder = json.loads((run / ".lock").read_text())["pid"]  # the fit's worker, killed with the group: wait for it
    while time.monotonic() < deadline and Path(f"/proc/{holder}").exists():
        time.sleep(0.02)
    assert (run / "logs" / "checkpoints" / "last.ckpt").is_file() and not (run / "done").exists()
    written = (run / "run_config.yaml").stat().st_mtime_ns
    _compare([*args[:6], "--out", str(tmp_path / "killed"), "--reuse", *args[6:]])
    assert "continuing 1 unfinished ones from their last checkpoint" in capsys.readouterr().out
    assert (run / "run_config.yaml").stat().st_mtime_ns == written  # the folder was kept, not made anew
    _compare([*args[:6], "--out", str(tmp_path / "whole"), *args[6:]])
    assert (run / "done").exists()
    assert (tmp_path / "killed" / "metrics.csv").read_text() == (tmp_path / "whole" / "metrics.csv").read_text()


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["--data.alpha=two"], "error: --data.alpha"),  # the parser's check
        (["--model.defences+=NoPeek", "--model.defences.weight=-1"], "error: NoPeek: weight=-1.0 must be"),  # its own
        (["--data.dataset=cifar10", "--data.root={empty}"], "error: "),  # no dataset files: found when data loads
    ],
    ids=["parser", "constructor", "dataset"],
)
def test_a_bad_setting_is_one_line_before_any_folder(tmp_path, capsys, overrides, expected):
    out, empty = tmp_path / "out", tmp_path / "empty"
    empty.mkdir()
    overrides = [o.format(empty=empty) for o in overrides]
    with pytest.raises(SystemExit) as exc:
        _compare(["--config", CONFIG, "--methods", "splitfedv1", "scala", "--out", str(out), "--overrides",
                      *overrides])  # fmt: skip
    assert exc.value.code == 2 and not out.exists() and not any(empty.iterdir())
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(expected) and "Traceback" not in err[0], err


@pytest.mark.extended  # ~20 s on two cores; compare runs end to end in CI
def test_add_runs_only_the_new_method_and_reports_the_whole_comparison(tmp_path, capsys):
    def argv(*methods, extra=(), out=tmp_path):
        return ["--config", CONFIG, "--methods", *methods, "--seeds", "0", "--out", str(out), *extra,
                "--overrides", "--trainer.max_epochs=1"]  # fmt: skip

    first, second = _two_methods()
    _compare(argv(first, second, out=tmp_path / "both"))  # the reference: both methods in one command
    both = compare.read_metrics_csv(tmp_path / "both" / "metrics.csv")
    both_md = (tmp_path / "both" / "results.md").read_text().replace(str(tmp_path / "both"), str(tmp_path))
    _compare(argv(first))  # only the first, then the second added
    capsys.readouterr()
    _compare(argv(second, extra=["--add", "--jobs", "2"]))
    out = capsys.readouterr().out
    assert "keeping the runs of 1 method" in out and "1 runs (1 method × 1 seed)" in out
    added = compare.read_metrics_csv(tmp_path / "metrics.csv")
    assert [(r.method, r.seed) for r in added] == [(r.method, r.seed) for r in both]
    for a, b in zip(added, both):  # runs are deterministic per seed: adding = running both at once
        assert [x["test/acc"] for x in a.acc_records] == [x["test/acc"] for x in b.acc_records]
    md = (tmp_path / "results.md").read_text().replace(" --jobs 2", "")
    assert md.split("## Results")[0] == both_md.split("## Results")[0]  # same command, settings, method lines
    assert "--add" not in md


@pytest.mark.extended  # ~13 s on two cores; compare's refusals run in CI below
def test_add_refuses_another_command_or_missing_runs(tmp_path, capsys):
    base = ["--config", CONFIG, "--seeds", "0", "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as exc:
        _compare([*base, "--methods", "fedavg", "--add"])
    assert exc.value.code == 2 and "--add: no comparison" in capsys.readouterr().err
    _compare([*base, "--methods", "fedavg", "--overrides", "--trainer.max_epochs=1"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        _compare([*base, "--methods", "fedprox", "--add", "--overrides", "--trainer.max_epochs=2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "produced by another command" in err[0]
    other = ["--config", CONFIG, "--seeds", "0", "--out", str(tmp_path / "other")]
    _compare([*other, "--methods", "fedavg", BROKEN, "--overrides", "--trainer.max_epochs=1"])
    capsys.readouterr()  # the broken method's run failed before logging a row: it cannot be kept
    with pytest.raises(SystemExit) as exc:
        _compare([*other, "--methods", "fedprox", "--add", "--overrides", "--trainer.max_epochs=1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"lacks runs ({BROKEN} seed 0)" in err


@pytest.mark.extended  # ~15 s on two cores; in CI: compare end to end (above)
def test_an_out_made_by_another_comparison_is_refused_unless_add_or_reuse(tmp_path, capsys):
    """``compare`` into an ``--out`` holding another comparison stops with one line and changes nothing there; the
    same command again replaces its own results, and ``--reuse`` builds on the other's finished runs."""
    base = ["--config", CONFIG, "--seeds", "0", "--out", str(tmp_path), "--overrides", "--trainer.max_epochs=1"]
    _compare(["--methods", "fedavg", *base])
    written = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        _compare(["--methods", "fedprox", *base])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and err[0].startswith(f"error: --out {tmp_path} holds another")
    assert "--methods fedavg" in err[0] and not (tmp_path / "runs" / "fedprox").exists()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == written
    _compare(["--methods", "fedavg", *base])  # the same comparison again
    _compare(["--methods", "fedavg", "fedprox", "--reuse", *base])
    assert "reusing 1 finished runs" in capsys.readouterr().out


def test_argument_errors_are_one_line_like_fits(tmp_path, capsys):
    """An unknown method, an abbreviated option, an ``--out`` that is a file or a negative seed: one ``error:`` line
    (no usage dump), exit code 2, nothing written."""
    (tmp_path / "a_file").write_text("")
    cases = [
        (["--methods", "scala", "nosuch"], "error: unknown method 'nosuch'"),
        (["--method", "scala"], "error: unrecognized arguments: --method scala"),
        (["--out", str(tmp_path / "a_file")], "is a file, not a folder"),
        (["--seeds", "0", "-1"], "error: --seeds -1 must be in [0, 4294967295]"),
    ]
    for extra, expected in cases:
        out = ["--out", str(tmp_path / "o")] if "--out" not in extra else []
        with pytest.raises(SystemExit) as exc:
            compare.parse_args(["--config", CONFIG, *out, *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert exc.value.code == 2 and len(err) == 1 and expected in err[0], (extra, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


@pytest.mark.extended  # ~25 s on two cores: a check of torch's threads in a job, not of compare's results
def test_one_job_on_several_torch_threads_finishes(tmp_path):
    """``compare --jobs 1`` with runs on two torch threads (a config without ``torch_threads: 1``, e.g. every
    Fashion-MNIST one): planning builds the runs' data and methods in this process, then the warm worker is forked
    from it; a parallel region run on two threads before the fork left the worker's first one waiting forever."""
    cmd = [sys.executable, "-m", "lightning_sfl.cli", "compare", "--wandb", "false", "--config"]
    cmd += [str(REPO / "configs/digits/scala.yaml")]
    cmd += ["--methods", "scala", "--seeds", "0", "--jobs", "1", "--out", str(tmp_path / "o")]
    cmd += ["--overrides", "--trainer.max_epochs=1", "--torch_threads=2"]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker too
        out, _ = proc.communicate()
        pytest.fail(f"compare --jobs 1 on two threads did not finish in 240 s:\n{out[-2000:]}")
    assert proc.returncode == 0, out[-2000:]
    assert "[compare 1/1] scala seed 0: ok" in out


@pytest.mark.parametrize(
    "config, out, expected",
    [
        ("broken.yaml", "o", "error: --config {tmp}/broken.yaml: not valid YAML ("),
        ("empty.yaml", "o", "error: --config {tmp}/empty.yaml: expected a YAML mapping of settings (model:, data:, …), "
         "found an empty file"),
        ("list.yaml", "o", "error: --config {tmp}/list.yaml: expected a YAML mapping of settings (model:, data:, …), "
         "found a YAML list"),
        ("nope.yaml", "o", "error: --config: File does not exist: '{tmp}/nope.yaml'"),
        (CONFIG, "/proc/nope/x", "error: --out='/proc/nope/x' "),  # os.access says root may write in /proc
    ],
    ids=["broken", "empty", "list", "missing", "out"],
)  # fmt: skip
def test_a_config_file_or_an_out_that_cannot_be_used_is_one_line_and_nothing_is_written(
    tmp_path, capsys, config, out, expected
):
    (tmp_path / "broken.yaml").write_text("data: [1, 2\nmodel: 3\n")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    before = sorted(tmp_path.iterdir())
    with pytest.raises(SystemExit) as exc:
        _compare(["--config", str(tmp_path / config), "--methods", "fedavg", "--out", str(tmp_path / out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and err[0].startswith(expected.format(tmp=tmp_path)), err
    assert sorted(tmp_path.iterdir()) == before and not Path("/proc/nope").exists()
