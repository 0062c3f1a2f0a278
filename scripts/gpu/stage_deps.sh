#!/usr/bin/env bash
# Copies what a bare GPU machine lacks for scripts/gpu/build_and_test.sh (GoogleTest's sources,
# nlohmann-json's and CLI11's headers and CMake packages, zlib's headers) from this Debian machine into one
# folder that can travel with the checkout. Usage: scripts/gpu/stage_deps.sh [dir] (.gpu-deps).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-.gpu-deps}
rm -rf "$dir" && mkdir -p "$dir/include" "$dir/share/cmake"
cp -r /usr/src/googletest "$dir/googletest-src"
cp -r /usr/include/nlohmann "$dir/include/"
cp -r /usr/share/cmake/nlohmann_json "$dir/share/cmake/"
cp -r /usr/include/CLI "$dir/include/"
cp -r /usr/share/cmake/CLI11 "$dir/share/cmake/"
cp /usr/include/zlib.h /usr/include/zconf.h "$dir/include/"
du -sh "$dir"
