#!/usr/bin/env bash
# Reproduces docs/results/digits/*: every registered method x 3 seeds on six digits settings, 50 rounds each
# (20 clients with participation 0.25, or 50 clients with participation 0.1 as in the SCALA paper's §5.4;
# B=64, T=5, SGD lr 0.05, cnn_small cut at s2 for the split methods), then the results page docs/results/digits.md.
#   bash docs/results/run_digits.sh            (from the repository root, with the package installed)
#   bash docs/results/run_digits.sh --reuse    (keep finished runs, continue unfinished ones: same config)
set -euo pipefail
run() {
  out=$1; shift
  lightning-sfl compare --config configs/digits/scala.yaml --seeds 0 1 2 --jobs 2 --target_acc 0.9 \
    --out "docs/results/digits/$out" "${EXTRA[@]}" --overrides --trainer.max_epochs=50 "$@"
}
EXTRA=("$@")
run quantity_a2_k20
run quantity_a1_k20 --data.alpha=1
run dirichlet_b0.1_k20 --data.partition=dirichlet --data.beta=0.1
run quantity_a2_k50 --data.num_clients=50 --data.participation=0.1
run quantity_a1_k50 --data.num_clients=50 --data.participation=0.1 --data.alpha=1
run dirichlet_b0.1_k50 --data.num_clients=50 --data.participation=0.1 --data.partition=dirichlet --data.beta=0.1
python docs/results/summarize.py
