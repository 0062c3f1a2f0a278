#!/usr/bin/env bash
# Gradient compression and local SGD against plain DDP (docs/compression.md, "Measured"): the
# Fashion-MNIST CNN for EPOCHS epochs (default 2) with each method, on
#   net   a simulated cluster of 2 hosts x 2 ranks (scripts/netns-cluster; root) whose links are
#         limited to each rate in RATES (default "1gbit 100mbit"; with the delay DELAY, default
#         0.2ms, where the kernel has netem);
#   shm   2 ranks on this host over shared memory (where compression should lose).
# Prints per method: time per epoch (the training steps' time, evaluation excluded), bytes each
# rank handed to the gradient collectives per step, the final test accuracy, and the speed-up
# over DDP on the same link; draws accuracy against training time (gnuplot, one SVG per link).
#
#   bench/compression.sh [net|shm|all]     (default all)
# Env: WORK (raw outputs; default /tmp/cohort-compression-<date>), EPOCHS, RATES, DELAY,
#      METHODS (names from the table below; default all), BATCH (global batch, default 64),
#      MAX_STEPS (stop each run there: quick looks).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$here/build/bin
tool=$here/scripts/netns-cluster
mode=${1:-all}
work=${WORK:-/tmp/cohort-compression-$(date +%Y%m%d-%H%M%S)}
epochs=${EPOCHS:-2}
die() { echo "compression.sh: $*" >&2; exit 2; }
for program in fashion_mnist cohortrun; do
  [ -x "$bin/$program" ] || die "no $bin/$program: build it (cmake --build build --target $program)"
done
mkdir -p "$work"
echo "raw outputs: $work"

# name -> the example's flags.
declare -A flags=(
  [ddp]=""
  [fp16]="--comm-hook fp16"
  [powersgd2]="--comm-hook powersgd --hook-rank 2"
  [powersgd4]="--comm-hook powersgd --hook-rank 4"
  [topk]="--comm-hook topk --hook-ratio 0.01"
  [randomk]="--comm-hook randomk --hook-ratio 0.01"
  [qsgd]="--comm-hook qsgd --hook-levels 16"
  [terngrad]="--comm-hook terngrad"
  [sign]="--comm-hook sign"
  [localsgd8]="--local-sgd 8"
)
methods=${METHODS:-ddp fp16 powersgd2 powersgd4 topk randomk qsgd terngrad sign localsgd8}
common=(--checkpoint "" --no-progress --epochs "$epochs" --batch-size "${BATCH:-64}")
[ -n "${MAX_STEPS:-}" ] && common+=(--max-steps "$MAX_STEPS")

run_net() {  # rate
  local rate=$1 name=cohort-compress-$$
  "$tool" up --hosts 2 --name "$name" --rate "$rate" --delay "${DELAY:-0.2ms}" |
    grep -v '^netns-cluster: run' >&2
  for method in $methods; do
    local tag="net-$rate.$method"
    echo "[$(date +%T)] $tag" >&2
    # shellcheck disable=SC2086
    "$tool" run --cluster "$name" --ranks-per-host 2 --timeout 7200 -- "$bin/fashion_mnist" \
      "${common[@]}" --metrics "$work/$tag.jsonl" ${flags[$method]} > "$work/$tag.out" 2>&1 ||
      { "$tool" down --name "$name" >/dev/null 2>&1; die "$tag failed: see $work/$tag.out"; }
  done
  "$tool" down --name "$name" >/dev/null
}

run_shm() {
  for method in $methods; do
    local tag="shm.$method"
    echo "[$(date +%T)] $tag" >&2
    # shellcheck disable=SC2086
    "$bin/cohortrun" --nproc-per-node 2 "$bin/fashion_mnist" "${common[@]}" \
      --metrics "$work/$tag.jsonl" ${flags[$method]} > "$work/$tag.out" 2>&1 ||
      die "$tag failed: see $work/$tag.out"
  done
}

case $mode in
  net) for rate in ${RATES:-1gbit 100mbit}; do run_net "$rate"; done ;;
  shm) run_shm ;;
  all) run_shm; for rate in ${RATES:-1gbit 100mbit}; do run_net "$rate"; done ;;
  *) die "unknown mode '$mode': net, shm or all" ;;
esac
python3 "$here/bench/summarize_compression.py" "$work"
