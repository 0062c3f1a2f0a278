#!/usr/bin/env bash
# Asynchronous training against synchronous DDP (docs/async.md, "Measured"): the Fashion-MNIST
# CNN with TRAINERS training ranks (default 4; a global batch of 64) on this host, in each mode
# of
#   sync     DDP over the 4 ranks (--mode sync)
#   backup   a parameter server, synchronous steps, one backup worker (--mode ssp --staleness 0
#            --backup-workers 1)
#   ssp1, ssp4, ssp16   bounded staleness s = 1, 4, 16 (--mode ssp --staleness s)
#   async    fully asynchronous (--mode ps)
# (the parameter-server modes run a fifth rank, the server). Two tables:
#   straggler  each mode for TIME seconds (default 60) with the last training rank slowed by
#              each factor of SLOW (default "1 2 4"; COHORT_SLOW_RANKS): samples/s over the job and the test
#              accuracy at the end, and samples/s as a ratio of sync with nobody slowed.
#   staleness  each mode for STEPS steps per rank (default 900, one epoch) with nobody slowed:
#              the test accuracy after the same number of samples, and the mean staleness.
#   net        the straggler table on a simulated cluster (scripts/netns-cluster; root) whose
#              links run at RATE (default 1gbit): the 4 training ranks on 2 hosts, the
#              parameter-server modes with 2 servers on a third host (6 ranks), plus
#              async-hybrid (--hybrid: each host allreduces, one rank per host pushes).
#
#   bench/async.sh [straggler|staleness|net|all]     (default all: straggler and staleness)
# Env: WORK (raw outputs; default /tmp/cohort-async-<date>), TIME, SLOW, STEPS, MODES (names
#      from the list above; default all), REPEATS (runs of each case; default 1), RATE,
#      TRAINERS.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$here/build/bin
table=${1:-all}
work=${WORK:-/tmp/cohort-async-$(date +%Y%m%d-%H%M%S)}
time_limit=${TIME:-60}
slow_factors=${SLOW:-"1 2 4"}
steps=${STEPS:-900}
repeats=${REPEATS:-1}
modes=${MODES:-"sync backup ssp1 ssp4 ssp16 async"}
trainers=${TRAINERS:-4}
slow_rank=$((trainers - 1))
die() { echo "async.sh: $*" >&2; exit 2; }
for program in fashion_mnist cohortrun; do
  [ -x "$bin/$program" ] || die "no $bin/$program: build it (cmake --build build --target $program)"
done
mkdir -p "$work"
echo "raw outputs: $work"

declare -A flags=(
  [sync]="--mode sync"
  [backup]="--mode ssp --staleness 0 --backup-workers 1"
  [ssp1]="--mode ssp --staleness 1"
  [ssp4]="--mode ssp --staleness 4"
  [ssp16]="--mode ssp --staleness 16"
  [async]="--mode ps"
  [async-hybrid]="--mode ps --hybrid"
)

# run NAME MODE SLOW LIMIT_FLAGS: one job; its output in $work/NAME.log.
run() {
  local name=$1 mode=$2 slow=$3 limit=$4 ranks=$((trainers + 1))
  [ "$mode" = sync ] && ranks=$trainers
  [ -n "${flags[$mode]:-}" ] || die "unknown mode '$mode'"
  COHORT_SLOW_RANKS="$slow_rank:$slow" OMP_NUM_THREADS=1 "$bin/cohortrun" --nproc-per-node $ranks \
    "$bin/fashion_mnist" --model cnn --batch-size 64 --checkpoint '' --no-progress \
    ${flags[$mode]} $limit > "$work/$name.log" 2>&1 || die "$name failed: see $work/$name.log"
}

# One CSV line from a run's log: table,mode,slow,repeat,samples_per_s,accuracy,mean_staleness
row() {
  local log=$work/$1.log
  local final samples acc stale
  final=$(grep -E '(^|\] )final:' "$log" | tail -1)
  samples=$(sed -E 's/.* ([0-9.]+) samples\/s.*/\1/' <<< "$final")
  acc=$(sed -E 's/.*test accuracy ([0-9.]+)%.*/\1/' <<< "$final")
  stale=$(grep -o '(mean [0-9.]*)' "$log" | head -1 | tr -d '()mean ' || true)
  echo "$2,$3,$4,$5,$samples,$acc,${stale:-0}"
}

# run_net NAME MODE SLOW LIMIT_FLAGS: one job on a fresh cluster of 2 or 3 hosts.
run_net() {
  local name=$1 mode=$2 slow=$3 limit=$4 hosts=3 servers="--servers 2"
  [ "$mode" = sync ] && hosts=2 && servers=""
  [ -n "${flags[$mode]:-}" ] || die "unknown mode '$mode'"
  COHORT_SLOW_RANKS="3:$slow" OMP_NUM_THREADS=1 "$here/scripts/netns-cluster" run \
    --hosts $hosts --rate "${RATE:-1gbit}" --ranks-per-host 2 --timeout 900 -- \
    "$bin/fashion_mnist" --model cnn --batch-size 64 --checkpoint '' --no-progress \
    ${flags[$mode]} $servers $limit > "$work/$name.log" 2>&1 || die "$name failed: see $work/$name.log"
}

csv=$work/results.csv
[ -f "$csv" ] || echo "table,mode,slow,repeat,samples_per_s,accuracy,mean_staleness" > "$csv"
if [ "$table" = straggler ] || [ "$table" = all ]; then
  for r in $(seq 1 "$repeats"); do
    for slow in $slow_factors; do
      for mode in $modes; do
        name=straggler$trainers-$mode-slow$slow-$r
        echo "== $name"
        run "$name" "$mode" "$slow" "--epochs 100 --time-limit $time_limit"
        row "$name" "straggler$trainers" "$mode" "$slow" "$r" | tee -a "$csv"
      done
    done
  done
fi
if [ "$table" = staleness ] || [ "$table" = all ]; then
  for r in $(seq 1 "$repeats"); do
    for mode in $modes; do
      name=staleness-$mode-$r
      echo "== $name"
      run "$name" "$mode" 1 "--epochs 100 --max-steps $steps"
      row "$name" staleness "$mode" 1 "$r" | tee -a "$csv"
    done
  done
fi
if [ "$table" = net ]; then
  for slow in $slow_factors; do
    for mode in ${MODES:-sync backup ssp4 async async-hybrid}; do
      name=net-$mode-slow$slow
      echo "== $name"
      run_net "$name" "$mode" "$slow" "--epochs 100 --time-limit $time_limit"
      row "$name" "net-${RATE:-1gbit}" "$mode" "$slow" 1 | tee -a "$csv"
    done
  done
fi
python3 "$here/bench/summarize_async.py" "$csv"
