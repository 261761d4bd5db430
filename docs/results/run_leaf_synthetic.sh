#!/usr/bin/env bash
# Reproduces docs/results/leaf_synthetic/*: FedLC's Table 4 on Synthetic(λ, µ) = (0,0), (0.5,0.5), (1,1) at the
# paper's scale (FedProx's generator, 100 clients, power-law sizes, multinomial logistic regression 60 -> 10,
# 300 rounds, SGD lr 0.01, 5 seeds): FedAvg, FedProx, SCAFFOLD, FedNova, FedOpt (FedAdam, Reddi et al.'s Algorithm 2
# with our defaults), FedRS and FedLC. FedLC gives neither clients per round nor local steps: 10 clients a round
# (ρ = 0.1), T = 5 local steps of B = 1280 rows summed over them (128 a client on average, FedLC's batch), our choices
# (configs/leaf_synthetic/fedavg.yaml). Each seed draws its own data (--data.seed = the run's seed). About 15 minutes
# on two cores for the 105 runs, 2 more for the FedLC experiment, 5 for the ceiling.
#   bash docs/results/run_leaf_synthetic.sh             (from the repository root, with the package installed)
#   bash docs/results/run_leaf_synthetic.sh --reuse     (keep finished runs, continue unfinished ones: same config)
#   ONLY=synthetic_1_1 bash docs/results/run_leaf_synthetic.sh --reuse      (one setting)
set -euo pipefail
METHODS=(fedavg fedprox scaffold fednova fedadam fedrs fedlc)
run() {  # NAME JOBS METHODS-AND-OVERRIDES...
  out=$1 jobs=$2; shift 2
  if [ -n "${ONLY:-}" ] && [ "$ONLY" != "${out%_fedlc_floor1}" ]; then return; fi
  lightning-sfl compare --config configs/leaf_synthetic/fedavg.yaml --seeds 0 1 2 3 4 --jobs "$jobs" \
    --out "docs/results/leaf_synthetic/$out" "${EXTRA[@]}" "$@"
}
EXTRA=("$@")
for lm in "0 0" "0.5 0.5" "1 1"; do
  set -- $lm
  run "synthetic_${1}_${2}" 2 --methods "${METHODS[@]}" --overrides --data.leaf_lambda="$1" --data.leaf_mu="$2"
  # The experiment behind FedLC's place in the ordering: a missing class counted as one sample (a finite margin τ)
  # instead of the equation's limit (n = 0: an infinite margin, the class out of the client's softmax).
  run "synthetic_${1}_${2}_fedlc_floor1" 1 --methods fedlc --overrides --data.leaf_lambda="$1" --data.leaf_mu="$2" \
    --model.missing_class_floor=1
done
# The experiment behind the ordering across (λ, µ): the centralised ceiling of the model on each setting's data.
if [ -z "${ONLY:-}" ]; then python docs/results/leaf_synthetic/ceiling.py > docs/results/leaf_synthetic/ceiling.md; fi
