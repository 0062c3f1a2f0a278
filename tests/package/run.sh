#!/usr/bin/env bash
# The Debian package, as a user gets it (docs/install.md): `cpack` makes cohort_*.deb from the
# build folder; the package is unpacked into a scratch root (dpkg-deb -x, no root needed) and
# checked for what it promises, then two consumers are built against the unpacked tree and run:
#   1. CMake: find_package(cohort) through CMAKE_PREFIX_PATH (tests/install's consumer);
#   2. pkg-config: g++ with `pkg-config --cflags --libs cohort-comm` (and `cohort` where the
#      package has the libtorch layer), the .pc files found where they were unpacked, their
#      prefix taken from their own place.
# Arguments: the build folder, whether it has the libtorch layer (ON/OFF).
set -euo pipefail
build_dir=$(cd "$1" && pwd); with_torch=${2:-OFF}
source_dir=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT

fail() { echo "package test: $*" >&2; exit 1; }

# ---- make the package
(cd "$build_dir" && cpack -G DEB -B "$scratch/out") >"$scratch/cpack.log" 2>&1 ||
  { cat "$scratch/cpack.log"; fail "cpack could not make the package (log above)"; }
debs=("$scratch"/out/cohort_*.deb)
[[ ${#debs[@]} -eq 1 && -f ${debs[0]} ]] || fail "expected one cohort_*.deb, found: ${debs[*]}"
deb=${debs[0]}

# ---- what apt will pull in: the -dev packages the CMake config and the .pc files need, and
# the shared libraries of the programs (found by dpkg-shlibdeps)
depends=$(dpkg-deb -f "$deb" Depends)
expected=(zlib1g-dev)
[[ $with_torch == ON ]] && expected+=(libtorch-dev)
for package in "${expected[@]}"; do  # a whole entry of the list, with or without a version
  grep -qE "(^|, )$package( |,|$)" <<<"$depends" || fail "Depends lacks $package: $depends"
done
if [[ $with_torch == ON ]]; then
  [[ $depends == *libtorch1* || $depends == *libtorch2* ]] ||
    fail "Depends lacks libtorch's shared library (dpkg-shlibdeps did not run?): $depends"
fi

# ---- what it holds
root=$scratch/root
dpkg-deb -x "$deb" "$root"
libdir=$(dirname "$(find "$root/usr" -name libcohort_comm.a | head -1)")
[[ -d $libdir ]] || fail "no libcohort_comm.a in the package"
must_have=("$root/usr/include/cohort/cohort.h" "$root/usr/bin/cohortrun" "$root/usr/bin/cohort-bench"
  "$libdir/cmake/cohort/cohortConfig.cmake" "$libdir/pkgconfig/cohort-comm.pc"
  "$root/usr/share/doc/cohort/README.md" "$root/usr/share/doc/cohort/install.md")
if [[ $with_torch == ON ]]; then
  must_have+=("$libdir/libcohort_torch.a" "$libdir/pkgconfig/cohort.pc"
    "$root/usr/libexec/cohort/fashion_mnist" "$root/usr/libexec/cohort/char_lm")
fi
for file in "${must_have[@]}"; do
  [[ -e $file ]] || fail "the package lacks ${file#"$root"}"
done

# ---- 1. a CMake consumer of the unpacked tree
cmake -S "$source_dir/install" -B "$scratch/cmake" -DCMAKE_PREFIX_PATH="$root/usr" \
  -DCMAKE_BUILD_TYPE=Release >"$scratch/cmake.log" 2>&1 ||
  { cat "$scratch/cmake.log"; fail "a CMake consumer could not configure (log above)"; }
cmake --build "$scratch/cmake" >"$scratch/cmake-build.log" 2>&1 ||
  { cat "$scratch/cmake-build.log"; fail "a CMake consumer could not build (log above)"; }
"$scratch/cmake/consumer"

# ---- 2. pkg-config consumers of the unpacked tree
pc() { PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config "$@"; }
pc --exists cohort-comm || fail "pkg-config cannot read cohort-comm.pc: $(pc --print-errors cohort-comm 2>&1)"
[[ $(pc --variable=includedir cohort-comm) -ef $root/usr/include ]] ||
  fail "cohort-comm.pc points at $(pc --variable=includedir cohort-comm), not the unpacked tree"
# shellcheck disable=SC2046  # the flags are words
g++ "$source_dir/install/consumer.cc" -o "$scratch/pc_consumer" $(pc --cflags --libs cohort-comm) ||
  fail "g++ with pkg-config's cohort-comm flags failed"
"$scratch/pc_consumer"
if [[ $with_torch == ON ]]; then
  # shellcheck disable=SC2046
  g++ "$source_dir/package/torch_consumer.cc" -o "$scratch/pc_torch_consumer" \
    $(pc --cflags --libs cohort) || fail "g++ with pkg-config's cohort flags failed"
  "$scratch/pc_torch_consumer"
fi
echo "package test: passed ($(basename "$deb"), Depends: $depends)"
