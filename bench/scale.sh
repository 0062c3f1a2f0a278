#!/usr/bin/env bash
# Per-rank costs of one large group at 8, 16, 32 and 64 ranks on this machine, over TCP and over
# TCP with shared memory: one JSON line per (world, transport) from cohort-scale-probe
# (docs/bench.md, "Scale"). Usage: bench/scale.sh [worlds...]   (default: 8 16 32 64)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${COHORT_BIN:-build/bin}
worlds=("$@")
[ ${#worlds[@]} -gt 0 ] || worlds=(8 16 32 64)
for world in "${worlds[@]}"; do
  for transport in --no-shm ""; do
    OMP_NUM_THREADS=1 "$bin/cohortrun" --nproc-per-node "$world" \
      "$bin/cohort-scale-probe" $transport --iters 100 | grep -o '{.*}'
  done
done
