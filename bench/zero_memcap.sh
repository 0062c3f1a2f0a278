#!/usr/bin/env bash
# Does a model that fails under DDP at a per-rank memory cap train under ZeRO or FSDP? Runs the large GPT
# of compare_zero.sh at 2 ranks (WORLD) under each strategy with every rank's data segment
# capped (`ulimit -d`, RLIMIT_DATA: heap and private anonymous mappings, which is where
# libtorch's tensors live), for each cap given, and says which trained a few steps and which
# ran out of memory.
#
#   bench/zero_memcap.sh CAP_MB [CAP_MB...]       e.g. bench/zero_memcap.sh 1800 2000 2200
#
# Why RLIMIT_DATA: there is no cgroup to use here, and Linux does not enforce RLIMIT_RSS. The
# address-space cap (ulimit -v, RLIMIT_AS) counts every mapped library and reserved-but-unused
# thread arena too, so it would measure libtorch's mappings, not the training state. A data cap
# counts memory the process reserved, used or not: malloc's top pad (cohort's malloc tuning asks
# for 256 MiB) makes a cap fail somewhat above the peak RSS. docs/bench.md, "ZeRO stages 1 and 2".
#
# Env: COHORT_ZERO_BENCH (default build/bin/cohort-zero-bench), WORLD (2), STRATEGIES
# ("ddp zero1 zero2 full_shard"), LARGE_MODEL, LARGE_BATCH (as compare_zero.sh), MEMCAP_OUT (raw outputs;
# default a new folder under /tmp), MALLOC_TUNING (0: COHORT_MALLOC_TUNING=0 for every rank, the
# default; 1: cohort's malloc tuning on).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bench=${COHORT_ZERO_BENCH:-$here/build/bin/cohort-zero-bench}
cohortrun=${COHORTRUN:-$here/build/bin/cohortrun}  # starts the ranks
world=${WORLD:-2}
strategies=${STRATEGIES:-ddp zero1 zero2 full_shard}
model=${LARGE_MODEL:---layers 12 --width 768 --heads 12 --context 128}
batch=${LARGE_BATCH:-4}
out=${MEMCAP_OUT:-$(mktemp -d /tmp/cohort-zero-memcap.XXXXXX)}
# cohort's malloc tuning (docs/ddp.md) keeps a 256 MiB top pad and never trims the heap: the
# data cap would count that reserve, not what training needs. Off by default here, for every
# strategy alike; MALLOC_TUNING=1 to measure with it.
malloc_tuning=${MALLOC_TUNING:-0}
[ $# -ge 1 ] || { echo "usage: $0 CAP_MB [CAP_MB...]" >&2; exit 2; }
[ -x "$bench" ] || { echo "$0: no $bench (cmake --build build --target cohort-zero-bench)" >&2; exit 2; }
mkdir -p "$out"
echo "raw outputs: $out; model: $model, global batch $batch, $world ranks, COHORT_MALLOC_TUNING=$malloc_tuning"

# verdict FILE: "trains (peak RSS ...)" or why it did not.
verdict() {
  local rss
  rss=$(grep '^MEM ' "$1" | sed -E "s/.*peak_rss_mb=([0-9.]+).*/\1/" | sort -n | tail -1)
  if grep -q '^STEP ' "$1"; then
    echo "trains (peak RSS ${rss} MB, largest rank)"
  elif grep -qiE "can't allocate|bad_alloc|out of memory|Cannot allocate" "$1"; then
    echo "out of memory: $(grep -oiE "(DefaultCPUAllocator: )?can't allocate memory[^.]*|std::bad_alloc|Cannot allocate memory" "$1" | head -1)"
  else
    echo "failed otherwise: $(grep -v '^cohortrun' "$1" | tail -1)"
  fi
}

echo "| data cap per rank (MiB) | strategy | result |"
echo "|---|---|---|"
for cap in "$@"; do
  for s in $strategies; do
    file=$out/cap$cap.$s.txt
    # The cap applies to the subshell, cohortrun and every rank it starts, not to this script.
    # shellcheck disable=SC2086  # the model options are words
    (ulimit -d $((cap * 1024)) && env -u MALLOC_MMAP_THRESHOLD_ -u MALLOC_TRIM_THRESHOLD_ \
      -u MALLOC_TOP_PAD_ -u GLIBC_TUNABLES COHORT_MALLOC_TUNING="$malloc_tuning" \
      "$cohortrun" --no-prefix --nproc-per-node "$world" \
      "$bench" --strategy "$s" --batch "$batch" $model --warmup 1 --steps 2 --windows 1) \
      >"$file" 2>&1
    echo "| $cap | $s | $(verdict "$file") |"
  done
done
