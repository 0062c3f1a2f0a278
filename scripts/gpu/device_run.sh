#!/usr/bin/env bash
# Everything the GPU work needs of one lent machine, in one run (docs/backends.md, "Run on a
# GPU"), within a fixed wall time so that the machine's time cannot run away:
#   1. build cohort, its torch and gpu tests and the GPU benchmarks against the wheel's libtorch
#      and run the `gpu` tests (scripts/gpu/build_and_test.sh);
#   2. the GPU benchmarks (bench/gpu/run.sh);
#   3. the `torch` tests (CPU tensors) on that libtorch, with what time is left.
# Usage, from the repository root, after scripts/gpu/stage_deps.sh (its folder travels along):
#   scripts/gpu/device_run.sh [TOTAL_S (540)] [ctest -R regex for step 1]
# Results go to $OUT (at most 8 files come back from the device tool): machine.txt,
# ctest-gpu.log, ctest-torch.log, bench.txt, bench.md, summary.txt and logs.tgz (the rest).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
total=${1:-540}
regex=${2:-}
out=${OUT:-build-gpu/out}
build=${BUILD_DIR:-build-gpu}
mkdir -p "$out"
export OUT=$out
left() { echo $((total - SECONDS)); }
say() { echo "[$(date -u +%T) +${SECONDS}s] $*" | tee -a "$out/summary.txt"; }

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "cpus $(nproc), $(free -g | awk '/Mem:/ {print $2}') GiB"
  "${PYTHON:-python3}" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  git rev-parse --short HEAD
} >"$out/machine.txt" 2>&1
say "machine: $(tr '\n' ' ' <"$out/machine.txt")"

# 1. Build, then the gpu label (the new work comes first).
LABELS=gpu CTEST_LOG=ctest-gpu.log timeout -k 5 $(($(left) - 240)) \
  scripts/gpu/build_and_test.sh "$build" .gpu-deps "$regex" >>"$out/summary.txt" 2>&1
say "build and gpu tests: rc=$?"

# 2. The benchmarks, on a quiet machine.
if [ -x "$build/bin/cohort-ddp-bench" ] && [ "$(left)" -gt 60 ]; then
  budget=$(($(left) - 80))
  [ "$budget" -gt 220 ] && budget=220
  BUDGET_S=$budget timeout -k 5 $((budget + 40)) bench/gpu/run.sh "$build" >"$out/bench-run.log" 2>&1
  say "benchmarks: rc=$? (budget ${budget}s)"
fi

# 3. The torch label: the CPU tests on this libtorch, checkpoints included.
if [ "$(left)" -gt 30 ]; then
  (cd "$build" && timeout -k 5 $(($(left) - 15)) ctest -L torch -j "$(nproc)" --timeout 120 \
    --output-on-failure >"$out/ctest-torch.log" 2>&1)
  say "torch tests: rc=$? $(grep -E 'tests passed' "$out/ctest-torch.log")"
  grep -E '\*\*\*|Failed  |Not Run' "$out/ctest-torch.log" | head -40 >>"$out/summary.txt"
fi

# What does not fit the device tool's eight files goes into one archive.
(cd "$out" && tar czf logs.tgz --ignore-failed-read gtest.log configure.log build.log \
  bench-run.log bench-logs 2>/dev/null &&
  rm -rf gtest.log configure.log build.log bench-run.log bench-logs)
say "done"
