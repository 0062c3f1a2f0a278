#!/usr/bin/env bash
# cohort's DDP, ZeRO stages 1 and 2 and FSDP (FULL_SHARD, SHARD_GRAD_OP) against PyTorch's DDP
# and ZeroRedundancyOptimizer (gloo, CPU; PyTorch 1.13's FSDP cannot be imported here), on a GPT language model (examples/char_lm/gpt.h) with AdamW, interleaved round by round
# so that every system sees the same machine. Two models:
#  - "small" (6 layers, width 384: 10.8 M parameters), for throughput at 2 ranks: enough steps
#    per run for a stable median on 2 cores;
#  - "large" (12 layers, width 768: 85.5 M parameters, the issue's 50-150 M), for model-state
#    memory and peak RSS at 2 ranks (all five systems) and 4 ranks (cohort's three), and its
#    throughput at 2 ranks from fewer, slower steps (about 2 s each on 2 cores);
#  - "short" (the large model on sequences of 32 tokens, one per rank), for throughput when
#    communication and the optimizer weigh as much as the forward and backward: the large
#    model's steps are 90% compute on 2 cores, and there every system's ratio tends to 1.
# Prints the medians over rounds with min-max, and the ratios the issue sets targets for.
# docs/bench.md, "ZeRO stages 1 and 2", explains every row.
#
#   bench/compare_zero.sh [ROUNDS]      (default 3; about 7 minutes a round on 2 cores)
#
# Env: COHORT_ZERO_BENCH (default build/bin/cohort-zero-bench), PEERS_DIR (../shared/peers, for
# malloc_env.sh), PEERS_WORK (raw outputs go to $PEERS_WORK/compare-zero-<date>; default
# /tmp/cohort-peers), SMALL_MODEL, SMALL_BATCH, SMALL_TIMING, LARGE_MODEL, LARGE_BATCH,
# LARGE_TIMING, LARGE4_TIMING, SHORT_MODEL, SHORT_BATCH, SHORT_TIMING (the options of each kind
# of run; defaults below), SKIP_LARGE=1 (the small model only), CONFIGS (which kinds of run, of
# "small large short large4"; default all), SKIP_TORCH=1 (cohort's runs only), RUN_TIMEOUT
# (seconds before a run that has not exited is stopped, default 1200: PyTorch's peer can hang
# in its teardown after printing its lines, which are kept), BASELINE_ZERO_BENCH (another build's cohort-zero-bench, e.g. of the commit before a
# change: its DDP, ZeRO-1 and ZeRO-2 run in every round too, as "base_*", so that before and
# after are measured on the same machine state; cohortrun starts it, so it must be of a commit
# whose cohort-zero-bench joins through cohort::init, not --world/--rank), STRATEGIES (cohort's strategies to run; default
# "ddp zero1 zero2 full_shard shard_grad_op"; the baseline runs those of ddp, zero1, zero2).
#
# Malloc and BLAS, as bench/compare_ddp.sh:
#  - the PyTorch peer runs with ../shared/peers/malloc_env.sh sourced, as the peers' baselines
#    were measured (without it glibc's dynamic mmap/trim thresholds make its steps 15-20% slower
#    and bimodal);
#  - cohort's runs get no MALLOC_* variables: DistributedDataParallel and ZeroDataParallel tune
#    malloc themselves (cohort::tune_malloc_for_training) and would defer to the variables;
#  - the BLAS must be OpenBLAS (libopenblas0-openmp): Debian's reference BLAS would measure the
#    BLAS, not the systems. The script checks and refuses otherwise.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-3}
bench=${COHORT_ZERO_BENCH:-$here/build/bin/cohort-zero-bench}
cohortrun=${COHORTRUN:-$here/build/bin/cohortrun}  # starts the ranks
baseline=${BASELINE_ZERO_BENCH:-}
peers=${PEERS_DIR:-$here/../shared/peers}
work=${PEERS_WORK:-/tmp/cohort-peers}
py=/usr/bin/python3  # Debian's python3-torch 1.13.1, the same libtorch as cohort's
small_model=${SMALL_MODEL:---layers 6 --width 384 --heads 6 --context 128}
small_batch=${SMALL_BATCH:-16}
small_timing=${SMALL_TIMING:---warmup 3 --steps 5 --windows 3}
large_model=${LARGE_MODEL:---layers 12 --width 768 --heads 12 --context 128}
large_batch=${LARGE_BATCH:-4}
large_timing=${LARGE_TIMING:---warmup 1 --steps 2 --windows 3}
large4_timing=${LARGE4_TIMING:---warmup 1 --steps 1 --windows 1}  # 4 ranks: memory only
short_model=${SHORT_MODEL:---layers 12 --width 768 --heads 12 --context 32}
short_batch=${SHORT_BATCH:-2}
short_timing=${SHORT_TIMING:---warmup 2 --steps 3 --windows 3}
configs=" ${CONFIGS:-small large short large4} "
strategies=${STRATEGIES:-ddp zero1 zero2 full_shard shard_grad_op}
[ "${SKIP_LARGE:-0}" = 1 ] && configs=" small "
run_timeout=${RUN_TIMEOUT:-1200}

die() { echo "compare_zero.sh: $*" >&2; exit 2; }
[ -x "$bench" ] || die "no $bench: build it (cmake --build build --target cohort-zero-bench) \
or set COHORT_ZERO_BENCH"
[ -z "$baseline" ] || [ -x "$baseline" ] || die "BASELINE_ZERO_BENCH=$baseline is not executable"
[ -f "$peers/malloc_env.sh" ] || die "no $peers/malloc_env.sh (set PEERS_DIR)"
[ "${SKIP_TORCH:-0}" = 1 ] ||
  "$py" -c 'from torch.distributed.optim import ZeroRedundancyOptimizer' 2>/dev/null ||
  die "$py cannot import torch's ZeroRedundancyOptimizer: apt-get install python3-torch"

# ---- BLAS: which libblas.so.3 the alternatives system selects, and that libtorch loads it.
blas_alt=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null |
  sed -n 's/^Value: //p')
blas_loaded=$(ldd "$bench" | awk '/libblas\.so\.3/ {print $3}')
blas_real=$(readlink -f "${blas_loaded:-/nonexistent}" 2>/dev/null || true)
case "$blas_alt $blas_real" in
  *openblas*openblas*) ;;
  *) die "the active BLAS is not OpenBLAS (alternative: '${blas_alt:-none}', loaded by \
cohort-zero-bench: '${blas_real:-none}'): install libopenblas0-openmp" ;;
esac
echo "BLAS: OpenBLAS is active: $blas_real"

out=$work/compare-zero-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
echo "raw outputs: $out"

# Command prefixes: the environment without any malloc setting, and with malloc_env.sh's.
no_malloc_env=(env)
for v in MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_ MALLOC_TOP_PAD_ GLIBC_TUNABLES; do
  no_malloc_env+=(-u "$v")
done
mapfile -t peer_malloc < <(env -i /bin/bash -c ". '$peers/malloc_env.sh' && env" |
  grep -E '^(MALLOC_|GLIBC_TUNABLES=)')
[ ${#peer_malloc[@]} -gt 0 ] || die "$peers/malloc_env.sh set no MALLOC_* variable"
echo "malloc_env.sh (PyTorch peer only): ${peer_malloc[*]}"
cohort=("${no_malloc_env[@]}" "$cohortrun" --no-prefix --nproc-per-node)  # then the rank count
torch=("${no_malloc_env[@]}" "${peer_malloc[@]}" "$py" "$here/bench/zero_peer.py")

# run NAME ROUND COMMAND...: output in $out/NAME.ROUND.txt. A failed run is reported and leaves
# its cell empty; the other runs go on.
run() {
  local file=$out/$1.$2.txt
  shift 2
  if ! timeout -k 10 "$run_timeout" "$@" >"$file" 2>&1; then
    echo "  $(basename "$file" .txt) failed; the end of its output:" >&2
    tail -3 "$file" >&2
  fi
}

# five MODEL ROUND BATCH "MODEL OPTIONS" "TIMING": the five systems at 2 ranks (and the
# baseline's three, interleaved with cohort's).
five() {
  local m=$1 r=$2 batch=$3 opts=$4 timing=$5 s
  for s in $strategies; do
    # shellcheck disable=SC2086  # the options are words
    run "$m.cohort_${s}.2" "$r" "${cohort[@]}" 2 "$bench" --strategy "$s" --batch "$batch" \
      $opts $timing
    if [ -n "$baseline" ] && [[ " ddp zero1 zero2 " == *" $s "* ]]; then
      # shellcheck disable=SC2086
      run "$m.base_${s}.2" "$r" "${cohort[@]}" 2 "$baseline" --strategy "$s" --batch "$batch" \
        $opts $timing
    fi
  done
  [ "${SKIP_TORCH:-0}" = 1 ] && return
  for s in ddp zero1; do
    # shellcheck disable=SC2086
    run "$m.torch_${s}.2" "$r" "${torch[@]}" --strategy "$s" --world 2 --batch "$batch" \
      $opts $timing
  done
}

wanted() { [[ "$configs" == *" $1 "* ]]; }

for r in $(seq "$rounds"); do
  if wanted small; then
    echo "[$(date +%H:%M:%S)] round $r/$rounds: small model, 2 ranks" >&2
    five small "$r" "$small_batch" "$small_model" "$small_timing"
  fi
  if wanted large; then
    echo "[$(date +%H:%M:%S)] round $r/$rounds: large model, 2 ranks" >&2
    five large "$r" "$large_batch" "$large_model" "$large_timing"
  fi
  if wanted short; then
    echo "[$(date +%H:%M:%S)] round $r/$rounds: large model, short sequences, 2 ranks" >&2
    five short "$r" "$short_batch" "$short_model" "$short_timing"
  fi
  wanted large4 || continue
  echo "[$(date +%H:%M:%S)] round $r/$rounds: large model, 4 ranks (memory)" >&2
  for s in $strategies; do
    # shellcheck disable=SC2086
    run "large.cohort_${s}.4" "$r" "${cohort[@]}" 4 "$bench" --strategy "$s" \
      --batch "$large_batch" $large_model $large4_timing
    if [ -n "$baseline" ] && [[ " ddp zero1 zero2 " == *" $s "* ]]; then
      # shellcheck disable=SC2086
      run "large.base_${s}.4" "$r" "${cohort[@]}" 4 "$baseline" --strategy "$s" \
        --batch "$large_batch" $large_model $large4_timing
    fi
  done
done

"$py" "$here/bench/summarize_zero.py" "$out"
