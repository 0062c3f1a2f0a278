#!/usr/bin/env bash
# Large-batch training on Fashion-MNIST at 2 ranks (docs/large_batch.md, "Measured"):
#
#   bench/large_batch.sh cost [ROUNDS]   SyncBatchNorm's cost per step against BatchNorm: the
#                                        CNN with BatchNorm (--model cnn_bn) at global batch 64,
#                                        with and without --sync-bn, interleaved, STEPS steps each
#                                        (default 300); median step time over the rounds (def. 3).
#   bench/large_batch.sh table           The large-batch table: global batch 64, 512 and 2048,
#                                        EPOCHS epochs each (default 2), with (a) the same LR as
#                                        at 64, (b) the LR scaled linearly, (c) linear scaling and
#                                        a linear warm-up over the first half epoch, (d) LARS with
#                                        the same warm-up (LARS_LR at batch 64, default 1.0, also
#                                        scaled linearly); test accuracy and samples/s.
#
# Env: WORK (raw outputs; default /tmp/cohort-large-batch-<date>), STEPS, EPOCHS, LARS_LR.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$here/build/bin
mode=${1:-table}
work=${WORK:-/tmp/cohort-large-batch-$(date +%Y%m%d-%H%M%S)}
die() { echo "large_batch.sh: $*" >&2; exit 2; }
for program in fashion_mnist cohortrun; do
  [ -x "$bin/$program" ] || die "no $bin/$program: build it (cmake --build build --target $program)"
done
mkdir -p "$work"
echo "raw outputs: $work"

run() {  # name, then the example's arguments
  local name=$1; shift
  echo "[$(date +%T)] $name: $*"
  "$bin/cohortrun" --nproc-per-node 2 "$bin/fashion_mnist" --model cnn_bn --checkpoint "" \
    --no-progress --metrics "$work/$name.jsonl" "$@" > "$work/$name.out" 2>&1 ||
    die "$name failed: see $work/$name.out"
}

case $mode in
  cost)
    for round in $(seq 1 "${2:-3}"); do
      run "cost.bn.$round" --max-steps "${STEPS:-300}" --skip-eval
      run "cost.syncbn.$round" --max-steps "${STEPS:-300}" --skip-eval --sync-bn
    done ;;
  table)
    epochs=${EPOCHS:-2}
    for batch in 64 512 2048; do
      warmup=$((60000 / batch / 2))
      run "table.$batch.a_same_lr" --batch-size "$batch" --epochs "$epochs" --lr-scaling none \
        --warmup-steps 0
      run "table.$batch.b_linear" --batch-size "$batch" --epochs "$epochs" --warmup-steps 0
      run "table.$batch.c_linear_warmup" --batch-size "$batch" --epochs "$epochs" \
        --warmup-steps "$warmup"
      run "table.$batch.d_lars" --batch-size "$batch" --epochs "$epochs" --optimizer lars \
        --lr "${LARS_LR:-1.0}" --warmup-steps "$warmup"
    done ;;
  *) die "unknown mode '$mode': cost or table" ;;
esac
python3 "$here/bench/summarize_large_batch.py" "$work"
