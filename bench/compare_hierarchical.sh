#!/usr/bin/env bash
# Hierarchical allreduce against the flat ring and halving-doubling on a simulated cluster:
# 2 hosts x 2 ranks (network namespaces, scripts/netns-cluster) joined by links limited to
# 1 Gbit/s, float32 sum at 1 MiB and 64 MiB. Rounds interleave the algorithms so that all see
# the same machine; prints the median busbw (GB/s) over rounds, the spread, and the link rate.
# "hierarchical+reg" is the hierarchical allreduce on registered buffers (cohort-bench
# --registered): its phases inside each host run in place.
#
#   bench/compare_hierarchical.sh [ROUNDS]   (default 3; root; needs build/bin/cohort-bench)
# Env: HOSTS (default 2), RATE (default 1gbit).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bench=$here/build/bin/cohort-bench
tool=$here/scripts/netns-cluster
[ -x "$bench" ] || { echo "build cohort-bench first: ./scripts/test or ./scripts/demo" >&2; exit 2; }
rounds=${1:-3}
hosts=${HOSTS:-2}
name=cohort-hier-$$
out=$(mktemp -d /tmp/compare-hierarchical-XXXX)
trap '"$tool" down --name "$name" >/dev/null 2>&1 || true' EXIT
"$tool" up --hosts "$hosts" --name "$name" --rate "${RATE:-1gbit}" | grep -v '^netns-cluster: run'

for round in $(seq "$rounds"); do
  for variant in hierarchical hierarchical+reg ring hd; do
    algo=${variant%+reg}
    registered=(); [ "$variant" != "$algo" ] && registered=(--registered)
    for spec in 1M:10 64M:2; do
      "$tool" run --cluster "$name" --timeout 300 -- "$bench" allreduce --algo "$algo" \
        "${registered[@]}" --min-bytes "${spec%%:*}" --max-bytes "${spec%%:*}" \
        --iters "${spec##*:}" --warmup 1 |
        awk -v a="$variant" '/^ +[0-9]/ {print a, $1, $7}' >>"$out/rows"
    done
  done
  echo "round $round done" >&2
done

echo "# $hosts hosts x 2 ranks, ${RATE:-1gbit} links: busbw GB/s, median (min-max) of $rounds rounds"
printf '%-17s %-24s %-24s\n' algorithm "1 MiB" "64 MiB"
for algo in hierarchical hierarchical+reg ring hd; do
  line=$(printf '%-17s' "$algo")
  for size in 1048576 67108864; do
    cell=$(awk -v a="$algo" -v s="$size" '$1 == a && $2 == s {print $3}' "$out/rows" | sort -g |
      awk '{v[NR] = $1} END {printf "%.3f (%.3f-%.3f)", v[int((NR + 1) / 2)], v[1], v[NR]}')
    line+=$(printf ' %-24s' "$cell")
  done
  echo "$line"
done
echo "# raw rows: $out/rows"
