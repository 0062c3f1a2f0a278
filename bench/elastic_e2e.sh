#!/usr/bin/env bash
# Training through failures, end to end (docs/bench.md, "Elastic training"): each example
# ($PROGRAMS, default "fashion_mnist char_lm") for one epoch at 3 ranks, with a SIGKILL of a
# random non-zero rank every N steps of progress (N in $EVERY, default "100 300"), under
#   elastic   cohortrun --min-ranks 2 --max-restarts 20 PROGRAM --elastic
#   restart   cohortrun --max-restarts 20 PROGRAM (the whole job restarts from its last
#             checkpoint)
# and without kills (elastic and plain DDP). Every run writes its checkpoint every
# $CHECKPOINT_EVERY steps (default 50) and at the end. Prints the wall time, the committed
# steps and the final test accuracy (Fashion-MNIST) or validation loss (char_lm) of each run.
# Usage: bench/elastic_e2e.sh [BUILD_DIR]
set -uo pipefail
build=${1:-build}
every=${EVERY:-100 300}
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
programs=${PROGRAMS:-fashion_mnist char_lm}
checkpoint_every=${CHECKPOINT_EVERY:-50}

# The rank pids of the cohortrun job started as `pid` (the shell may have put a subshell
# between): cohortrun's children, in the order it started them.
ranks_of() {
  local pid=$1
  if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != cohortrun ]; then
    read -r pid _ <"/proc/$pid/task/$pid/children" || return 0
  fi
  cat "/proc/$pid/task/$pid/children" 2>/dev/null || true
}

# Runs the job in the background; after every N steps of progress (read from rank 0's "step S"
# lines, or from the progress lines of the plain trainer, whose count starts again after each
# restart) kills one rank other than rank 0.
run() {  # name, N (0: no kills), cohortrun args..., -- program args...
  local name=$1 n=$2; shift 2
  local out="$tmp/$name.log" start end base=0
  start=$(date +%s.%N)
  "$build/bin/cohortrun" --nproc-per-node 3 "$@" >"$out" 2>&1 &
  local job=$!
  while kill -0 "$job" 2>/dev/null; do
    if [ "$n" -gt 0 ]; then
      local step
      step=$(grep -oE '^\[(slot )?0\] step [0-9]+|step [0-9]+/' "$out" | grep -oE '[0-9]+' | tail -1)
      if [ -n "$step" ] && [ "$step" -lt "$base" ]; then base=0; fi  # the job restarted
      if [ -n "$step" ] && [ "$step" -ge $((base + n)) ]; then
        local victim
        local ranks=()
        read -ra ranks < <(ranks_of "$job")
        victim=${ranks[$((1 + RANDOM % 2))]:-}
        [ -n "$victim" ] && kill -9 "$victim" && base=$step
      fi
    fi
    sleep 0.2
  done
  wait "$job"; local rc=$?
  end=$(date +%s.%N)
  local quality steps
  quality=$(grep -oE 'test accuracy [0-9.]+%|validation loss [0-9.]+' "$out" | tail -1)
  steps=$(grep -oE '[0-9]+ steps$' "$out" | tail -1)
  printf "%-36s rc=%-3s wall %6.1f s  %-10s %-24s %s restarts, %s membership lines\n" "$name" "$rc" \
    "$(python3 -c "print($end - $start)")" "${steps:-? steps}" "${quality:-no figure}" \
    "$(grep -c 'restarting' "$out")" "$(grep -c 'membership: generation' "$out")"
}

for program in $programs; do
  case $program in
    fashion_mnist) args=(--batch-size 96) ;;
    char_lm) args=(--layers 2 --width 64 --heads 4 --context 64 --batch-size 48 --sample 0) ;;
    *) echo "unknown program $program" >&2; exit 2 ;;
  esac
  args+=(--epochs 1 --log-every 10 --checkpoint-every "$checkpoint_every")
  bin="$build/bin/$program"
  # Each run starts afresh: a checkpoint path of its own.
  ck() { echo --checkpoint "$tmp/$program-$1.ckpt"; }
  # shellcheck disable=SC2046
  run "$program plain-ddp" 0 "$bin" "${args[@]}" $(ck plain)
  # shellcheck disable=SC2046
  run "$program elastic" 0 --min-ranks 2 "$bin" --elastic "${args[@]}" $(ck elastic)
  for n in $every; do
    # shellcheck disable=SC2046
    run "$program elastic-kill-$n" "$n" --min-ranks 2 --max-restarts 20 "$bin" --elastic \
      "${args[@]}" $(ck "elastic-$n")
    # shellcheck disable=SC2046
    run "$program restart-kill-$n" "$n" --max-restarts 20 "$bin" "${args[@]}" $(ck "restart-$n")
  done
done
