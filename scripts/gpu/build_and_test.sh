#!/usr/bin/env bash
# On a machine with a CUDA GPU and PyTorch's Python wheel (libtorch 2.x with CUDA, NCCL from the
# nvidia-nccl wheel): builds cohort's libraries, its torch and gpu tests and the GPU benchmarks
# (bench/gpu/run.sh runs those) against them, and runs the tests. Dependencies the machine
# lacks come from scripts/gpu/stage_deps.sh's folder.
# Usage: scripts/gpu/build_and_test.sh [build-dir] [deps-dir] [ctest -R regex]
# Env: LABELS (ctest labels, "gpu|torch"), CTEST_LOG (ctest.log), PYTHON (python3),
# TEST_TARGETS ("cohort_gpu_tests cohort_torch_tests"), BENCH (1; 0: the benchmarks not built).
# Writes the logs to $OUT (or the build dir) as it goes.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
deps=$(realpath "${2:-.gpu-deps}")
regex=${3:-}
logs=${OUT:-$build}
mkdir -p "$build" "$logs"
python=${PYTHON:-python3}
jobs=$(nproc)

torch_prefix=$($python -c 'import torch; print(torch.utils.cmake_prefix_path)')
# NCCL from the nvidia-nccl wheel beside torch; where there is none (a dry run on a machine
# with the CUDA toolkit's NCCL), CMake finds it as usual.
nccl_args=()
nccl_dir=$($python -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null)
if [ -n "$nccl_dir" ]; then
  nccl_args=(-DNCCL_INCLUDE_DIR="$nccl_dir/include" -DNCCL_LIBRARY="$(ls "$nccl_dir"/lib/libnccl.so* | head -1)")
fi
echo "torch $($python -c 'import torch; print(torch.__version__, torch.version.cuda)'), nccl ${nccl_args[*]:-found by CMake}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# GoogleTest from its sources, installed beside the build.
if [ ! -f "$build/gtest/lib/cmake/GTest/GTestConfig.cmake" ] && \
   [ ! -f "$build/gtest/lib64/cmake/GTest/GTestConfig.cmake" ]; then
  cmake -S "$deps/googletest-src" -B "$build/gtest-build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$build/gtest" >"$logs/gtest.log" 2>&1 &&
    cmake --build "$build/gtest-build" -j "$jobs" --target install >>"$logs/gtest.log" 2>&1 ||
    { echo "GoogleTest build failed"; tail -20 "$logs/gtest.log"; exit 1; }
fi

zlib_args=()
[ -f /usr/include/zlib.h ] || zlib_args=(-DZLIB_INCLUDE_DIR="$deps/include"
  -DZLIB_LIBRARY="$(ls /usr/lib/x86_64-linux-gnu/libz.so* /lib/x86_64-linux-gnu/libz.so* 2>/dev/null | head -1)")
generator=()
command -v ninja >/dev/null && [ ! -f "$build/Makefile" ] && generator=(-G Ninja)
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$(realpath "$build")/gtest;$deps" \
  -DCOHORT_WITH_MPI=OFF -DCOHORT_WITH_NCCL=ON "${nccl_args[@]}" \
  -DCOHORT_BUILD_TOOLS=OFF -DCOHORT_BUILD_EXAMPLES=OFF \
  -DCOHORT_BUILD_BENCH=ON -DCMAKE_CUDA_ARCHITECTURES=90 "${zlib_args[@]}" \
  >"$logs/configure.log" 2>&1 || { echo "configure failed"; tail -40 "$logs/configure.log"; exit 1; }
grep -E "Torch|CUDA|NCCL" "$logs/configure.log" | head -20
# Keep going past a failed file, so that one run shows every error.
keep_going=(-- -k)
[ -f "$build/build.ninja" ] && keep_going=(-- -k 0)
read -r -a test_targets <<<"${TEST_TARGETS:-cohort_gpu_tests cohort_torch_tests}"
cmake --build "$build" -j "$jobs" --target "${test_targets[@]}" "${keep_going[@]}" \
  >"$logs/build.log" 2>&1 || { echo "build failed"; grep -E "error|Error" "$logs/build.log" | head -80; exit 1; }
echo "tests built"
# The benchmarks (bench/gpu/run.sh) apart: a failure there must not keep the tests from running.
if [ "${BENCH:-1}" != 0 ]; then
  cmake --build "$build" -j "$jobs" --target cohort-ddp-bench cohort-staged-bench \
    >>"$logs/build.log" 2>&1 || { echo "benchmarks' build failed"; grep -E "error" "$logs/build.log" | tail -20; }
fi
labels=${LABELS:-gpu|torch}
ctest_log=$logs/${CTEST_LOG:-ctest.log}
(cd "$build" && ctest -L "$labels" ${regex:+-R "$regex"} -j 8 --output-on-failure \
  --timeout 300 >"$ctest_log" 2>&1); rc=$?
grep -E "tests passed|Skipped|\*\*\*|Failed|Not Run" "$ctest_log" | tail -60
exit $rc
