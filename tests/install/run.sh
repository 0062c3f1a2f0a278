#!/usr/bin/env bash
# Installs cohort from the build tree into a scratch prefix, then configures, builds and runs
# consumer projects that use find_package(cohort):
#   1. a CPU-only consumer on a machine where CMake cannot see any CUDA toolkit or NCCL (hidden:
#      find_package(CUDAToolkit) disabled, /usr/local/cuda* ignored and off PATH), which must
#      configure, build and run whatever the build had; asking that machine for the nccl
#      component must fail and say why;
#   2. where the build had NCCL (second argument ON): a consumer of `COMPONENTS nccl`.
set -euo pipefail
build_dir=$1; with_nccl=${2:-OFF}; source_dir=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" >/dev/null
config_dir=$(dirname "$(find "$scratch/prefix" -name cohortConfig.cmake)")

fail() { echo "install test: $*" >&2; exit 1; }

# ---- 1. CPU-only: CUDA hidden from CMake and from the environment
cpu_path=$(echo "$PATH" | tr ':' '\n' | grep -v '/usr/local/cuda' | paste -sd: -)
hide_cuda=(env -u CUDA_PATH -u CUDA_HOME -u CUDAToolkit_ROOT -u CUDA_ROOT -u NCCL_ROOT
           -u LIBRARY_PATH -u CPATH PATH="$cpu_path")
hide_cuda_cmake=(-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE
                 "-DCMAKE_IGNORE_PREFIX_PATH=/usr/local/cuda;$(readlink -f /usr/local/cuda 2>/dev/null || echo /usr/local/cuda)")
"${hide_cuda[@]}" cmake -S "$source_dir" -B "$scratch/cpu" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DCMAKE_BUILD_TYPE=Release "${hide_cuda_cmake[@]}" >"$scratch/cpu.log" 2>&1 ||
  { cat "$scratch/cpu.log"; fail "a CPU-only consumer could not configure (log above)"; }
"${hide_cuda[@]}" cmake --build "$scratch/cpu" >"$scratch/cpu-build.log" 2>&1 ||
  { cat "$scratch/cpu-build.log"; fail "a CPU-only consumer could not build (log above)"; }
"$scratch/cpu/consumer"

# The targets every consumer loads name no CUDA or NCCL (those live in the nccl component).
shopt -s nullglob
if grep -il 'cuda\|nccl' "$config_dir"/cohortTargets.cmake "$config_dir"/cohortTargets-*.cmake; then
  fail "the targets every consumer loads name CUDA or NCCL (files above)"
fi

# The nccl component is found only when asked for, and not on that machine.
if "${hide_cuda[@]}" cmake -S "$source_dir" -B "$scratch/cpu-nccl" -DCONSUMER_NCCL=ON \
     -DCMAKE_PREFIX_PATH="$scratch/prefix" "${hide_cuda_cmake[@]}" >"$scratch/cpu-nccl.log" 2>&1; then
  fail "find_package(cohort COMPONENTS nccl) succeeded with CUDA hidden"
fi
grep -q 'nccl' "$scratch/cpu-nccl.log" ||
  { cat "$scratch/cpu-nccl.log"; fail "the failed nccl component does not say why (log above)"; }

# ---- 2. The nccl component, where the build had NCCL
if [[ "$with_nccl" == ON ]]; then
  cmake -S "$source_dir" -B "$scratch/nccl" -DCONSUMER_NCCL=ON -DCMAKE_PREFIX_PATH="$scratch/prefix" \
    -DCMAKE_BUILD_TYPE=Release >"$scratch/nccl.log" 2>&1 ||
    { cat "$scratch/nccl.log"; fail "find_package(cohort COMPONENTS nccl) failed (log above)"; }
  cmake --build "$scratch/nccl" >"$scratch/nccl-build.log" 2>&1 ||
    { cat "$scratch/nccl-build.log"; fail "the nccl consumer could not build (log above)"; }
  "$scratch/nccl/consumer"
  "$scratch/nccl/nccl_consumer"
fi
echo "install test: passed"
