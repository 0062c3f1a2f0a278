#!/usr/bin/env bash
# Starts WORLD ranks of cohort-ddp-bench on this machine and waits for all of them.
#
#   bench/ddp_bench/run_ranks.sh WORLD BINARY [cohort-ddp-bench options, without --world,
#                                              --rank, --port, --port-file]
#
# Rank 0 listens on a port the kernel picks (--port 0) and hands it to the others through a
# file, so concurrent runs (ctest -j, a colleague's benchmark) never collide on a port and
# nothing has to guess a free one. Exits 0 when every rank did; else with the first failing
# rank's code, after stopping the others (a rank that fails aborts its group, so its peers
# normally stop by themselves; this is for a rank that never got that far). Every rank is
# killed after RUN_RANKS_TIMEOUT_S seconds (default 600), which counts as a failure (124).
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 WORLD BINARY [options...]" >&2
  exit 2
fi
world=$1
bin=$2
shift 2
limit=${RUN_RANKS_TIMEOUT_S:-600}
dir=$(mktemp -d "${TMPDIR:-/tmp}/cohort-ddp-ranks.XXXXXX")
trap 'rm -rf "$dir"' EXIT

declare -A rank_of=()
for ((r = 0; r < world; r++)); do
  # timeout passes a TERM it receives on to the rank, so stopping it stops the rank.
  timeout -k 10 "$limit" "$bin" "$@" --world "$world" --rank "$r" --port 0 \
    --port-file "$dir/port" &
  rank_of[$!]=$r
done
# An interrupted run must not leave ranks behind (timeout puts each in its own process group,
# out of reach of the terminal's ^C).
trap 'for pid in "${!rank_of[@]}"; do kill -TERM "$pid" 2>/dev/null; done; exit 130' INT TERM

status=0
while [ ${#rank_of[@]} -gt 0 ]; do
  finished=
  wait -n -p finished "${!rank_of[@]}"
  rc=$?
  [ -n "$finished" ] || break  # nothing left to wait for
  r=${rank_of[$finished]}
  unset "rank_of[$finished]"
  if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
    status=$rc
    if [ "$rc" -eq 124 ]; then
      echo "run_ranks.sh: rank $r ran past ${limit} s and was killed" >&2
    else
      echo "run_ranks.sh: rank $r exited with code $rc; stopping the others" >&2
    fi
    # Give the others a moment to fail on their own (they report the peer's error), then stop
    # them.
    sleep 2
    for pid in "${!rank_of[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  fi
done
exit "$status"
