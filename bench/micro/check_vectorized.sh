#!/usr/bin/env bash
# Reports which reduce-kernel loops g++ vectorized, per dtype x op and per clone (the portable
# "default" build and the x86-64-v3 / AVX2 one, Note [Kernel clones]), from the vectorizer's own
# dump. Exits 1 if a loop that should vectorize did not.
#
#   bench/micro/check_vectorized.sh [c++ compiler, default c++]
#
# Scalar by necessity: integer division of int64 (no SIMD division, and int64 does not fit a
# double exactly; both_loop<long, *, true> divides too), and int64 min/max/product in the default clone (SSE2 has no 64-bit compare
# or multiply). float16/bfloat16 on AVX2+F16C CPUs use hand-written intrinsics
# (Note [16-bit floats on AVX2]), which this does not list.
set -euo pipefail
cxx=${1:-c++}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && "$cxx" -std=c++17 -O3 -DNDEBUG -I"$root/include" -I"$root/src/comm" \
  -fdump-tree-vect-details -c "$root/src/comm/kernels/reduce_kernels.cc" -o kernels.o)
python3 - "$work"/*.vect <<'PY'
import re, subprocess, sys
loops = {}   # (function, clone) -> vector bytes or None
current = None
for line in open(sys.argv[1]):
    m = re.match(r";; Function .*?\((\S+?), funcdef_no", line)
    if m:
        name = m.group(1)
        clone = "default"
        for suffix in (".default", ".arch_x86_64_v3"):
            if name.endswith(suffix):
                name, clone = name[: -len(suffix)], suffix[1:]
        demangled = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
        kernel = re.search(r"(pair_loop|into_loop|divide_loop|both_loop)<(.*?)>\(", demangled)
        current = None
        if kernel:
            args = kernel.group(2).replace("cohort::kernels::(anonymous namespace)::", "")
            args = args.replace("cohort::", "")
            current = (kernel.group(1) + "<" + args + ">", clone)
            loops.setdefault(current, None)
        continue
    m = re.search(r"optimized: loop vectorized using (\d+) byte vectors", line)
    if m and current:
        loops[current] = max(loops[current] or 0, int(m.group(1)))
expected_scalar = re.compile(
    r"divide_loop<long>|(pair|into|both)_loop<long, (Min|Max|Product)Op|both_loop<long, \w+, true>")
failures = 0
print(f"{'loop':50} {'default':>10} {'x86-64-v3':>10}")
for fn in sorted({f for f, _ in loops}):
    cells = []
    for clone in ("default", "arch_x86_64_v3"):
        if (fn, clone) not in loops:
            cells.append("-")
            continue
        width = loops[(fn, clone)]
        cells.append(f"{width * 8}-bit" if width else "scalar")
        divides_int64 = "divide" in fn or fn.endswith(", true>")
        allowed = expected_scalar.search(fn) and (clone == "default" or divides_int64)
        if not width and not allowed:
            failures += 1
            cells[-1] += "!"
    print(f"{fn:50} {cells[0]:>10} {cells[1]:>10}")
print(f"{failures} loop(s) not vectorized that should be (marked !)" if failures
      else "all expected loops vectorized")
sys.exit(1 if failures else 0)
PY
