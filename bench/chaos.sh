#!/usr/bin/env bash
# Chaos benchmark (docs/bench.md, "Chaos"): the Fashion-MNIST example on a cluster of network
# namespaces (scripts/netns-cluster: $HOSTS hosts x $RANKS_PER_HOST ranks, 1 Gbit/s links), with
# a SIGKILL of a random rank every $KILL_EVERY s for $DURATION s and, half way, of a whole node
# (the last one: its cohortrun and its ranks), under
#   elastic  cohortrun --min-ranks 2 --max-restarts ... fashion_mnist --elastic: a killed rank
#            is restarted by its node and rejoins; the killed node is replaced $REPLACE_AFTER s
#            later by a new node (an unused --node-rank) in the same namespace;
#   restart  cohortrun --max-restarts ... fashion_mnist: every kill restarts the whole job from
#            its last checkpoint (--checkpoint-every $CHECKPOINT_EVERY, as the elastic run); the
#            node "kill" kills that node's ranks only (the job cannot go on without the node)
# and each without kills for $FAULT_FREE s. Every line the processes print is stamped by this
# script's clock as it arrives, and every kill too, so that what is measured is seen from
# outside: goodput (committed samples per second over the fault-free run's), the time from
# each kill to the job's next step committed without the victim (p50, p99), and, from the
# elastic ranks' --sample-log, samples lost or trained twice (bench/summarize_chaos.py).
#
#   bench/chaos.sh [BUILD_DIR]
#   DURATION=600 KILL_EVERY=15 FAULT_FREE=120 HOSTS=4 RANKS_PER_HOST=2 MODES="elastic restart"
#   MODEL=cnn BATCH=256 (the global batch) CHECKPOINT_EVERY=20 REPLACE_AFTER=15
#   STORE=etcd: the job's store on a 3-member etcd cluster running in hosts 0 to 2 (as a service
#   of those machines: a node's kill leaves it), cohortrun --rdzv-backend etcd, and the node
#   killed half way is node 0, which on the TCP store (STORE=tcp, the default) hosts the store
#   and so is never killed.
#   KEEP=1: keep the work directory (the stamped logs). CHECK=1: exit 1 unless the elastic run lost no sample, trained none twice and committed
#   steps after its last kill (the short CI test, netns_chaos). Needs root (exit 77 otherwise).
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
readonly duration=${DURATION:-600} kill_every=${KILL_EVERY:-15} fault_free=${FAULT_FREE:-120}
readonly hosts=${HOSTS:-4} per_host=${RANKS_PER_HOST:-2} modes=${MODES:-elastic restart}
readonly replace_after=${REPLACE_AFTER:-15} checkpoint_every=${CHECKPOINT_EVERY:-20}
readonly batch=${BATCH:-256} model=${MODEL:-cnn} store=${STORE:-tcp}
source "$here/../tests/netns/preflight.sh"
netns_preflight "$build/bin/cohortrun" "$build/bin/fashion_mnist"

name=cohort-chaos-$$
work=$(mktemp -d)
declare -A nodes=()  # node rank -> its cohortrun's pid
cleanup() {
  local node
  for node in "${!nodes[@]}"; do kill -KILL "${nodes[$node]}" 2>/dev/null || true; done
  for node in "${etcd_pids[@]}"; do kill -KILL "$node" 2>/dev/null || true; done
  "$tool" down --name "$name" >/dev/null 2>&1 || true
  if [[ -n ${KEEP:-} ]]; then echo "chaos: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$tool" up --hosts "$hosts" --name "$name" >"$work/up.out" 2>&1 || { cat "$work/up.out"; exit 1; }
mapfile -t host_list < <(grep -E "^$name-h[0-9]+ " "$work/up.out")
ns_of() { echo "${host_list[$1]%% *}"; }
addr_of() { echo "${host_list[$1]##* }"; }
token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
port=29700
now() { date +%s.%N; }
endpoints=
etcd_pids=()

# STORE=etcd: members m0..m2 in hosts 0..2, fast elections as the tests' cluster has them.
start_etcd() {
  local i cluster= peers=()
  for i in 0 1 2; do
    peers+=("http://$(addr_of "$i"):2380")
    cluster+="${cluster:+,}m$i=${peers[$i]}"
    endpoints+="${endpoints:+,}$(addr_of "$i"):2379"
  done
  for i in 0 1 2; do
    ip netns exec "$(ns_of "$i")" etcd --name "m$i" --data-dir "$work/etcd-m$i" \
      --listen-client-urls "http://$(addr_of "$i"):2379" \
      --advertise-client-urls "http://$(addr_of "$i"):2379" \
      --listen-peer-urls "${peers[$i]}" --initial-advertise-peer-urls "${peers[$i]}" \
      --initial-cluster "$cluster" --initial-cluster-state new --heartbeat-interval 50 \
      --election-timeout 500 >"$work/etcd-m$i.log" 2>&1 &
    etcd_pids+=($!)
  done
  for i in $(seq 100); do
    ip netns exec "$(ns_of 0)" curl -sf -X POST "http://$(addr_of 0):2379/v3/kv/put" \
      -d '{"key":"cmVhZHk=","value":"MQ=="}' >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "chaos: etcd never answered (logs in $work/etcd-m*.log)"
  exit 1
}

# Every line on stdin, prefixed with the time it arrived (seconds since the epoch).
stamp() {
  python3 -u -c '
import sys, time
for line in sys.stdin:
    sys.stdout.write("%.6f %s" % (time.time(), line))
    sys.stdout.flush()'
}

# Starts node rank `node` of run `run` in host `host`; its stamped output in $work/$run.node<n>.
start_node() {  # run mode node host
  local run=$1 mode=$2 node=$3 host=$4 launch=() program=()
  launch=(--nnodes "$hosts" --node-rank "$node" --master-addr "$(addr_of 0)" --master-port "$port"
    --nproc-per-node "$per_host" --max-restarts 100000)
  program=(--model "$model" --batch-size "$batch" --epochs 100000 --threads 1 --skip-eval
    --log-every 1 --checkpoint "$work/$run.ckpt" --checkpoint-every "$checkpoint_every")
  if [[ $store == etcd ]]; then
    launch+=(--rdzv-backend etcd --rdzv-endpoints "$endpoints")
  fi
  if [[ $mode == elastic ]]; then
    launch+=(--min-ranks 2 --node-timeout 3)
    program+=(--elastic --sample-log "$work/$run.samples")
  fi
  ip netns exec "$(ns_of "$host")" env COHORT_HOST="$(addr_of "$host")" \
    COHORT_JOB_TOKEN="$token" COHORT_JOB_ID="chaos-$$-$run" OMP_NUM_THREADS=1 COHORT_TIMEOUT_S=10 \
    "$build/bin/cohortrun" "${launch[@]}" "$build/bin/fashion_mnist" "${program[@]}" \
    > >(stamp >"$work/$run.node$node") 2>&1 &
  nodes[$node]=$!
}

# The rank processes of node cohortrun `pid`, one per line. Its other child is the stamp of its
# output (bash forks a process substitution inside the command it feeds).
ranks_of() {  # pid
  local child
  for child in $(cat "/proc/$1/task/$1/children" 2>/dev/null); do
    [[ $(cat "/proc/$child/comm" 2>/dev/null) == fashion_mnist ]] && echo "$child"
  done
  return 0
}

all_ranks() {
  local node
  for node in "${!nodes[@]}"; do ranks_of "${nodes[$node]}"; done
}

kill_random_rank() {  # run
  local ranks=() victim
  mapfile -t ranks < <(all_ranks)
  ((${#ranks[@]} > 0)) || return 0
  victim=${ranks[$((RANDOM % ${#ranks[@]}))]}
  if kill -KILL "$victim" 2>/dev/null; then echo "$(now) rank $victim" >>"$work/$1.kills"; fi
}

kill_node() {  # run mode node
  local run=$1 mode=$2 node=$3 ranks
  ranks=$(ranks_of "${nodes[$node]}" | tr '\n' ' ')
  if [[ $mode == elastic ]]; then
    # shellcheck disable=SC2086
    kill -KILL "${nodes[$node]}" $ranks 2>/dev/null || true
    unset "nodes[$node]"
  else
    # shellcheck disable=SC2086
    kill -KILL $ranks 2>/dev/null || true
  fi
  echo "$(now) node $node" >>"$work/$run.kills"
}

# One run: the job for `seconds`, with kills when `chaos` is 1, then SIGTERM to every node.
# Times in integer milliseconds, so that the loop costs the ranks' two cores nothing.
run_job() {  # run mode seconds chaos
  local run=$1 mode=$2 seconds=$3 chaos=$4 node start end next_kill node_killed=0 replace_at=0
  local lost_node=$((hosts - 1))  # not node 0 on the TCP store, which it holds
  if [[ $store == etcd ]]; then lost_node=0; fi
  port=$((port + 1))
  : >"$work/$run.kills"
  start=$(date +%s%3N)
  end=$((start + seconds * 1000))
  next_kill=$((start + kill_every * 1000))
  for ((node = 0; node < hosts; node++)); do start_node "$run" "$mode" "$node" "$node"; done
  while (($(date +%s%3N) < end)); do
    sleep 0.2
    ((chaos)) || continue
    if ((replace_at > 0 && $(date +%s%3N) >= replace_at)); then
      start_node "$run" "$mode" "$hosts" "$lost_node"  # a new node rank, the lost host
      replace_at=0
    fi
    # The last kill leaves the job a kill interval to show that it recovered.
    (($(date +%s%3N) >= next_kill && next_kill <= end - kill_every * 1000)) || continue
    next_kill=$((next_kill + kill_every * 1000))
    if ((!node_killed && $(date +%s%3N) >= start + seconds * 500)); then
      kill_node "$run" "$mode" "$lost_node"
      node_killed=1
      if [[ $mode == elastic ]]; then replace_at=$(($(date +%s%3N) + replace_after * 1000)); fi
    else
      kill_random_rank "$run"
    fi
  done
  echo "$((start / 1000)).$(printf %03d $((start % 1000))) $(now)" >"$work/$run.window"
  for node in "${!nodes[@]}"; do kill -TERM "${nodes[$node]}" 2>/dev/null || true; done
  for node in "${!nodes[@]}"; do
    timeout 60 tail --pid="${nodes[$node]}" -f /dev/null || kill -KILL "${nodes[$node]}" || true
    wait "${nodes[$node]}" 2>/dev/null || true  # not every child: etcd's members run on
  done
  nodes=()
  rm -rf "$work/$run.ckpt"*
}

if [[ $store == etcd ]]; then
  ((hosts >= 3)) || { echo "chaos: STORE=etcd runs etcd in hosts 0 to 2: HOSTS must be 3 or 4"; exit 2; }
  start_etcd
fi
echo "chaos: $hosts hosts x $per_host ranks, store $store, fashion_mnist --model $model --batch-size $batch," \
  "kill every $kill_every s for $duration s, fault-free $fault_free s ($(nproc) cores)"
for mode in $modes; do
  run_job "$mode-fault-free" "$mode" "$fault_free" 0
  run_job "$mode-chaos" "$mode" "$duration" 1
done
check=()
[[ ${CHECK:-0} == 1 ]] && check=(--check)
python3 "$here/summarize_chaos.py" "$work" --batch "$batch" --modes $modes "${check[@]}"
