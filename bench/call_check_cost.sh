#!/usr/bin/env bash
# What the out-of-step check costs (docs/bench.md, "What the call check costs"): the same
# measurement with call stamps on (the default) and off (COHORT_CHECK_CALLS=0), interleaved
# round by round so that the machine's noise hits both alike; prints each round and the
# medians. Usage: bench/call_check_cost.sh [ROUNDS] [BUILD_DIR]   (default 5, build)
#   - 2-rank float32 sum allreduce, 4 KiB (latency, us) and 64 MiB (busbw, GB/s), over shared
#     memory (the default on one host) and TCP (COHORT_SHM=0), and under mpirun with MPI's own
#     collectives when cohort-bench was built with MPI;
#   - a DDP training step (ms, CNN and MLP, 2 ranks) when cohort-ddp-bench was built.
set -euo pipefail
rounds=${1:-5}
build=${2:-build}
bench=$build/bin/cohort-bench
ddp=$build/bin/cohort-ddp-bench
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# cohort-bench's table: size count type op time(us) algbw busbw #wrong; one size per call.
bench_row() {  # label, env..., -- , cohort-bench args...
  local label=$1; shift
  local env=()
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  env "${env[@]}" "$@" | awk -v label="$label" '!/^#/ && NF >= 8 {
    if ($8 != 0) { print "wrong results in " label > "/dev/stderr"; exit 1 }
    print label, $5, $7 }'
}

measure_round() {  # check = 1|0
  local check=$1
  for size in 4K 64M; do
    bench_row "shm-$size" COHORT_CHECK_CALLS="$check" -- \
      "$bench" allreduce --ranks 2 -b "$size" -e "$size" --trials 3
    bench_row "tcp-$size" COHORT_CHECK_CALLS="$check" COHORT_SHM=0 -- \
      "$bench" allreduce --ranks 2 -b "$size" -e "$size" --trials 3
    if command -v mpirun >/dev/null && "$bench" --help 2>&1 | grep -q mpi; then
      bench_row "mpi-$size" COHORT_CHECK_CALLS="$check" -- \
        mpirun --allow-run-as-root --oversubscribe -np 2 -x COHORT_CHECK_CALLS \
        "$bench" allreduce --transport mpi -b "$size" -e "$size" --trials 3
    fi
  done
  if [ -x "$ddp" ]; then
    for model in cnn mlp; do
      COHORT_CHECK_CALLS="$check" "$build/bin/cohortrun" --no-prefix --nproc-per-node 2 \
        "$ddp" --mode ddp \
        --model "$model" --steps 20 --windows 3 |
        awk -v label="ddp-$model" '/^STEP/ { for (i = 1; i <= NF; ++i) if ($i ~ /^ms_per_step_med=/) {
          split($i, kv, "="); print label, kv[2], "-" } }'
    done
  fi
}

for ((r = 1; r <= rounds; ++r)); do
  for check in 1 0; do
    measure_round "$check" | sed "s/^/$check /" | tee -a "$out/rows"
  done
done

echo "# medians over $rounds rounds: case, stamps on, stamps off, on/off"
echo "# (allreduce: time in us for 4K, busbw in GB/s for 64M; ddp: ms per step)"
python3 - "$out/rows" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    check, label, time_us, busbw = line.split()
    big = label.endswith("64M")
    value = float(busbw) if big else float(time_us)
    rows.setdefault(label, {}).setdefault(check, []).append(value)
for label, by in rows.items():
    on, off = statistics.median(by["1"]), statistics.median(by["0"])
    spread = lambda v: f"{min(v):.3g}-{max(v):.3g}"
    print(f"{label:10s} on {on:9.3f} ({spread(by['1'])})  off {off:9.3f} ({spread(by['0'])})  "
          f"on/off {on / off:.3f}")
PY
