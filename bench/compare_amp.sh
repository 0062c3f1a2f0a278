#!/usr/bin/env bash
# Mixed precision in both examples at 2 ranks (docs/amp.md, "Measured"): float32 against
# bfloat16 autocast (and any other --precision or flag set named in PRECISIONS), interleaved
# round by round so that every setting sees the same machine.
#
#   bench/compare_amp.sh [ROUNDS]        (default 3; about 6 minutes a round on 2 cores)
#
# Per run: Fashion-MNIST's CNN for one whole epoch (--epochs 1: 468 steps of the global batch
# of 128) and char_lm's default model for CHAR_STEPS steps (default 300). Reported, median over
# the rounds (min-max): the median step time from the --metrics file, rank 0's peak RSS and
# model state from the memory lines, the bytes rank 0's gradient reductions took in per step
# (`reduced_bytes`), and the quality reached: Fashion-MNIST's test accuracy after the epoch,
# char_lm's validation loss. No PyTorch peer: PyTorch 1.13's CPU autocast runs the same kernels,
# and its GradScaler is CUDA-only.
#
# Env: PRECISIONS (space-separated settings, each the example arguments with ',' for spaces;
# default "--precision,fp32 --precision,bf16"), CHAR_STEPS, FASHION_STEPS (default: the whole
# epoch; fewer for a quick check of the script), WORK (raw outputs; default
# /tmp/cohort-amp-<date>).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-3}
bin=$here/build/bin
precisions=${PRECISIONS:---precision,fp32 --precision,bf16}
char_steps=${CHAR_STEPS:-300}
fashion_steps=${FASHION_STEPS:-}
work=${WORK:-/tmp/cohort-amp-$(date +%Y%m%d-%H%M%S)}
die() { echo "compare_amp.sh: $*" >&2; exit 2; }
for program in fashion_mnist char_lm cohortrun; do
  [ -x "$bin/$program" ] || die "no $bin/$program: build it (cmake --build build --target $program)"
done
mkdir -p "$work"
echo "raw outputs: $work"

run() {  # example setting round
  local example=$1 setting=$2 round=$3
  local name="$example.$(echo "$setting" | tr -c 'a-z0-9\n' '_').$round"
  local extra=${setting//,/ }
  local steps=()
  [ "$example" = char_lm ] && steps=(--max-steps "$char_steps" --sample 0)
  [ "$example" = fashion_mnist ] && [ -n "$fashion_steps" ] && steps=(--max-steps "$fashion_steps")
  # shellcheck disable=SC2086
  "$bin/cohortrun" --nproc-per-node 2 "$bin/$example" --epochs 1 --checkpoint "" --no-progress \
    --metrics "$work/$name.jsonl" "${steps[@]}" $extra > "$work/$name.out" 2>&1 ||
    die "$example $extra failed: see $work/$name.out"
}

for round in $(seq 1 "$rounds"); do
  for example in fashion_mnist char_lm; do
    for setting in $precisions; do
      echo "[$(date +%T)] round $round/$rounds: $example ${setting//,/ }"
      run "$example" "$setting" "$round"
    done
  done
done
python3 "$here/bench/summarize_amp.py" "$work"
