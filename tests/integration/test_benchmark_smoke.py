"""The benchmarks run end to end on small settings: exit 0, their summary lines and a JSON report with every number
(client scaling: ``--quick --repeats 1``, about 25-40 s on one CPU thread, and equal weights across the
implementations it times). The README's round-cost table against the committed measurement:
``tests/studies/test_benchmark_documented.py``."""

from __future__ import annotations

import doctest
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
from _helpers import REPO

RATIOS = {
    "cnn_ours_over_centralized",
    "cnn_naive_over_ours",
    "alexnet_ours_over_naive",
    "cnn_scaling",
    "alexnet_scaling",
    "alexnet_memory",
    "alexnet_stacked_memory",
}


#: The ratios that need the memory probes (fresh processes, ~7 s each on 2 cores): the smoke run skips them
#: (``--no-memory``) and :func:`test_client_scaling_memory_probe_reads_a_peak` runs one probe.
MEMORY_RATIOS = {"alexnet_memory", "alexnet_stacked_memory"}


@pytest.mark.extended
def test_client_scaling_quick(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "client_scaling.py"), "--quick", "--repeats", "1", "--no-memory"]
    proc = subprocess.run(
        [*cmd, "--threads", "1", "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "==== summary" in proc.stdout, proc.stdout[-3000:]
    for line in ("ours / centralized", "naive / ours", "ours / naive"):
        assert line in proc.stdout
    report = json.loads(out.read_text())
    assert set(report["ratios"]) == RATIOS
    for key, r in report["ratios"].items():
        if key in MEMORY_RATIOS:
            assert r["value"] is None and r["pass"] is None, key
            continue
        assert r["value"] is not None and r["value"] > 0, key
        assert r["pass"] in (True, False), key
    # the timed implementations did the same work: same weights after one iteration from the same start
    assert report["weights_ok"] is True
    assert all(c["weights_check"]["ok"] for c in report["configs"])
    assert {c["clients"] for c in report["configs"]} == {10, 50, 100}


@pytest.mark.extended  # ~11 s on two cores: a benchmark run
def test_client_scaling_memory_probe_reads_a_peak():
    """One memory probe as the full benchmark runs them: a fresh process builds a round of 10 clients and runs one
    local iteration; its peak (VmHWM - VmRSS) is a positive number of bytes, below 4 GiB."""
    spec = {"impl": "ours-stacked", "arch": "cnn_small", "clients": 10, "batch": 64, "device": "cpu", "threads": 1}
    result = _load_benchmark("client_scaling").run_probe({**spec, "glibc_defaults": False})
    assert "error" not in result, result
    assert 0 < result["peak_bytes"] < 4 * 2**30 and result["clients"] == 10, result


@pytest.mark.extended
def test_async_arrivals_benchmark_runs_and_both_paths_agree(tmp_path):
    out = tmp_path / "async.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "async_arrivals.py"), "--clients", "10", "--concurrency", "4"]
    proc = subprocess.run([*cmd, "--rounds", "2", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "C=4: batched / one at a time (arrivals per second):" in proc.stdout
    (setting,) = json.loads(out.read_text())["settings"]
    arrivals = {r["arrivals"] for r in setting["paths"].values()}
    assert len(arrivals) == 1 and arrivals.pop() > 0
    steps = {name: r["steps"] for name, r in setting["paths"].items()}
    assert steps["batched_stacked"] == steps["batched_sequential"] < steps["one_at_a_time"]
    assert setting["ratio"] > 0 and setting["ceiling"] > 0 and setting["float64_max_weight_diff"] < 1e-10
    assert 0 < setting["batched_floor_seconds"] < setting["paths"]["batched_stacked"]["seconds"]


@pytest.mark.extended
def test_framework_overhead_benchmark_runs_and_its_plain_loop_learns(tmp_path):
    """``benchmarks/framework_overhead.py --quick`` times both sides (exit 0, the ratio lines, a JSON report), and its
    plain-PyTorch SCALA loop is real training: after 20 rounds its test error on digits is below a quarter of its
    error after one round (measured: 0.045 against 0.87), a bar set by the same loop on the same CPU."""
    out = tmp_path / "overhead.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "framework_overhead.py"), "--quick", "--json", str(out)]
    csv_only = "--trainer.logger lightning.pytorch.loggers.CSVLogger --trainer.logger.save_dir runs"
    proc = subprocess.run([*cmd, f"--ours-args={csv_only}"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for line in ("per-round ratio ours / plain:", "start-up ratio ours / plain:", "lightning-sfl --help:", csv_only):
        assert line in proc.stdout, proc.stdout
    report = json.loads(out.read_text())
    assert report["ours_args"] == csv_only.split()  # our side ran with them (an unknown option would fail the run)
    for side in ("ours", "plain"):
        assert report[side]["one_round_s"] > 0 and report[side]["long_run_s"] > 0
    assert report["help_s"] > 0 and report["rounds"] == 3
    plain = subprocess.run([*cmd[:2], "--plain", "--rounds", "20"], capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr[-3000:]
    accuracy = float(plain.stdout.split("test accuracy ")[1].split()[0])
    one = subprocess.run([*cmd[:2], "--plain", "--rounds", "1"], capture_output=True, text=True, timeout=300)
    first = float(one.stdout.split("test accuracy ")[1].split()[0])
    assert 1 - accuracy < 0.25 * (1 - first), (plain.stdout, one.stdout)
    # torch's nn.MaxPool2d instead of the zoo's: other kernels, bitwise the same arithmetic, the same accuracy
    torch_pool = [*cmd[:2], "--plain", "--rounds", "20", "--plain-pool", "torch"]
    plain_torch = subprocess.run(torch_pool, capture_output=True, text=True, timeout=300)
    assert plain_torch.returncode == 0 and plain_torch.stdout == plain.stdout, plain_torch.stderr[-3000:]


def _load_benchmark(name: str):
    if str(REPO / "benchmarks") not in sys.path:  # as when run as a script: its siblings are importable
        sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import does: dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_onednn_anatomy_sorts_the_log_by_kind():
    """:func:`summarize` against hand-added totals: weight reorders are those of a convolution weight's shape (plain or
    grouped), every other reorder is an activation's, and only ``exec`` records count (both log formats)."""
    anatomy = _load_benchmark("onednn_anatomy")
    assert doctest.testmod(anatomy, optionflags=doctest.ELLIPSIS).failed == 0
    head = "onednn_verbose,v1,primitive,exec,cpu"
    log = [
        f"{head},reorder,jit:uni,undef,src dst,attr,,14x64x32x3x3,0.5",  # grouped weight
        f"{head},reorder,jit:uni,undef,src dst,attr,,64x32x3x3,0.25",  # plain weight
        f"{head},reorder,jit:blk,undef,src dst,attr,,64x64x3x3,0.125",  # an activation of another shape
        f"{head},convolution,jit:avx512_core,backward_weights,src wei dst,attr,alg,mb2_g14ic448oc896,1.5",
        "onednn_verbose,exec,cpu,convolution,gemm:jit,forward_training,src,attr,alg,mb1_ic1oc32,2.0",  # older format
        "onednn_verbose,v1,primitive,create:cache_hit,cpu,reorder,jit:uni,undef,src dst,attr,,64x32x3x3,9.0",
        f"{head},matmul,brg:avx512_core,undef,src wei dst,attr,,64x10:10x128,0.0625",
        "some other output,exec,1.0",
    ]
    totals = anatomy.summarize(log, anatomy.weight_shapes(torch.nn.Conv2d(32, 64, 3)))
    assert totals == {"convolution": 3.5, "weight reorder": 0.75, "other reorder": 0.125, "other": 0.0625}


@pytest.mark.parametrize("flag", ["--steps=0", "--clients=0", "--batch=0", "--warmup=-1", "--threads=-1"])
def test_onednn_anatomy_rejects_bad_counts(flag, capsys):
    anatomy = _load_benchmark("onednn_anatomy")
    with pytest.raises(SystemExit) as exc:
        anatomy.main([flag])
    assert exc.value.code == 2
    assert flag.split("=")[0] in capsys.readouterr().err


@pytest.mark.extended
def test_onednn_anatomy_runs(tmp_path):
    """``benchmarks/onednn_anatomy.py`` end to end on a small round: per-kind oneDNN times for two implementations;
    where oneDNN runs the convolutions, the stacked bank's weight reorders (10 clients' weights) cost more than the
    centralized model's (one copy)."""
    out = tmp_path / "anatomy.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "onednn_anatomy.py"), "--clients", "10", "--steps", "3"]
    cmd += ["--warmup", "1", "--impls", "ours-stacked", "centralized", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if not torch.backends.mkldnn.is_available():
        assert "no oneDNN" in proc.stdout
        return
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"ours-stacked", "centralized"}
    assert all(r["wall_ms"] > 0 for r in results.values())
    if results["centralized"]["convolution"] == 0:  # a CPU whose torch does not log convolutions through oneDNN
        assert "logged no convolution" in proc.stdout
        return
    assert "ours-stacked - centralized" in proc.stdout
    assert results["ours-stacked"]["weight reorder"] > results["centralized"]["weight reorder"] > 0


@pytest.mark.extended
def test_stacked_floor_runs_and_does_the_same_arithmetic(tmp_path):
    """``benchmarks/stacked_floor.py`` end to end on a small round: its hand-written iteration ends with the same
    weights as the library's stacked bank (float64), and it reports every time and ratio."""
    out = tmp_path / "floor.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "stacked_floor.py"), "--clients", "10", "--repeats", "2"]
    cmd += ["--warmup", "1", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["weights_ok"] and report["weights_max_diff_over_update"] < 1e-6
    assert set(report["median_s"]) == {"ours-stacked", "hand-written", "naive", "centralized"}
    assert all(v > 0 for v in report["median_s"].values())
    med, ratios = report["median_s"], report["ratios"]
    assert ratios["naive_over_hand_written"] == pytest.approx(med["naive"] / med["hand-written"])
    assert "hand-written = ours-stacked: OK" in proc.stdout


@pytest.mark.parametrize("args", [["--clients=0"], ["--repeats=0"], ["--clients=65", "--batch=64"]])
def test_stacked_floor_rejects_bad_counts(args, capsys):
    floor = _load_benchmark("stacked_floor")
    with pytest.raises(SystemExit) as exc:
        floor.main(args)
    assert exc.value.code == 2
    assert args[0].split("=")[0] in capsys.readouterr().err


def test_client_scaling_grid_gives_every_client_a_row():
    """``--clients 10,50,100`` times both models at each S, with ``B >= 2 S`` rows (so every ``B_k >= 1``)."""
    scaling = _load_benchmark("client_scaling")
    grid = scaling.configs(False, [100, 10, 50])
    assert [(c.arch, c.clients) for c in grid] == [(a, s) for a in scaling.MODELS for s in (10, 50, 100)]
    assert all(c.batch >= 2 * c.clients for c in grid)
    assert {c.batch for c in grid if c.arch == "alexnet_cifar"} == {320}
    assert [c.batch for c in grid if c.arch == "cnn_small"] == [64, 100, 200]


@pytest.mark.extended
def test_trial_runner_benchmark_times_both_sides(tmp_path):
    """``benchmarks/trial_runner.py --only "compare j1" --repeats 1`` times a 2-round fit and a compare of 6 methods
    (exit 0) and reports their ratio, in its table and its JSON file."""
    out = tmp_path / "trials.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "trial_runner.py"), "--only", "compare j1", "--repeats", "1",
           "--json", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["seconds"]) == {"fit", "compare j1"} and all(v > 0 for v in report["seconds"].values())
    ratio = report["ratios"]["compare j1 / fit"]["value"]
    assert ratio == pytest.approx(report["seconds"]["compare j1"] / report["seconds"]["fit"])
    assert f"{'compare j1 / fit':<34} {ratio:5.2f}" in proc.stdout


def test_round_cost_cases_name_real_configs_and_refuse_bad_counts(capsys):
    """Every setting of ``benchmarks/round_cost.py`` names config files that exist (its options are checked against
    ``fit``'s by ``test_doc_options``); its per-round arithmetic (doctest); bad counts are one usage error."""
    cost = _load_benchmark("round_cost")
    assert doctest.testmod(cost).failed == 0
    for _, settings in cost.CASES.values():
        for setting in settings:
            configs = [a for a in setting.args if a.startswith("configs/")]
            assert configs and all((REPO / c).is_file() for c in configs), setting
    for args in (["--repeats=0"], ["--rounds=1"]):
        with pytest.raises(SystemExit) as exc:
            cost.main(args)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and f"{args[0]}: must be" in err and err.count("must be") == 1, err


@pytest.mark.extended
def test_round_cost_benchmark_times_both_settings(tmp_path):
    """``benchmarks/round_cost.py --quick`` times both digits settings (exit 0) and reports per-round figures and
    their ratios, in its table and its JSON file."""
    out = tmp_path / "cost.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "round_cost.py"), "--quick", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (result,) = json.loads(out.read_text())
    figures = result["settings"]
    assert set(figures) == {"scala", "fedavg"} and result["rounds"] == 31
    assert all(f["wall_per_round_s"] > 0 and f["cpu_per_round_s"] > 0 for f in figures.values())
    fedavg = figures["fedavg"]
    assert fedavg["cpu_ratio"] == pytest.approx(fedavg["cpu_per_round_s"] / figures["scala"]["cpu_per_round_s"])
    assert f"{fedavg['cpu_ratio']:>11.2f}" in proc.stdout.splitlines()[-1]
    assert not list(tmp_path.glob("runs"))  # every run wrote into its own temporary folder
    assert result["machine"]["cores"] == os.cpu_count() and torch.__version__.startswith(result["machine"]["torch"])
