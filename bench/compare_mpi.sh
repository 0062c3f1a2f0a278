#!/usr/bin/env bash
# 2-rank float32 sum allreduce under mpirun, 4 KiB to 256 MiB: cohort's algorithms over MPI
# point-to-point (COHORT_MPI_COLLECTIVES=cohort), MPI's own collectives through cohort's Group
# (=mpi), cohort's native transports (shared memory, and TCP), and OpenMPI by itself
# (MPI_Allreduce, ../shared/peers/mpi_allreduce.cpp), interleaved round by round. Prints the
# median over rounds of each one's median busbw (GB/s; 4 KiB as time in us) and ratios.
#
#   bench/compare_mpi.sh [ROUNDS]   (default 3; needs build/bin/cohort-bench built with MPI)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bench=$here/build/bin/cohort-bench
[ -x "$bench" ] || { echo "build cohort-bench first: ./scripts/test" >&2; exit 2; }
rounds=${1:-3}
peers=${PEERS_DIR:-$here/../shared/peers}
work=${PEERS_WORK:-/tmp/cohort-peers}
out=$work/compare-mpi-$(date +%Y%m%d-%H%M%S)
mkdir -p "$work/build" "$out"
mpicxx -O3 -march=native "$peers/mpi_allreduce.cpp" -o "$work/build/mpi_allreduce"
mpirun=(mpirun --allow-run-as-root --oversubscribe -np 2)

# cohort-bench with enough iterations per size for ~0.1-0.3 s per timed loop, 5 trials.
# $1: how to start 2 ranks (a command prefix), then cohort-bench options.
run_cohort() {
  local -a start=("${!1}"); shift
  for spec in 4K:10000 64K:1000 1M:200 16M:20 64M:8 256M:3; do
    "${start[@]}" "$bench" allreduce "$@" --min-bytes "${spec%%:*}" --max-bytes "${spec%%:*}" \
      --iters "${spec##*:}" --warmup 3 --trials 5 | grep -E '^ +[0-9]'
  done
}
native=(env)
native_tcp=(env COHORT_SHM=0)
over_cohort=("${mpirun[@]}" -x COHORT_MPI_COLLECTIVES=cohort)
over_mpi=("${mpirun[@]}" -x COHORT_MPI_COLLECTIVES=mpi)

for r in $(seq "$rounds"); do
  echo "round $r/$rounds" >&2
  run_cohort over_cohort[@] --transport mpi > "$out/mpi_cohort_algos.$r.txt"
  run_cohort over_mpi[@] --transport mpi > "$out/mpi_collectives.$r.txt"
  run_cohort native[@] --ranks 2 > "$out/native_shm.$r.txt"
  run_cohort native_tcp[@] --ranks 2 > "$out/native_tcp.$r.txt"
  "${mpirun[@]}" "$work/build/mpi_allreduce" 5 0.2 > "$out/openmpi.$r.txt" 2>&1
done

"$here/bench/summarize_allreduce.py" "$out" "$rounds" \
  "2 ranks under mpirun on one host, float32 sum" mpi_cohort_algos \
  mpi_cohort_algos mpi_collectives native_shm native_tcp openmpi:peer
