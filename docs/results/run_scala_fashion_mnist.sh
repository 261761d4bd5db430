#!/usr/bin/env bash
# Reproduces docs/results/scala_fashion_mnist/*: the SCALA paper's Tables 4 and 6 (conference version) on Fashion-MNIST,
# quantity skew α=2 and α=4, Dirichlet β=0.05 and β=0.1: SCALA against FedAvg, FedProx, FedDyn, FedDecorr, FedLogit and
# FedLC (Table 4) and against SplitFedV1, SplitFedV2, SplitFedV3 and SFLLocalLoss (Table 6), 3 seeds, with the paper's
# setting (configs/fashion_mnist/scala.yaml: K = 100 clients, ρ = 0.1, B = 320 rows a step summed over the round's
# clients, T = 5 local iterations, SGD lr 0.01) except, for two CPU cores:
#   - the model: FedLC's Table 8 CNN for 28x28 (cnn_fedlc, 21,840 parameters) instead of the 14-layer AlexNet, cut
#     after its first conv block (s1: the server holds the second conv block and both linear layers, as SCALA's cut
#     leaves AlexNet's deeper convolutions on the server); measured on two cores with a test every round, 19.0
#     CPU-core seconds a round with AlexNet, 0.83 with the CNN (benchmarks/round_cost.py);
#   - ROUNDS global rounds instead of the paper's 500 (default 200), test accuracy on the 10,000 test images every 5
#     rounds instead of every round (measured, paired on two cores: evaluating every round costs 1.6-2.1x the time).
#   bash docs/results/run_scala_fashion_mnist.sh            (from the repository root, with the package installed)
#   bash docs/results/run_scala_fashion_mnist.sh --reuse    (keep finished runs, continue unfinished ones: same config)
#   ONLY=quantity_a2 bash docs/results/run_scala_fashion_mnist.sh --reuse    (one setting)
#   ONLY=quantity_a2_500rounds bash docs/results/run_scala_fashion_mnist.sh    (SCALA, SplitFedV2, FedDyn, 500 rounds)
#   ONLY=quantity_a2_lr0.05 bash docs/results/run_scala_fashion_mnist.sh       (SCALA, SplitFedV2 at lr 0.05)
#   ONLY=quantity_a2_fedprox_mu0.1 bash docs/results/run_scala_fashion_mnist.sh (FedProx at µ = 0.1; also _mu1)
#   ONLY=quantity_a2_fedavg_seeds345 bash docs/results/run_scala_fashion_mnist.sh (FedAvg, seeds 3-5; also the others)
# Needs Fashion-MNIST: Debian's dataset-fashion-mnist package, data/FashionMNIST/raw, or --data.download true.
# Paper scale (GPU): lightning-sfl compare --config configs/fashion_mnist/scala.yaml --methods ... --seeds 0 1 2
set -euo pipefail
METHODS=(scala fedavg fedprox feddyn feddecorr fedlogit fedlc splitfedv1 splitfedv2 splitfedv3 sfl_local_loss)
COMMON=(--trainer.max_epochs="${ROUNDS:-200}" --trainer.check_val_every_n_epoch=5 --model.arch=cnn_fedlc
  --model.split_point=s1)
run() {  # NAME OVERRIDES...
  out=$1; shift
  if [ -n "${ONLY:-}" ] && [ "$ONLY" != "$out" ]; then return; fi
  lightning-sfl compare --config configs/fashion_mnist/scala.yaml --methods "${METHODS[@]}" --seeds "${SEEDS[@]}" --jobs 2 \
    --out "docs/results/scala_fashion_mnist/$out" "${EXTRA[@]}" --overrides "${COMMON[@]}" "$@"
}
EXTRA=("$@")
SEEDS=(0 1 2)
run quantity_a2 --data.partition=quantity --data.alpha=2
run quantity_a4 --data.partition=quantity --data.alpha=4
run dirichlet_b0.05 --data.partition=dirichlet --data.beta=0.05
run dirichlet_b0.1 --data.partition=dirichlet --data.beta=0.1
# Why SplitFedV2 and FedDyn end above SCALA after 200 rounds (issue 34): the α=2 setting for the paper's 500 rounds,
# SCALA against the two (test accuracy every 25 rounds).
METHODS=(scala splitfedv2 feddyn)
run quantity_a2_500rounds --data.partition=quantity --data.alpha=2 --trainer.max_epochs=500 \
  --trainer.check_val_every_n_epoch=25
# ... and whether SplitFedV2 leads by its 10x more server steps a round (50 of 32 rows against SCALA's 5 of 320): at
# 5x the learning rate a step, SCALA's fewer steps should close the gap if that is the reason.
METHODS=(scala splitfedv2)
run quantity_a2_lr0.05 --data.partition=quantity --data.alpha=2 --model.lr=0.05
# FedProx ends at FedAvg's level with its class default µ = 0.01 (the paper: 3.4 points above FedAvg at α=2): µ = 0.1
# and µ = 1, the upper end of Li et al.'s grid.
METHODS=(fedprox)
run quantity_a2_fedprox_mu0.1 --data.partition=quantity --data.alpha=2 --model.mu=0.1
run quantity_a2_fedprox_mu1 --data.partition=quantity --data.alpha=2 --model.mu=1
# FedProx, FedDecorr, FedLogit and FedLC end at or below FedAvg's level and SplitFedV3 does not collapse (the paper: the
# first four above FedAvg, SplitFedV3 19-47 points below). One reading: with T = 5 steps at lr 0.01 clients barely
# leave the global model within a round (FedProx at µ = 1 changes nothing), so the corrections for local drift and
# local label skew have little to act on. At 5x the learning rate a step (5x the drift) they should move away from
# FedAvg if that is the reason.
METHODS=(fedavg fedprox feddecorr fedlogit fedlc splitfedv1 splitfedv3)
run quantity_a2_lr0.05_drift --data.partition=quantity --data.alpha=2 --model.lr=0.05
# The paper puts FedProx, FedDecorr and (but at α=2) FedLogit and FedLC 1-8 points above FedAvg; here they end at its
# level. But the paper's SplitFedV1, which with plain SGD is FedAvg (our tests check the identity), is also 2.0-9.5
# points above its FedAvg, so gaps of that size arise in its table between identical methods. One reading: unpaired
# 3-seed means of one method differ by that much. FedAvg with three other seeds (3, 4, 5) in every setting gives ten
# splits of six seeds into two triples per setting: how far apart two 3-seed means of one method fall here.
METHODS=(fedavg)
SEEDS=(3 4 5)
run quantity_a2_fedavg_seeds345 --data.partition=quantity --data.alpha=2
run quantity_a4_fedavg_seeds345 --data.partition=quantity --data.alpha=4
run dirichlet_b0.05_fedavg_seeds345 --data.partition=dirichlet --data.beta=0.05
run dirichlet_b0.1_fedavg_seeds345 --data.partition=dirichlet --data.beta=0.1
