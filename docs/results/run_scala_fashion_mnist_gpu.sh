#!/usr/bin/env bash
# SCALA's main setting at the paper's own scale, on one GPU (issue 34, item 6): configs/fashion_mnist/scala.yaml as it
# is — Fashion-MNIST, quantity skew α=2, K = 100 clients, ρ = 0.1, B = 320, T = 5, SGD lr 0.01, the 14-layer AlexNet
# for 28x28 cut at s2, 500 rounds — with test accuracy on the 10,000 test images every 5 rounds instead of every round.
# SCALA against FedAvg (the paper's Table 4 baseline) and against SplitFedV2 and FedDyn, the two methods that end above
# SCALA in the CPU study (docs/results/scala_fashion_mnist, FedLC's small CNN, 200 rounds).
#   bash docs/results/run_scala_fashion_mnist_gpu.sh                 (seed 0)
#   SEEDS="0 1 2" bash docs/results/run_scala_fashion_mnist_gpu.sh --reuse
# Writes docs/results/scala_fashion_mnist_gpu/quantity_a2/ (SCALA, FedAvg, SplitFedV2) and quantity_a2_feddyn/ (FedDyn),
# each with device.txt (the GPU, driver, torch). FedDyn keeps every client's ∇L_k (100 x 3.87 M parameters, 1.55 GB),
# which every checkpoint carries: written every round (the default) its checkpoints cost ~5x the training on an H200,
# so its run checkpoints every 100 rounds (the same training; only a resume would start further back).
set -euo pipefail
OUT_DIR=${OUT_DIR:-docs/results/scala_fashion_mnist_gpu}
read -r -a SEED_LIST <<<"${SEEDS:-0}"
mkdir -p "$OUT_DIR/quantity_a2" "$OUT_DIR/quantity_a2_feddyn"
python3 - >"$OUT_DIR/device.txt" <<'EOF'
import platform, subprocess, torch, lightning
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip() if torch.cuda.is_available() else ""
print(f"device: {gpu} ({smi})\ntorch {torch.__version__}, CUDA {torch.version.cuda}, lightning {lightning.__version__}, "
      f"Python {platform.python_version()}")
EOF
cat "$OUT_DIR/device.txt"
cp "$OUT_DIR/device.txt" "$OUT_DIR/quantity_a2/" && mv "$OUT_DIR/device.txt" "$OUT_DIR/quantity_a2_feddyn/"
compare() {  # FOLDER METHODS... (one process per method and seed, all at once on the one GPU)
  out=$1; shift
  lightning-sfl compare --config configs/fashion_mnist/scala.yaml --methods "$@" --seeds "${SEED_LIST[@]}" \
    --jobs "$(( $# * ${#SEED_LIST[@]} ))" --out "$OUT_DIR/$out" "${EXTRA[@]}" --overrides \
    --trainer.check_val_every_n_epoch=5 ${OVERRIDES:-}  # OVERRIDES="--trainer.max_epochs=2": a quick check
}
EXTRA=("$@")
compare quantity_a2 scala fedavg splitfedv2
OVERRIDES="${OVERRIDES:-} --checkpoint.every_n_epochs=100" compare quantity_a2_feddyn feddyn
