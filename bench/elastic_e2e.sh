#!/usr/bin/env bash
# Training through failures, end to end (docs/bench.md, "Elastic training"): the Fashion-MNIST
# example for one epoch at 3 ranks, with a SIGKILL of a random non-zero rank every N committed
# steps (N in $EVERY, default "100 300"), under
#   elastic   cohortrun --min-ranks 2 --max-restarts 20 fashion_mnist --elastic
#   restart   cohortrun --max-restarts 5 fashion_mnist (the whole job restarts from its last
#             checkpoint, written after each epoch)
# and without kills (elastic and plain DDP). Prints the wall time, committed steps and test
# accuracy of each run. Usage: bench/elastic_e2e.sh [BUILD_DIR]
set -uo pipefail
build=${1:-build}
every=${EVERY:-100 300}
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--epochs 1 --batch-size 96 --log-every 10 --checkpoint "$tmp/ck" --overwrite-checkpoint)

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
      step=$(grep -oE '^\[0\] step [0-9]+|step [0-9]+/' "$out" | grep -oE '[0-9]+' | tail -1)
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
  local acc
  acc=$(grep -oE 'test accuracy [0-9.]+%' "$out" | tail -1)
  printf "%-22s rc=%-3s wall %6.1f s  %s  %s\n" "$name" "$rc" "$(python3 -c "print($end - $start)")" \
    "${acc:-no accuracy}" "$(grep -c 'membership: generation' "$out") membership lines"
}

run plain-ddp 0 "$build/bin/fashion_mnist" "${common[@]}"
run elastic 0 --min-ranks 2 "$build/bin/fashion_mnist" --elastic "${common[@]}"
for n in $every; do
  run "elastic-kill-$n" "$n" --min-ranks 2 --max-restarts 20 "$build/bin/fashion_mnist" \
    --elastic "${common[@]}"
  run "restart-kill-$n" "$n" --max-restarts 5 "$build/bin/fashion_mnist" "${common[@]}"
done
