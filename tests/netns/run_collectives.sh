#!/usr/bin/env bash
# Every collective and algorithm of cohort-bench on a cluster of network namespaces
# (scripts/netns-cluster): 2 hosts x 2 ranks, then 4 hosts x 2 ranks, over veth links limited
# to 1 Gbit/s. cohort-bench checks every result and exits non-zero on a wrong one; this script
# also checks that a named algorithm really ran (no "has no ... variant" fallback), that the
# group sees 2 ranks per host and picks the hierarchical allreduce by itself, that `run` passes a
# rank's failure on, and that it leaves no namespace behind.
#
#   tests/netns/run_collectives.sh BUILD/bin/cohort-bench
#
# Exit 77 (CTest: skipped, with the reason) where namespaces cannot be made: not root, no
# iproute2, a kernel or container without network namespaces, veth or bridges.
# Env: COHORT_NETNS_HOSTS (default "2 4"; COHORT_TEST_SCALE=small: "2").
set -euo pipefail

bench=${1:?usage: $0 COHORT_BENCH}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/preflight.sh"
netns_preflight "$bench"

if [[ ${COHORT_TEST_SCALE:-} == small ]]; then
  host_counts=${COHORT_NETNS_HOSTS:-2}
else
  host_counts=${COHORT_NETNS_HOSTS:-2 4}
fi

# collective:algorithm, every variant cohort has (src/comm/algorithms), and auto.
cases=(
  allreduce:ring allreduce:tree allreduce:hd allreduce:direct allreduce:hierarchical
  allreduce:auto
  broadcast:ring broadcast:tree broadcast:direct broadcast:auto
  reduce:tree reduce:direct reduce:auto
  allgather:ring allgather:hd allgather:direct allgather:auto
  reduce_scatter:ring reduce_scatter:hd reduce_scatter:direct reduce_scatter:auto
  all_to_all:direct all_to_all:auto
  barrier:auto
)
bench_args=(--max-bytes 1M --iters 2 --warmup 1 --timeout 60)

prefix=cohort-test-$$
work=$(mktemp -d)
cleanup() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$prefix-" | sed 's/-[^-]*$//' |
    sort -u); do
    "$tool" down --name "$ns" || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The automatic choice on 2 ranks per host, read from cohort-bench's JSON rows.
auto_is_hierarchical() {
  "$tool" run --cluster "$1" --timeout 120 -- "$bench" allreduce --min-bytes 1M --max-bytes 1M \
    --iters 1 --warmup 0 --json "$work/auto.json" >/dev/null 2>&1 &&
    grep -q '"algo": *"hierarchical"' "$work/auto.json"
}

failures=()
leftover() { ip netns list | awk '{print $1}' | grep "^$1-" || true; }

# 1. `run` on a cluster of its own: a failing rank's exit code comes back, nothing is left.
code=0
"$tool" run --hosts 2 --name "$prefix-solo" --timeout 60 -- \
  sh -c 'if [ "$RANK" = 3 ]; then exit 5; fi; sleep 30' >"$work/solo.out" 2>&1 || code=$?
if ((code != 5)); then
  failures+=("run with a failing rank: exit code $code, expected 5")
  cat "$work/solo.out"
fi
if [[ -n $(leftover "$prefix-solo") ]]; then
  failures+=("run left namespaces behind: $(leftover "$prefix-solo" | tr '\n' ' ')")
fi
echo "run --hosts 2, rank 3 exits 5, the others hang: exit code $code," \
  "namespaces left: $(leftover "$prefix-solo" | tr '\n' ' ' | sed 's/^$/none/')"

# 2. every case on one cluster per host count (run --cluster: one set-up for all).
for hosts in $host_counts; do
  name=$prefix-$hosts
  "$tool" up --hosts "$hosts" --name "$name" >"$work/up.out" 2>&1 || {
    cat "$work/up.out"
    failures+=("up --hosts $hosts failed")
    continue
  }
  grep -v '^netns-cluster: run in a host' "$work/up.out"
  for c in "${cases[@]}"; do
    collective=${c%%:*}
    algo=${c##*:}
    out=$work/$hosts.$collective.$algo.out
    start=$SECONDS
    code=0
    "$tool" run --cluster "$name" --timeout 180 -- \
      "$bench" "$collective" --algo "$algo" "${bench_args[@]}" >"$out" 2>&1 || code=$?
    verdict=ok
    if ((code != 0)); then
      verdict="FAILED (exit code $code)"
    elif ! grep -q '^# #wrong total: 0 (OK)' "$out"; then
      verdict="FAILED (no '#wrong total: 0 (OK)' line)"
    elif [[ $algo != auto ]] && grep -q 'has no .* variant' "$out"; then
      verdict="FAILED (fell back: $(grep -o '[a-z_]* has no .* variant' "$out"))"
    elif [[ $c == allreduce:auto ]] && ! auto_is_hierarchical "$name"; then
      verdict="FAILED (auto did not pick hierarchical at 1 MiB on 2 ranks per host)"
    fi
    printf '%d hosts x 2 ranks  %-15s --algo %-7s %3ds  %s\n' "$hosts" "$collective" "$algo" \
      $((SECONDS - start)) "$verdict"
    if [[ $verdict != ok ]]; then
      failures+=("$hosts hosts: $collective --algo $algo: $verdict")
      sed 's/^/    | /' "$out"
    fi
  done
  "$tool" down --name "$name"
  if [[ -n $(leftover "$name") ]]; then failures+=("down --name $name left namespaces"); fi
done

if ((${#failures[@]})); then
  echo "FAIL: ${#failures[@]} failure(s):"
  printf '  %s\n' "${failures[@]}"
  exit 1
fi
echo "PASS: ${#cases[@]} cases on ${host_counts// /, } hosts, every result checked"
