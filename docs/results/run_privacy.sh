#!/usr/bin/env bash
# Reproduces docs/results/privacy/* (issue 15): how much the activations at the cut leak to a model-inversion attacker,
# SCALA against SCALA-PE (SCALA journal §5.7, Table VI) and other split methods, 3 seeds, on digits (configs/digits/
# scala.yaml: cnn_small cut at s2, 20 clients, quantity skew alpha=2, 5 per round, B=64, T=5, lr 0.05, 100 rounds) and
# MNIST-5k (configs/mnist5k/scala.yaml: the papers' 28x28 AlexNet cut at s2, the same clients, 50 rounds, at the
# papers' lr 0.01, where every method here trains stably; at the config's lr 0.05 SplitFedV1 diverges on MNIST-5k).
# Each setting: training with `lightning-sfl compare` (checkpoints kept), then `lightning-sfl attack` on every run's
# final client half (a 64-channel decoder trained 50 epochs on (activation, image) pairs of the training split, scored
# on the test split; seed = the run's seed), then docs/results/summarize_privacy.py writes the tables and figures.
# Variants that change a method's settings run as settings of their own (a folder each; the defences are written as
# --model.defences since they became parts, which the runs in docs/results/privacy predate and record as the options
# --model.bottleneck_channels and --model.inversion_threshold): SCALA with the bottleneck
# alone (no regulariser), and on MNIST-5k SCALA-PE with the hinge threshold tau lowered to where it engages.
#   bash docs/results/run_privacy.sh                  (from the repository root, with the package installed)
#   bash docs/results/run_privacy.sh --reuse          (keep finished trainings, continue unfinished ones; attacks
#                                                      whose metrics.json is newer than their checkpoint are kept)
#   ONLY=digits bash docs/results/run_privacy.sh --reuse        (the settings whose name starts with digits)
set -euo pipefail
OUT=docs/results/privacy
run() {  # NAME CONFIG "METHODS" OVERRIDES...
  out=$1 config=$2 methods=$3; shift 3
  if [ -n "${ONLY:-}" ] && [[ "$out" != "$ONLY"* ]]; then return; fi
  # shellcheck disable=SC2086  # METHODS is a list of names
  lightning-sfl compare --config "$config" --methods $methods --seeds 0 1 2 --jobs 2 --keep_checkpoints \
    --out "$OUT/$out" "${EXTRA[@]}" --overrides "$@"
  find "$OUT/$out/runs" -path '*/logs/checkpoints/last.ckpt' | sort | xargs -P 2 -I{} sh -c '
    run=$(dirname "$(dirname "$(dirname "$1")")")
    [ "$run/attack/metrics.json" -nt "$1" ] && exit 0
    lightning-sfl attack --ckpt_path "$1" --seed "${run##*seed}" --out "$run/attack" | tail -n 1' _ {}
}
EXTRA=("$@")
MNIST=(--model.lr=0.01)
BOTTLENECK=(--model.defences+=Bottleneck --model.defences.channels=8)  # SCALA-PE's bottleneck alone
run digits configs/digits/scala.yaml "scala scala_pe splitfedv1"
run digits_bottleneck configs/digits/scala.yaml "scala" "${BOTTLENECK[@]}"
run mnist5k configs/mnist5k/scala.yaml "scala scala_pe splitfedv1" "${MNIST[@]}"
run mnist5k_bottleneck configs/mnist5k/scala.yaml "scala" "${MNIST[@]}" "${BOTTLENECK[@]}"
run mnist5k_tau0.1 configs/mnist5k/scala.yaml "scala_pe" "${MNIST[@]}" "${BOTTLENECK[@]}" \
  --model.defences+=InversionRegulariser --model.defences.threshold=0.1
python docs/results/summarize_privacy.py
