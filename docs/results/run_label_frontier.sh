#!/usr/bin/env bash
# The label frontier (issue 58): what a split run's server learns of the clients' labels against the accuracy it
# reaches. SplitFedV1, SCALA and MiniBatch-SFL, plain (the server receives the labels) and U-shaped (--model.tail_point:
# the clients keep the tail and compute the loss; docs/guide/label-privacy.md), undefended and under each label
# defence at two strengths, 3 seeds (identical client shards and draws per seed), each task on digits and
# Fashion-MNIST:
#   ten     the dataset's ten classes (clusters, known tail, model completion, histograms)
#   binary  class 0 against the rest (--data.binary_class 0, about 10 % positives): adds the norm and direction AUCs
# Arms (a folder each, <dataset>/<task>/<arm>; --model.defences of the split methods):
#   plain                the plain split: the server receives the labels (the reference arm)
#   plain_rr<e>          the plain split with the labels randomised once, RandomisedLabels:   e = 2, 0.5
#   u                    U-shaped at s4 (the tail: Flatten, Linear, ReLU, Linear of cnn_small; FedLC's CNN at s3)
#   u_noise<t>           U-shaped, GradientNoise (noise of t times the batch's largest norm): t = 1, 4
#   u_maxnorm            U-shaped, MaxNorm (Li et al.'s heuristic; no strength)
#   u_maxnorm_lr         U-shaped, MaxNorm at a fifth of the dataset's learning rate (its noise makes steps larger)
#   u_pooled             U-shaped SCALA with eq. 14's pooled prior P_s (--model.pooled_label_counts: the clients send
#                        their batches' label counts); SCALA only
#   u_rr<e>              U-shaped, RandomisedLabels:                                          e = 2, 0.5
# Every run's final checkpoint is attacked: `lightning-sfl attack --attack labels` (64 rows a client, 4 known labels
# a class), into <run>/labels/.
#   bash docs/results/run_label_frontier.sh                    (from the repository root, with the package installed)
#   bash docs/results/run_label_frontier.sh --reuse            (keep finished runs; attacks newer than their checkpoint)
#   ONLY=digits/binary bash docs/results/run_label_frontier.sh (the folders whose path starts with it)
#   ROUNDS=2 SEEDS="0" bash docs/results/run_label_frontier.sh (a smoke run of the protocol)
# Fashion-MNIST needs Debian's dataset-fashion-mnist package, data/FashionMNIST/raw, or --data.download true.
set -euo pipefail
OUT=${OUT:-docs/results/label_frontier}
METHODS=(splitfedv1 scala minibatch_sfl)
read -r -a SEED_LIST <<< "${SEEDS:-0 1 2}"
ARMS=(
  "plain|"
  "plain_rr2|--model.defences+=RandomisedLabels --model.defences.epsilon=2"
  "plain_rr0.5|--model.defences+=RandomisedLabels --model.defences.epsilon=0.5"
  "u|--model.tail_point=TAIL"
  "u_noise1|--model.tail_point=TAIL --model.defences+=GradientNoise --model.defences.scale=1"
  "u_noise4|--model.tail_point=TAIL --model.defences+=GradientNoise --model.defences.scale=4"
  "u_maxnorm|--model.tail_point=TAIL --model.defences+=MaxNorm"
  "u_maxnorm_lr|--model.tail_point=TAIL --model.defences+=MaxNorm --model.lr=SLOW"
  "u_pooled|--model.tail_point=TAIL --model.pooled_label_counts=true"
  "u_rr2|--model.tail_point=TAIL --model.defences+=RandomisedLabels --model.defences.epsilon=2"
  "u_rr0.5|--model.tail_point=TAIL --model.defences+=RandomisedLabels --model.defences.epsilon=0.5"
)
declare -A ARM_METHODS=([u_pooled]="scala")  # the arms that run fewer methods than METHODS
TASKS=("ten|" "binary|--data.binary_class=0")
attack_all() {  # FOLDER
  find "$1/runs" -path '*/logs/checkpoints/last.ckpt' | sort | xargs -P "${ATTACK_JOBS:-2}" -I{} sh -c '
    ckpt=$1; run=$(dirname "$(dirname "$(dirname "$ckpt")")"); seed=${run##*seed}
    [ "$run/labels/metrics.json" -nt "$ckpt" ] || lightning-sfl attack --attack labels --ckpt_path "$ckpt" \
      --seed "$seed" --no_wandb --out "$run/labels" | tail -n 1' _ {}
}
dataset() {  # NAME CONFIG TAIL LR OVERRIDES...
  name=$1 config=$2 tail=$3 lr=$4; shift 4
  slow=$(awk "BEGIN { print $lr / 5 }")
  for task in "${TASKS[@]}"; do
    for entry in "${ARMS[@]}"; do
      out=$name/${task%%|*}/${entry%%|*} arm=${entry#*|} task_options=${task#*|}
      arm=${arm//TAIL/$tail} arm=${arm//SLOW/$slow}
      if [ -n "${ONLY:-}" ] && [[ "$out" != "$ONLY"* ]]; then continue; fi
      read -r -a methods <<< "${ARM_METHODS[${entry%%|*}]:-${METHODS[*]}}"
      # shellcheck disable=SC2086  # the arm's and the task's overrides are lists
      lightning-sfl compare --config "$config" --methods "${methods[@]}" --seeds "${SEED_LIST[@]}" \
        --jobs "${JOBS:-2}" --keep_checkpoints --out "$OUT/$out" "${EXTRA[@]}" --overrides "$@" \
        --model.lr="$lr" --trainer.max_epochs="${ROUNDS:-$ROUNDS_DEFAULT}" $arm $task_options
      attack_all "$OUT/$out"
    done
  done
}
EXTRA=("$@")
ROUNDS_DEFAULT=50 dataset digits configs/digits/scala.yaml s4 0.05
ROUNDS_DEFAULT=50 dataset fashion_mnist configs/fashion_mnist/scala.yaml s3 0.03 --model.arch=cnn_fedlc \
  --model.split_point=s2 --trainer.check_val_every_n_epoch=5
