#!/usr/bin/env bash
# cohort built from source inside a user's project with FetchContent (this folder's
# CMakeLists.txt, docs/install.md), in a scratch build folder each time so that no cached
# option hides a default: the project must configure (cohort defining no programs), build and
# run. Without the libtorch layer, to keep it short.
# Arguments: cohort's source folder, the CMake generator.
set -euo pipefail
source_dir=$1; generator=$2
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
fail() { echo "subproject test: $*" >&2; exit 1; }

cmake -S "$(dirname "$0")" -B "$scratch" -G "$generator" \
  -DFETCHCONTENT_SOURCE_DIR_COHORT="$source_dir" -DCOHORT_WITH_TORCH=OFF -DCOHORT_WITH_NCCL=OFF \
  >"$scratch/configure.log" 2>&1 ||
  { cat "$scratch/configure.log"; fail "the user's project could not configure (log above)"; }
cmake --build "$scratch" >"$scratch/build.log" 2>&1 ||
  { cat "$scratch/build.log"; fail "the user's project could not build (log above)"; }
"$scratch/consumer"
echo "subproject test: passed"
