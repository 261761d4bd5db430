#!/usr/bin/env bash
# The GPU figures of issue 37 item 4, in one go on one CUDA device (run from the repository root, package installed,
# Fashion-MNIST's four .gz files under data/FashionMNIST/raw for the fit):
#   bash benchmarks/gpu_figures.sh [OUT_DIR]          (default docs/results/gpu_figures)
# Writes to OUT_DIR:
#   device.txt            the GPU, driver, torch, Lightning, Python
#   client_scaling.txt    benchmarks/client_scaling.py --device cuda --clients 10,50,100 (cnn_small and AlexNet at
#                         S = 10, 50, 100: ours-sequential, ours-stacked, naive, centralized; memory probes)
#   client_scaling.json   every number of it
#   framework_overhead.*  benchmarks/framework_overhead.py --device cuda --rounds 21 --repeats 3, ours with the CSV
#                         logger only (the GPU machine need not have wandb)
#   fit_20_rounds.txt     configs/fashion_mnist/scala.yaml (AlexNet, K = 100, B = 320, T = 5) for 20 rounds on the GPU,
#                         evaluated every 5 rounds, its wall time and every warning-looking line it printed
# One part that fails or runs out of time (PART_TIMEOUT seconds, default 240) leaves the others to run.
set -uo pipefail
OUT_DIR=${1:-docs/results/gpu_figures}
T=${PART_TIMEOUT:-240}
mkdir -p "$OUT_DIR"
python3 - >"$OUT_DIR/device.txt" <<'PY'
import platform, subprocess, torch, lightning
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip() if torch.cuda.is_available() else ""
print(f"device: {gpu} ({smi})\ntorch {torch.__version__}, CUDA {torch.version.cuda}, lightning {lightning.__version__}, "
      f"Python {platform.python_version()}, {len(__import__('os').sched_getaffinity(0))} CPU cores")
PY
cat "$OUT_DIR/device.txt"
CSV=(--trainer.logger lightning.pytorch.loggers.CSVLogger --trainer.logger.save_dir runs)

echo "== client_scaling"
timeout "$T" python3 benchmarks/client_scaling.py --device cuda --clients 10,50,100 \
  --json "$OUT_DIR/client_scaling.json" 2>&1 | tee "$OUT_DIR/client_scaling.txt"

echo "== framework_overhead"
timeout "$T" python3 benchmarks/framework_overhead.py --device cuda --rounds 21 --repeats 3 \
  --ours-args="${CSV[*]}" --json "$OUT_DIR/framework_overhead.json" 2>&1 | tee "$OUT_DIR/framework_overhead.txt"

echo "== fit, 20 rounds"
RUN=$(mktemp -d)
start=$(date +%s.%N)
timeout "$T" lightning-sfl fit --config configs/fashion_mnist/scala.yaml --data.root "$PWD/data" \
  --trainer.max_epochs=20 --trainer.check_val_every_n_epoch=5 --trainer.accelerator=gpu --trainer.devices=1 \
  --trainer.default_root_dir "$RUN" --trainer.enable_progress_bar=false "${CSV[@]}" >"$RUN/out.txt" 2>&1
rc=$?
end=$(date +%s.%N)
{
  echo "lightning-sfl fit --config configs/fashion_mnist/scala.yaml --trainer.max_epochs=20 (GPU, CSV logger): exit $rc,"\
    "$(python3 -c "print(f'{$end - $start:.1f}')") s wall, process start to exit"
  echo "test accuracy (round: acc):"
  find "$RUN" -name metrics.csv -exec python3 -c "
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r.get('test/acc')]
print('  ' + ', '.join(f\"{float(r['round']):.0f}: {float(r['test/acc']):.4f}\" for r in rows))" {} \;
  echo "warning-looking lines printed:"
  grep -nE "Warning\b|WARNING|[Dd]eprecat|💡|It is recommended|\.py:[0-9]+: |Tensor Cores" "$RUN/out.txt" || echo "  none"
  echo "--- last lines of the output"
  tail -n 15 "$RUN/out.txt"
} | tee "$OUT_DIR/fit_20_rounds.txt"
