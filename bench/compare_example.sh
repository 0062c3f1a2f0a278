#!/usr/bin/env bash
# The Fashion-MNIST example (examples/fashion_mnist) against PyTorch's DDP training the same
# model on the same global batch (shared/peers/ddp_train.py: gloo, CPU), at 1 and 2 ranks with
# one torch thread per rank, interleaved round by round so that both see the same machine.
#
#   bench/compare_example.sh [ROUNDS] [MODEL]     (defaults: 3, cnn; about 1 minute a round)
#
# Both are timed the same way: 10 warm-up steps, then 5 windows of 30 steps; a run's figure is
# its median window (the example's from its --metrics file, step_ms including the batch fetch as
# in ddp_train.py). Prints, per configuration, the median over rounds of samples/s (min-max),
# the scaling efficiency (samples/s at 2 ranks / (2 x at 1 rank)) and cohort / PyTorch.
# The peers run with shared/peers/malloc_env.sh, as their baselines were measured; cohort's
# DDP tunes malloc itself and runs without it (bench/compare_ddp.sh explains why).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-3}
model=${2:-cnn}
peers=${PEERS_DIR:-$here/../shared/peers}
work=${PEERS_WORK:-/tmp/cohort-example-peers}
bin=$here/build/bin
py=/usr/bin/python3
die() { echo "compare_example.sh: $*" >&2; exit 2; }
[ -x "$bin/fashion_mnist" ] && [ -x "$bin/cohortrun" ] || die "build first (scripts/demo)"
[ -f "$peers/ddp_train.py" ] || die "no peers in $peers (set PEERS_DIR)"
mkdir -p "$work"
raw="$work/raw.txt"
: > "$raw"

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

cohort_run() {  # ranks round -> samples/s of the median 30-step window
  local metrics="$work/cohort_w$1_r$2.csv"
  env -u MALLOC_MMAP_THRESHOLD_ -u MALLOC_TRIM_THRESHOLD_ -u MALLOC_TOP_PAD_ \
    "$bin/cohortrun" --nproc-per-node "$1" "$bin/fashion_mnist" --model "$model" --threads 1 \
    --max-steps 160 --skip-eval --checkpoint "" --no-progress --metrics "$metrics" >/dev/null
  awk -F, 'NR > 11 { w = int((NR - 12) / 30); ms[w] += $10; n[w]++ }
           END { for (i in ms) print 64 * 1000 * n[i] / ms[i] }' "$metrics" | median
}

peer_run() {  # ranks -> samples/s
  (source "$peers/malloc_env.sh" && cd "$peers" &&
   "$py" ddp_train.py --mode ddp --world "$1" --threads 1 --batch 64 --bucket-mb 25 \
     --model "$model" --warmup 10 --steps 30 --windows 5) |
    sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p'
}

for round in $(seq 1 "$rounds"); do
  for ranks in 1 2; do
    echo "cohort $ranks $(cohort_run "$ranks" "$round")" | tee -a "$raw"
    echo "pytorch $ranks $(peer_run "$ranks")" | tee -a "$raw"
  done
done

stat() {  # system ranks -> "median (min-max)"
  awk -v s="$1" -v r="$2" '$1 == s && $2 == r { print $3 }' "$raw" | sort -n |
    awk '{ v[NR] = $1 } END { printf "%.0f (%.0f-%.0f)", v[int((NR + 1) / 2)], v[1], v[NR] }'
}
value() { awk -v s="$1" -v r="$2" '$1 == s && $2 == r { print $3 }' "$raw" | median; }
echo
echo "$model, global batch 64, 1 thread per rank, median of $rounds rounds (samples/s)"
printf "%-8s %-22s %-22s %s\n" ranks cohort "PyTorch DDP" cohort/PyTorch
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { print a / b }'; }
for ranks in 1 2; do
  printf "%-8s %-22s %-22s %.2f\n" "$ranks" "$(stat cohort "$ranks")" "$(stat pytorch "$ranks")" \
    "$(ratio "$(value cohort "$ranks")" "$(value pytorch "$ranks")")"
done
for system in cohort pytorch; do
  awk -v a="$(value "$system" 2)" -v b="$(value "$system" 1)" -v s="$system" \
    'BEGIN { printf "scaling efficiency %s: %.2f\n", s, a / (2 * b) }'
done
