#!/usr/bin/env bash
# Heal time over a 1 Gbit/s link (docs/bench.md, "Elastic training"): 2 hosts of a network
# namespace cluster (scripts/netns-cluster: veth links limited to 1 Gbit/s, 0.2 ms delay), one
# rank each, cohort-elastic-bench under cohortrun --nnodes 2 --min-ranks 1 --max-restarts 1.
# Host 1's rank kills itself mid-backward at step 20; its node's cohortrun restarts it and it
# rejoins, healed from rank 0 across the link. Prints, per model width, the median over REPEATS
# runs of the heal (CHANGE to 2 ranks), of one broadcast of the same bytes on the final group
# (warm and into untouched memory), and their ratios. Needs root (exit 77 otherwise).
#   bench/elastic_netns.sh [BUILD_DIR] [REPEATS]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
repeats=${2:-3}
source "$(dirname "$0")/../tests/netns/preflight.sh"
netns_preflight "$build/bin/cohortrun" "$build/bin/cohort-elastic-bench"
name=cohort-heal-$$
work=$(mktemp -d)
cleanup() {
  "$tool" down --name "$name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
"$tool" up --hosts 2 --name "$name" >"$work/up.out" 2>&1 || { cat "$work/up.out"; exit 1; }
mapfile -t hosts < <(grep -E "^$name-h[0-9]+ " "$work/up.out")
token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
port=29600

run_once() {  # width output
  local pids=() node
  port=$((port + 1))
  for node in 0 1; do
    ip netns exec "${hosts[$node]%% *}" env COHORT_HOST="${hosts[$node]##* }" \
      COHORT_JOB_TOKEN="$token" OMP_NUM_THREADS=1 COHORT_ELASTIC_SETTLE_MS=1000 \
      "$build/bin/cohortrun" --no-prefix --nnodes 2 --node-rank "$node" \
      --master-addr "${hosts[0]##* }" --master-port "$port" --nproc-per-node 1 --min-ranks 1 \
      --max-restarts 1 "$build/bin/cohort-elastic-bench" --width "$1" --steps 150 \
      --kill-rank 1 --kill-step 20 >"$2.node$node" 2>/dev/null &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  cat "$2.node0" "$2.node1" >"$2"
}

for width in 512 1024; do
  for i in $(seq "$repeats"); do run_once "$width" "$work/h-$width-$i.log"; done
done
python3 - "$work" <<'PY'
import glob, statistics, sys
print("width  state_MB  heal_s  bcast_s  fresh_s  heal/bcast  heal/fresh   (1 Gbit/s link)")
for width in (512, 1024):
    heal, bc, fresh = [], [], []
    for path in glob.glob(f"{sys.argv[1]}/h-{width}-*.log"):
        lines = [l.split() for l in open(path)]
        grows = [l for l in lines if l and l[0] == "CHANGE" and l[2] == "2"]
        b = [l for l in lines if l and l[0] == "BCAST"]
        f = [l for l in lines if l and l[0] == "BCAST_FRESH"]
        if grows and b and f:
            heal.append(float(grows[0][3])); bc.append(float(b[0][2])); fresh.append(float(f[0][2]))
            size = int(b[0][1])
    if not heal:
        print(f"{width:5}  (no run finished)"); continue
    m = statistics.median
    print(f"{width:5}  {size/1e6:8.1f}  {m(heal):6.3f}  {m(bc):7.3f}  {m(fresh):7.3f}"
          f"  {m(heal)/m(bc):10.2f}  {m(heal)/m(fresh):10.2f}   runs: {len(heal)}")
PY
