#!/usr/bin/env bash
# Reproduces docs/results/gas/*: GAS against its baselines (issue 13) on the GAS paper's simulated wireless cell,
# 3 seeds, on digits (100 global iterations) and MNIST-5k (50), each under shard skew (2 shards per client) and
# Dirichlet skew (beta = 0.1; the GAS paper's alpha = 0.1). Setting (configs/digits/gas.yaml, scaled down from the
# paper's K=20, C=10, E=20, B=32): K = 20 clients, C = 5 in flight (the synchronous methods: 5 per round), E = 5 local
# iterations, B = 16 rows per client (the synchronous methods share B·C = 80 rows, split by |D_k|), Q_s = Q_c = 5,
# SGD lr 0.01, momentum 0.9, weight decay 5e-4, f_k ~ U[1e9, 1e10] FLOP/s on a shared 10 MHz uplink; split rounds
# wait for every client at every local iteration (--clock.barrier iteration), so that accuracy can be read against
# the simulated time (accuracy_time.png) as in the paper's Fig. 3. One global iteration ("round") = one aggregation.
#   bash docs/results/run_gas.sh                    (from the repository root, with the package installed)
#   bash docs/results/run_gas.sh --reuse            (keep finished runs, continue unfinished ones: same config)
#   ONLY=digits_shards2 bash docs/results/run_gas.sh --reuse    (one setting)
set -euo pipefail
METHODS=(gas async_sfl fedbuff ca2fl fedavg minibatch_sfl s2fl)
COMMON=(--model.concurrency=5 --model.flush_every=5 --model.aggregate_every=5 --model.client_batch_size=16
  --model.local_iters=5 --model.lr=0.01 --model.momentum=0.9 --model.weight_decay=5e-4 --model.covariance=diag
  --data.num_clients=20 --data.participation=0.25 --data.batch_size=80 --clock.flops_high=1e10
  --clock.barrier=iteration)
run() {  # NAME CONFIG ROUNDS OVERRIDES...
  out=$1 config=$2 rounds=$3; shift 3
  if [ -n "${ONLY:-}" ] && [ "$ONLY" != "$out" ]; then return; fi
  lightning-sfl compare --config "$config" --methods "${METHODS[@]}" --seeds 0 1 2 --jobs 2 \
    --out "docs/results/gas/$out" "${EXTRA[@]}" --overrides --trainer.max_epochs="$rounds" "${COMMON[@]}" "$@"
}
EXTRA=("$@")
SHARDS=(--data.partition=shards --data.shards_per_client=2)
DIRICHLET=(--data.partition=dirichlet --data.beta=0.1)
run digits_shards2 configs/digits/gas.yaml 100 "${SHARDS[@]}"
run digits_dirichlet0.1 configs/digits/gas.yaml 100 "${DIRICHLET[@]}"
run mnist5k_shards2 configs/mnist5k/gas.yaml 50 "${SHARDS[@]}"
run mnist5k_dirichlet0.1 configs/mnist5k/gas.yaml 50 "${DIRICHLET[@]}"
