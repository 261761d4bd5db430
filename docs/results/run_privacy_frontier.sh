#!/usr/bin/env bash
# Reproduces docs/results/privacy_frontier/* (issue 36): the privacy-accuracy frontier of four split methods (SCALA,
# MiniBatch-SFL, SplitFedV1, SFLLocalLoss) under each activation defence at three strengths, against two attacks, 3 seeds
# (identical client shards and draws per seed), on digits, MNIST-5k and Fashion-MNIST.
#
# Defences (--model.defences of a split method, written so since defences became parts; the runs in this folder
# predate that and record them as the options --model.nopeek_weight and the like; a folder each, <dataset>/<defence>):
#   none
#   nopeek<a>       NoPeek, the client adds a * DCOR(X_k, Z_k):           a = 10, 100, 1000 (at 1-16 nothing moves on
#                   digits: neither accuracy nor the decoder's MSE)
#   laplace<b>      tanh bound + Laplace(0, b) noise on the uploads:      b = 0.1, 0.3, 1
#   bottleneck<c>   c channels at the cut (Conv2d C -> c, c -> C):        c = 16, 4, 1
#   inversion<g>    SCALA-PE's regulariser, g * max(SSIM - tau, 0) of a simulated decoder per client: g = 0.3, 1, 3
#                   (tau = 0.5 on digits; 0.1 on the 28x28 datasets, where the clients' decoders stay near or below
#                   0.5, SSIM <= 0.32 on MNIST-5k and <= 0.54 on Fashion-MNIST, and the hinge would (almost) never
#                   engage: docs/results/privacy, SCALA-PE's notes)
# Attacks on every run's final client half (its uploads as defended):
#   attack/   the decoder of `lightning-sfl attack` (fitted on (activation, image) pairs of the training split)
#   unsplit/  UnSplit (`--attack unsplit`: no data, no weights; 32 test images, 20 x 50 Adam steps; clone accuracy)
# Every run cuts after the first block (s1: both attacks have something to recover; at the configs' s2 cut UnSplit
# recovers nothing within its budget) and, for two CPU cores:
#   digits         configs/digits/scala.yaml (20 clients, alpha = 2, 5 a round, T = 5, B = 64), cnn_small, lr 0.02 (at
#                  the config's 0.05 a bottleneck at this cut diverged in 12 of 24 runs, SplitFedV1 and SFLLocalLoss in
#                  every seed, within 3 rounds), 50 rounds; decoder: 20 epochs, 64 channels, batch 32
#   mnist5k        configs/mnist5k/scala.yaml (the same federation), FedLC's CNN (cnn_fedlc), 50 rounds;
#                  decoder: 2000 training images, 20 epochs, 16 channels, batch 128, lr 3e-3
#   fashion_mnist  configs/fashion_mnist/scala.yaml (100 clients, alpha = 2, 10 a round, B = 320), cnn_fedlc, lr 0.03
#                  (SCALA undefended: 72 % after 50 rounds; 62 % at the config's 0.01, 76 % at 0.1), 50 rounds, tested
#                  every 5; decoder as for mnist5k (2000 training images). Cost per run on 2 CPU threads: about 30 s
#                  of training and 70 s of attacks, but the inversion folders' runs take ~13 min (27 two at a time):
#                  nearly all 100 clients take part, and each first warms its decoder up 30 passes over its 600
#                  images at 32 rows (ResSFL's warm-up; ~56,000 decoder steps a run). One GPU shared by 42
#                  processes (36 of them these runs) finished none of them in 500 s: give them a GPU each or few at a
#                  time; the 12 of one folder alone on an H200 (JOBS=12, GPU 99 % busy) reached round 17 of 50 in 500 s.
# then `python docs/results/summarize_frontier.py` writes the tables and the frontier plots.
#   bash docs/results/run_privacy_frontier.sh                   (from the repository root, with the package installed)
#   bash docs/results/run_privacy_frontier.sh --reuse           (keep finished trainings, continue unfinished ones
#                                                                from their last checkpoint; attacks newer than their
#                                                                checkpoint are kept)
#   ONLY=digits bash docs/results/run_privacy_frontier.sh --reuse       (the folders whose path starts with digits)
#   JOBS=12 ATTACK_JOBS=12 ONLY=fashion_mnist/nopeek bash ...           (trainings and attacks at once: one GPU)
# Fashion-MNIST needs Debian's dataset-fashion-mnist package, data/FashionMNIST/raw, or --data.download true.
set -euo pipefail
OUT=docs/results/privacy_frontier
METHODS=(scala minibatch_sfl splitfedv1 sfl_local_loss)
DEFENCES=(
  "none|"
  "nopeek10|--model.defences+=NoPeek --model.defences.weight=10"
  "nopeek100|--model.defences+=NoPeek --model.defences.weight=100"
  "nopeek1000|--model.defences+=NoPeek --model.defences.weight=1000"
  "laplace0.1|--model.defences+=ActivationNoise --model.defences.scale=0.1 --model.defences.bound=tanh"
  "laplace0.3|--model.defences+=ActivationNoise --model.defences.scale=0.3 --model.defences.bound=tanh"
  "laplace1|--model.defences+=ActivationNoise --model.defences.scale=1 --model.defences.bound=tanh"
  "bottleneck16|--model.defences+=Bottleneck --model.defences.channels=16"
  "bottleneck4|--model.defences+=Bottleneck --model.defences.channels=4"
  "bottleneck1|--model.defences+=Bottleneck --model.defences.channels=1"
  "inversion0.3|--model.defences+=InversionRegulariser --model.defences.gamma=0.3"
  "inversion1|--model.defences+=InversionRegulariser --model.defences.gamma=1"
  "inversion3|--model.defences+=InversionRegulariser --model.defences.gamma=3"
)
attack_all() {  # FOLDER DECODER_OPTIONS...
  folder=$1; shift
  find "$folder/runs" -path '*/logs/checkpoints/last.ckpt' | sort | xargs -P "${ATTACK_JOBS:-2}" -I{} sh -c '
    ckpt=$1; shift
    run=$(dirname "$(dirname "$(dirname "$ckpt")")"); seed=${run##*seed}
    [ "$run/attack/metrics.json" -nt "$ckpt" ] || \
      lightning-sfl attack --ckpt_path "$ckpt" --seed "$seed" --no_wandb --out "$run/attack" "$@" | tail -n 1
    [ "$run/unsplit/metrics.json" -nt "$ckpt" ] || lightning-sfl attack --attack unsplit --ckpt_path "$ckpt" \
      --seed "$seed" --targets 32 --no_wandb --out "$run/unsplit" | tail -n 1' _ {} "$@"
}
dataset() {  # NAME CONFIG "DECODER OPTIONS" TAU OVERRIDES...
  name=$1 config=$2 decoder=$3 tau=$4; shift 4
  for entry in "${DEFENCES[@]}"; do
    out=$name/${entry%%|*} defence=${entry#*|}
    if [ -n "${ONLY:-}" ] && [[ "$out" != "$ONLY"* ]]; then continue; fi
    if [[ "$out" == */inversion* ]]; then defence="$defence --model.defences.threshold=$tau"; fi
    # shellcheck disable=SC2086  # the defence's overrides are a list
    lightning-sfl compare --config "$config" --methods "${METHODS[@]}" --seeds 0 1 2 --jobs "${JOBS:-2}" \
      --keep_checkpoints --out "$OUT/$out" "${EXTRA[@]}" --overrides "$@" $defence
    # shellcheck disable=SC2086  # DECODER is a list of options
    attack_all "$OUT/$out" $decoder
  done
}
EXTRA=("$@")
dataset digits configs/digits/scala.yaml "--epochs 20" 0.5 --model.split_point=s1 --model.lr=0.02 \
  --trainer.max_epochs=50
dataset mnist5k configs/mnist5k/scala.yaml "--epochs 20 --width 16 --batch_size 128 --lr 3e-3 --train_size 2000" 0.1 \
  --model.arch=cnn_fedlc --model.split_point=s1 --trainer.max_epochs=50
dataset fashion_mnist configs/fashion_mnist/scala.yaml \
  "--epochs 20 --width 16 --batch_size 128 --lr 3e-3 --train_size 2000" 0.1 \
  --model.arch=cnn_fedlc --model.split_point=s1 --model.lr=0.03 --trainer.max_epochs=50 \
  --trainer.check_val_every_n_epoch=5
python docs/results/summarize_frontier.py
