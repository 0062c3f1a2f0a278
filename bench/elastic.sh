#!/usr/bin/env bash
# The cost of elastic training (docs/bench.md, "Elastic"), with cohort-elastic-bench under
# cohortrun --min-ranks:
#   recovery  time from a SIGKILL mid-backward to the survivors' next committed step, at 2, 4
#             and 8 ranks over shared memory and over TCP (COHORT_SHM=0), less one step time
#   heal      time for the restarted rank to be back in (rendezvous, new group, DDP, state from
#             rank 0) against one broadcast of the same bytes on the same group (the link rate)
#   steady    median step time with ElasticTrainer against plain DDP (the commit vote's cost)
#   buddy     median step time of ZeRO-1/2 and FULL_SHARD with and without buddy copies
# Usage: [STORE=tcp|etcd] [MEASURES="recovery heal steady buddy"] bench/elastic.sh [BUILD_DIR]
#        [REPEATS]; prints one table per measure, medians of REPEATS. STORE=etcd: the ranks meet
#        in a 3-member etcd cluster the script starts on loopback (cohortrun --rdzv-backend etcd)
#        instead of cohortrun's TCP store.
set -euo pipefail
build=${1:-build}
repeats=${2:-3}
bench=$build/bin/cohort-elastic-bench
run=$build/bin/cohortrun
store=${STORE:-tcp}
measures=" ${MEASURES:-recovery heal steady buddy} "
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
etcd_pids=()
trap '{ kill -9 "${etcd_pids[@]}"; wait; } 2>/dev/null; rm -rf "$tmp"' EXIT

rdzv=()
if [ "$store" = etcd ]; then
  read -r -a ports <<<"$(python3 -c 'import socket
socks = [socket.socket() for _ in range(6)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')"
  cluster="m0=http://127.0.0.1:${ports[3]},m1=http://127.0.0.1:${ports[4]},m2=http://127.0.0.1:${ports[5]}"
  for i in 0 1 2; do
    etcd --name "m$i" --data-dir "$tmp/etcd-m$i" --listen-client-urls "http://127.0.0.1:${ports[$i]}" \
      --advertise-client-urls "http://127.0.0.1:${ports[$i]}" \
      --listen-peer-urls "http://127.0.0.1:${ports[$((i + 3))]}" \
      --initial-advertise-peer-urls "http://127.0.0.1:${ports[$((i + 3))]}" \
      --initial-cluster "$cluster" --logger zap --log-outputs "$tmp/etcd-m$i.log" >/dev/null 2>&1 &
    etcd_pids+=($!)
  done
  endpoints="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
  healthy=0
  for _ in $(seq 60); do
    if ETCDCTL_API=3 etcdctl --dial-timeout 1s --endpoints "$endpoints" endpoint health \
      >/dev/null 2>&1; then healthy=1; break; fi
    sleep 1
  done
  [ "$healthy" = 1 ] || { echo "etcd did not start: see $tmp/etcd-m0.log" >&2; exit 1; }
  rdzv=(--rdzv-backend etcd --rdzv-endpoints "$endpoints")
  echo "# store: etcd, 3 members at $endpoints"
fi

kill_run() {  # ranks transport width out
  local shm=1
  [ "$2" = tcp ] && shm=0
  COHORT_SHM=$shm "$run" "${rdzv[@]}" --no-prefix --nproc-per-node "$1" --min-ranks 1 \
    --max-restarts 1 "$bench" --width "$3" --steps 150 --kill-rank 1 --kill-step 20 >"$4" 2>/dev/null
}

if [[ "$measures" == *" recovery "* ]]; then
echo "# recovery: SIGKILL of rank 1 mid-backward at step 20 (4 x 512 MLP, Adam, batch 32/rank)"
for transport in shm tcp; do
  for ranks in 2 4 8; do
    for i in $(seq "$repeats"); do
      kill_run "$ranks" "$transport" 512 "$tmp/k-$transport-$ranks-$i.log"
    done
  done
done
python3 - "$tmp" "$repeats" <<'PY'
import glob, statistics, sys
tmp, repeats = sys.argv[1], int(sys.argv[2])
def parse(path):
    steps, kill, changes, bcast = [], None, [], None
    for line in open(path):
        f = line.split()
        if not f: continue
        if f[0] == "STEP": steps.append((int(f[1]), int(f[2]), int(f[3])))
        elif f[0] == "KILL": kill = int(f[1])
        elif f[0] == "CHANGE": changes.append((int(f[1]), int(f[2]), float(f[3]), int(f[4])))
        elif f[0] == "BCAST": bcast = (int(f[1]), float(f[2]))
    return steps, kill, changes, bcast
print("transport ranks  recovery_s  step_ms  recovery-step_s  heal_s  bcast_s  heal/bcast")
for transport in ("shm", "tcp"):
    for ranks in (2, 4, 8):
        rec, step, heal, ratio, bc = [], [], [], [], []
        for path in glob.glob(f"{tmp}/k-{transport}-{ranks}-*.log"):
            steps, kill, changes, bcast = parse(path)
            if kill is None or not steps: continue
            gaps = [(b[1] - a[1]) / 1e6 for a, b in zip(steps, steps[1:]) if a[2] == b[2] == ranks]
            after = [s for s in steps if s[1] > kill]
            if not after or not gaps: continue
            step_ms = statistics.median(gaps)
            rec.append((after[0][1] - kill) / 1e9); step.append(step_ms)
            grows = [c for c in changes if c[1] == ranks]
            if grows and bcast:
                heal.append(grows[0][2]); bc.append(bcast[1]); ratio.append(grows[0][2] / bcast[1])
        if not rec:
            print(f"{transport:9} {ranks:5}  (no run finished)"); continue
        m = statistics.median
        print(f"{transport:9} {ranks:5}  {m(rec):10.3f}  {m(step):7.1f}  {m(rec) - m(step)/1e3:15.3f}"
              f"  {m(heal) if heal else float('nan'):6.3f}  {m(bc) if bc else float('nan'):7.4f}"
              f"  {m(ratio) if ratio else float('nan'):10.1f}")
PY
fi

if [[ "$measures" == *" heal "* ]]; then
echo
echo "# heal of a larger state: 2 ranks over shared memory, rank 1 killed and restarted"
for width in 1024 2048; do
  for i in $(seq "$repeats"); do kill_run 2 shm "$width" "$tmp/h-$width-$i.log"; done
done
python3 - "$tmp" <<'PY'
import glob, statistics, sys
# rebuild_s: the change to 1 rank after the kill, which moves nothing (DDP's constructor and
# its buckets alone); fresh: the broadcast into memory the receiver never touched.
print("width  state_MB  heal_s  rebuild_s  bcast_s  fresh_s  heal/bcast  heal/fresh")
for width in (1024, 2048):
    heal, rebuild, bc, fresh = [], [], [], []
    for path in glob.glob(f"{sys.argv[1]}/h-{width}-*.log"):
        lines = [l.split() for l in open(path)]
        ch = [l for l in lines if l and l[0] == "CHANGE"]
        b = [l for l in lines if l and l[0] == "BCAST"]
        f = [l for l in lines if l and l[0] == "BCAST_FRESH"]
        grows = [c for c in ch if c[2] == "2"]
        alone = [c for c in ch if c[2] == "1"]
        if grows and b and f and alone:
            heal.append(float(grows[0][3])); rebuild.append(float(alone[0][3]))
            bc.append(float(b[0][2])); fresh.append(float(f[0][2])); size = int(b[0][1])
    if heal:
        m = statistics.median
        print(f"{width:5}  {size/1e6:8.1f}  {m(heal):6.3f}  {m(rebuild):9.3f}  {m(bc):7.4f}"
              f"  {m(fresh):7.4f}  {m(heal)/m(bc):10.1f}  {m(heal)/m(fresh):10.1f}")
PY
fi

if [[ "$measures" == *" steady "* ]]; then
echo
echo "# steady state: median step time, 2 ranks over shared memory, 200 steps, no faults"
for i in $(seq "$repeats"); do
  "$run" --no-prefix --nproc-per-node 2 "$bench" --plain --steps 200 | grep STEPMS >>"$tmp/plain"
  "$run" "${rdzv[@]}" --no-prefix --nproc-per-node 2 --min-ranks 1 "$bench" --steps 200 |
    grep STEPMS >>"$tmp/elastic"
done
python3 - "$tmp" <<'PY'
import statistics, sys
read = lambda n: [float(l.split()[1]) for l in open(f"{sys.argv[1]}/{n}")]
p, e = read("plain"), read("elastic")
m = statistics.median
print(f"plain DDP {m(p):.2f} ms (runs {p}), elastic {m(e):.2f} ms (runs {e}): ratio {m(e)/m(p):.3f}")
PY
fi

if [[ "$measures" == *" buddy "* ]]; then
echo
echo "# buddy copies: median step time of the sharded strategies with and without them"
echo "# (4 x 1024 MLP: 4.2 M parameters, Adam, batch 32/rank, 100 steps, shared memory)"
for strategy in zero1 zero2 full_shard; do
  for ranks in 2 4; do
    for i in $(seq "$repeats"); do
      for buddy in on off; do
        flag=""
        [ "$buddy" = off ] && flag=--no-buddy
        "$run" "${rdzv[@]}" --no-prefix --nproc-per-node "$ranks" --min-ranks 1 "$bench" \
          --strategy "$strategy" \
          --width 1024 --steps 100 $flag | grep STEPMS | sed "s/^/$strategy $ranks $buddy /" >>"$tmp/buddy"
      done
    done
  done
done
python3 - "$tmp" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(f"{sys.argv[1]}/buddy"):
    strategy, ranks, buddy, _, ms = line.split()
    runs[(strategy, int(ranks), buddy)].append(float(ms))
print("strategy    ranks  without_ms  with_ms  with/without")
for strategy in ("zero1", "zero2", "full_shard"):
    for ranks in (2, 4):
        off, on = runs[(strategy, ranks, "off")], runs[(strategy, ranks, "on")]
        if off and on:
            m = statistics.median
            print(f"{strategy:10} {ranks:6}  {m(off):10.2f}  {m(on):7.2f}  {m(on)/m(off):12.3f}")
PY
fi
