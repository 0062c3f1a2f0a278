#!/usr/bin/env bash
# cohortrun's elastic mode on several hosts (docs/launch.md, "Elastic mode"), on a cluster of
# network namespaces (scripts/netns-cluster) joined by veth links limited to 1 Gbit/s: hosts 0
# and 1 run a job of 2 x 2 ranks of elastic_test_rank under cohortrun --min-ranks 2. At step 5
# host 1 is lost: its ranks kill their cohortrun and themselves (SIGKILL), so nothing of the
# job is left in that host. The ranks of host 0 go on at 2; once host 0's cohortrun has said
# that node 1 left, host 2 joins the running job with a cohortrun of its own (--node-rank 2),
# and its 2 ranks become members at the step boundary where the survivors wait for them (step
# 20): the job runs at 4 again to the end. The script checks that the survivors committed every
# step exactly once at the size it ran at, that host 2's ranks finished with them, that every
# cohortrun exited as it should, and that no process or namespace is left behind.
#
#   tests/netns/run_elastic_nodes.sh BUILD/bin/cohortrun BUILD/bin/elastic_test_rank
#
# Exit 77 (CTest: skipped, with the reason) where namespaces cannot be made: not root, no
# iproute2, a kernel or container without network namespaces, veth or bridges.
set -euo pipefail

cohortrun=${1:?usage: $0 COHORTRUN ELASTIC_TEST_RANK}
rank=${2:?usage: $0 COHORTRUN ELASTIC_TEST_RANK}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/preflight.sh"
readonly steps=40 kill_at=5 grow_at=20
# How long a wait for one event (a log line, a process's exit) may take.
readonly event_timeout_s=60
netns_preflight "$cohortrun" "$rank"

name=cohort-elastic-$$
work=$(mktemp -d)
declare -A pids=()  # node -> its cohortrun's pid (the `ip netns exec` that became it)
cleanup() {
  local node
  for node in "${!pids[@]}"; do kill -KILL "${pids[$node]}" 2>/dev/null || true; done
  "$tool" down --name "$name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

failures=()
fail() { failures+=("$*"); }

"$tool" up --hosts 3 --name "$name" >"$work/up.out" 2>&1 || {
  cat "$work/up.out"
  echo "FAIL: netns-cluster up --hosts 3"
  exit 1
}
grep -v '^netns-cluster: run in a host' "$work/up.out"
mapfile -t hosts < <(grep -E "^$name-h[0-9]+ " "$work/up.out")
ns_of() { echo "${hosts[$1]%% *}"; }
addr_of() { echo "${hosts[$1]##* }"; }
master=$(addr_of 0)
token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')

# Starts node `node`'s cohortrun in host `node`, its output (and its ranks') in $work/node<n>.
start_node() {
  local node=$1
  ip netns exec "$(ns_of "$node")" env COHORT_HOST="$(addr_of "$node")" \
    COHORT_JOB_TOKEN="$token" COHORT_TIMEOUT_S=10 COHORT_ELASTIC_SETTLE_MS=1000 \
    COHORT_ELASTIC_TIMEOUT_S=20 \
    "$cohortrun" --nnodes 2 --node-rank "$node" --master-addr "$master" --master-port 29500 \
    --nproc-per-node 2 --min-ranks 2 --node-timeout 3 --rdzv-timeout 60 \
    "$rank" --steps "$steps" --kill-at-step "$kill_at" --kill-node 1 \
    --grow-back-by-step "$grow_at" --grow-to 4 >"$work/node$node" 2>&1 &
  pids[$node]=$!
}

# Waits for cohortrun `node` to exit; sets `code` to its exit code (124: still running at the
# timeout).
wait_for_exit() {
  local node=$1
  code=0
  if ! timeout "$event_timeout_s" tail --pid="${pids[$node]}" -f /dev/null; then
    code=124
    return
  fi
  wait "${pids[$node]}" 2>/dev/null || code=$?  # no "Killed" job notice for node 1
  unset "pids[$node]"
}

# Waits until node `node`'s output has a line matching `pattern`.
wait_for_line() {
  local node=$1 pattern=$2
  timeout "$event_timeout_s" grep -q -m1 -E "$pattern" \
    <(tail --pid="${pids[$node]}" -n +1 -f "$work/node$node")
}

left_in() { ip netns pids "$(ns_of "$1")" 2>/dev/null | tr '\n' ' '; }

start_node 0
start_node 1
wait_for_exit 1
code1=$code
((code1 == 137)) || fail "node 1's cohortrun exited with $code1, not 137 (SIGKILL at step $kill_at)"
[[ -z $(left_in 1) ]] || fail "host 1 still runs processes after its loss: $(left_in 1)"
left=$(left_in 1)
echo "host 1 lost at step $kill_at: its cohortrun exited with $code1; processes left in it:" \
  "${left:-none}"
if wait_for_line 0 '^cohortrun: node 1 left'; then
  echo "node 0: $(grep -m1 '^cohortrun: node 1 left' "$work/node0")"
else
  fail "node 0's cohortrun never said that node 1 left"
fi
start_node 2
wait_for_exit 2
code2=$code
wait_for_exit 0
code0=$code
((code0 == 0)) || fail "node 0's cohortrun exited with $code0"
((code2 == 0)) || fail "node 2's cohortrun (the host that joined) exited with $code2"
echo "host 2 joined: node 0 exited with $code0, node 2 with $code2"

# Every committed step of the survivors (ranks 0 and 1), each once per rank and once at least
# in all, at size 4 before the loss, 2 until the join, 4 after; one survivor may miss the step
# the loss broke on it alone (its peer committed it at the vote: Note [Elastic commit]).
check_steps() {  # ranks (a,b), the first step they run, output
  awk -v steps="$steps" -v kill_at="$kill_at" -v grow_at="$grow_at" -v ranks="$1" \
    -v first="$2" '
    BEGIN { n = split(ranks, r, ","); for (i = 1; i <= n; i++) want[r[i]] = 1 }
    NF == 7 && $2 == "step" && $4 == "size" && $6 == "gen" {
      rank = substr($1, 2, length($1) - 2); s = $3 + 0; size = $5 + 0
      if (!(rank in want)) next
      expected = (rank in last) ? last[rank] + 1 : first
      if (s == expected + 1 && !(rank in missed)) {
        missed[rank] = 1
      } else if (s != expected) {
        printf "rank %s committed step %d after step %d\n", rank, s, expected - 1
      }
      want_size = (s < kill_at || s > grow_at) ? 4 : 2
      if (size != want_size) printf "rank %s ran step %d at size %d, not %d\n", rank, s, size, want_size
      last[rank] = s; done[s] = 1
    }
    END {
      for (i = 1; i <= n; i++) if (last[r[i]] != steps - 1) printf "rank %s ended at step %s\n", r[i], last[r[i]]
      for (s = first; s < steps; s++) if (!(s in done)) printf "no rank committed step %d\n", s
    }' < <(sed -E 's/^\[slot /[/' "$3")  # cohortrun --min-ranks prefixes "[slot N]"
}
problems=$(check_steps 0,1 0 "$work/node0")
[[ -z $problems ]] || fail "the survivors' steps: ${problems//$'\n'/; }"
problems=$(check_steps 4,5 $((grow_at + 1)) "$work/node2")
[[ -z $problems ]] || fail "the joined host's steps: ${problems//$'\n'/; }"
grep -q "^\[slot 0\] membership: generation 2: ranks 2 and 3 left; 2 ranks go on from step $kill_at\$" \
  "$work/node0" || fail "rank 0 did not print the loss of ranks 2 and 3"
grep -q "^\[slot 4\] membership: .* 4 ranks go on from step $((grow_at + 1))\$" "$work/node2" ||
  fail "rank 4 did not print that it joined a job of 4 at step $((grow_at + 1))"

for node in 0 1 2; do
  [[ -z $(left_in "$node") ]] || fail "host $node still runs processes: $(left_in "$node")"
done
while read -r pid; do
  if kill -0 "$pid" 2>/dev/null; then fail "rank process $pid still runs"; fi
done < <(sed -nE 's/^\[(slot )?[0-9]+\] pid ([0-9]+)$/\2/p' "$work"/node*)
"$tool" down --name "$name" >/dev/null
[[ -z $(ip netns list | awk '{print $1}' | grep "^$name-" || true) ]] ||
  fail "netns-cluster down left namespaces of $name"

if ((${#failures[@]})); then
  for node in 0 1 2; do
    echo "---- node $node (host $node) ----"
    sed 's/^/    | /' "$work/node$node" 2>/dev/null || true
  done
  echo "FAIL: ${#failures[@]} failure(s):"
  printf '  %s\n' "${failures[@]}"
  exit 1
fi
echo "PASS: 2 hosts x 2 ranks, host 1 lost at step $kill_at, host 2 joined by step" \
  "$((grow_at + 1)); the survivors committed steps 0 to $((steps - 1)) once each; nothing left"
