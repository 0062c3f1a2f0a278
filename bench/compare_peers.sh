#!/usr/bin/env bash
# 2-rank float32 sum allreduce on this host: cohort against gloo (C++ ring and torch.distributed,
# always over TCP: what PyTorch uses on CPU) and OpenMPI, interleaved round by round so that all
# see the same machine. Prints the median over rounds of each peer's median busbw (GB/s), and the
# 4 KiB latency (us).
#
#   bench/compare_peers.sh [ROUNDS] [tcp|shm]   (default 3 tcp; needs build/bin/cohort-bench and
#                                                the peer sources in ../shared/peers; installs the
#                                                peers' packages)
# tcp: cohort with COHORT_SHM=0 and OpenMPI restricted to TCP (btl self,tcp).
# shm: cohort as it runs by default on one host (shared memory), on private buffers (staged
#      through the window) and on registered ones (cohort-bench --registered: in place), OpenMPI
#      with its shared-memory transport (btl self,vader), and the machine's floor: the two
#      variants of ../shared/peers/shm_allreduce.cpp (shmbuf: both buffers in one shared
#      mapping; staged: private buffers copied through one). The ratios are then taken against
#      cohort on registered buffers.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

# The peers come from Debian; install what is missing (as scripts/setup does for the build).
peer_packages=(openmpi-bin libopenmpi-dev libgloo-dev python3-torch)
missing=()
for p in "${peer_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "compare_peers.sh: installing ${missing[*]}" >&2
  sudo_cmd=(); [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi
[ -x "$here/build/bin/cohort-bench" ] || { echo "build cohort-bench first: ./scripts/test or ./scripts/demo" >&2; exit 2; }
rounds=${1:-3}
mode=${2:-tcp}
case $mode in
  tcp) cohort_env=(COHORT_SHM=0); mpi_btl=self,tcp ;;
  shm) cohort_env=(COHORT_SHM=1); mpi_btl=self,vader ;;
  *) echo "compare_peers.sh: the transport is tcp or shm, not '$mode'" >&2; exit 2 ;;
esac
peers=${PEERS_DIR:-$here/../shared/peers}
work=${PEERS_WORK:-/tmp/cohort-peers}
out=$work/compare-$(date +%Y%m%d-%H%M%S)
mkdir -p "$work/build" "$out"
cp -r "$peers"/. "$work"/
g++ -O3 -march=native -pthread "$work/gloo_allreduce.cpp" -lgloo -o "$work/build/gloo_allreduce"
mpicxx -O3 -march=native "$work/mpi_allreduce.cpp" -o "$work/build/mpi_allreduce"
[ "$mode" = shm ] && g++ -O3 -march=native "$work/shm_allreduce.cpp" -o "$work/build/shm_allreduce"
bench=$here/build/bin/cohort-bench

# cohort-bench with enough iterations per size for ~0.1-0.3 s per timed loop, 5 trials, as the
# peers calibrate theirs (the first call after each trial's fill finds the peers' data in their
# caches; over a short loop that one call would weigh). Extra arguments (--registered) go to
# every cohort-bench call.
if [ "$mode" = shm ]; then
  specs="4K:200000 64K:50000 1M:5000 16M:150 64M:30 256M:5"
else
  specs="4K:10000 64K:1000 1M:200 16M:20 64M:8 256M:3"
fi
run_cohort() {
  for spec in $specs; do
    env "${cohort_env[@]}" "$bench" allreduce --ranks 2 --min-bytes "${spec%%:*}" --max-bytes "${spec%%:*}" \
      --iters "${spec##*:}" --warmup 3 --trials 5 "$@" | grep -E '^ +[0-9]'
  done
}

for r in $(seq "$rounds"); do
  echo "round $r/$rounds" >&2
  run_cohort > "$out/cohort.$r.txt"
  if [ "$mode" = shm ]; then
    run_cohort --registered > "$out/cohort_registered.$r.txt"
    "$work/build/shm_allreduce" shmbuf 5 0.2 > "$out/floor_shmbuf.$r.txt" 2>&1
    "$work/build/shm_allreduce" staged 5 0.2 > "$out/floor_staged.$r.txt" 2>&1
  fi
  "$work/build/gloo_allreduce" ring 5 0.2 > "$out/gloo_cpp.$r.txt" 2>&1
  mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl "$mpi_btl" \
    "$work/build/mpi_allreduce" 5 0.2 > "$out/mpi_$mode.$r.txt" 2>&1
  /usr/bin/python3 "$work/torch_gloo_allreduce.py" --trials 5 --min-seconds 0.2 \
    > "$out/torch_gloo.$r.txt" 2>&1
done

if [ "$mode" = shm ]; then
  "$here/bench/summarize_allreduce.py" "$out" "$rounds" \
    "2 ranks, cohort and OpenMPI through shared memory, gloo over TCP, float32 sum" \
    cohort_registered cohort_registered cohort floor_shmbuf:peer floor_staged:peer \
    gloo_cpp:peer torch_gloo:peer "mpi_$mode:peer"
else
  "$here/bench/summarize_allreduce.py" "$out" "$rounds" "2 ranks, loopback TCP, float32 sum" \
    cohort cohort gloo_cpp:peer torch_gloo:peer "mpi_$mode:peer"
fi
