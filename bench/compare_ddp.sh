#!/usr/bin/env bash
# Training throughput of cohort's DistributedDataParallel against PyTorch's own DDP (gloo, CPU;
# shared/peers/ddp_train.py) and plain libtorch loops (issue 7), interleaved round by round so
# that every system sees the same machine. Both models (cnn, mlp), global batch 64, 1 thread
# per rank. Prints, per model, the median over rounds of each configuration's samples/s (and
# its min-max), its peak RSS, and the ratios the issue sets targets for. docs/bench.md explains
# every row.
#
#   bench/compare_ddp.sh [ROUNDS]      (default 3; about 4 minutes a round on 2 cores)
#
# Env: COHORT_DDP_BENCH (default build/bin/cohort-ddp-bench), PEERS_DIR (../shared/peers),
# PEERS_WORK (scratch copy of the peers and the raw outputs; default /tmp/cohort-peers),
# WINDOWS ("--warmup 10 --steps 30 --windows 5", ddp_train.py's default timing).
#
# Malloc settings, deliberately not the same for everyone:
#  - the peers (PyTorch DDP, the peers' C++ loop) and cohort's plain baseline run with
#    ../shared/peers/malloc_env.sh sourced, as the peers' baselines were measured: without it
#    glibc's dynamic mmap/trim thresholds make their step times 15-20% slower and bimodal;
#  - cohort's DDP runs get no MALLOC_* variables (they are removed from their environment):
#    DistributedDataParallel tunes malloc itself (cohort::tune_malloc_for_training) and leaves
#    it alone when the user set any MALLOC_* variable, so with malloc_env.sh they would
#    measure the user's settings, not what cohort does out of the box;
#  - "cohort plain, cohort malloc" is the plain loop with that same tuning (--tune-malloc, no
#    environment): against it, the world-1 overhead is DDP's alone, not a malloc difference.
# The BLAS must be OpenBLAS (libopenblas0-openmp): Debian's reference BLAS is 2.5x (CNN) to 17x
# (MLP) slower and would measure the BLAS, not DDP. The script checks and refuses otherwise.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-3}
bench=${COHORT_DDP_BENCH:-$here/build/bin/cohort-ddp-bench}
cohortrun=${COHORTRUN:-$here/build/bin/cohortrun}  # starts the ranks
peers=${PEERS_DIR:-$here/../shared/peers}
work=${PEERS_WORK:-/tmp/cohort-peers}
timing=${WINDOWS:---warmup 10 --steps 30 --windows 5}
py=/usr/bin/python3  # Debian's python3-torch 1.13.1, the same libtorch as cohort's

die() { echo "compare_ddp.sh: $*" >&2; exit 2; }
[ -x "$bench" ] || die "no $bench: build it (cmake --build build --target cohort-ddp-bench) or \
set COHORT_DDP_BENCH"
[ -f "$peers/ddp_train.py" ] || die "no peers in $peers (set PEERS_DIR)"
"$py" -c 'import torch' 2>/dev/null || die "$py cannot import torch: apt-get install python3-torch"
[ -x /usr/bin/time ] || die "/usr/bin/time is needed for the peers' peak RSS: apt-get install time"

# ---- BLAS: which libblas.so.3 the alternatives system selects, and that libtorch loads it.
blas_alt=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null |
  sed -n 's/^Value: //p')
blas_loaded=$(ldd "$bench" | awk '/libblas\.so\.3/ {print $3}')
blas_real=$(readlink -f "${blas_loaded:-/nonexistent}" 2>/dev/null || true)
case "$blas_alt $blas_real" in
  *openblas*openblas*) ;;
  *) die "the active BLAS is not OpenBLAS (alternative: '${blas_alt:-none}', loaded by \
cohort-ddp-bench: '${blas_real:-none}'): install libopenblas0-openmp, or select it with \
update-alternatives --set libblas.so.3-x86_64-linux-gnu <openblas path>" ;;
esac
blas_pkg=$(dpkg -S "$blas_real" 2>/dev/null | cut -d: -f1 | head -1)
echo "BLAS: OpenBLAS is active: $blas_real (${blas_pkg:-package unknown}; alternative $blas_alt)"

# ---- peers in a scratch copy (nothing is written next to them), the peers' C++ loop built.
stamp=$(date +%Y%m%d-%H%M%S)
out=$work/compare-ddp-$stamp
mkdir -p "$work/build" "$out"
cp -r "$peers"/. "$work"/
cpp_train=$work/build/cpp_train/train_fmnist
if cmake -S "$work/cpp_train" -B "$work/build/cpp_train" -DCMAKE_BUILD_TYPE=Release \
    >"$out/cpp_train_build.log" 2>&1 &&
  cmake --build "$work/build/cpp_train" -j2 >>"$out/cpp_train_build.log" 2>&1; then
  echo "peers' C++ loop: $cpp_train"
else
  echo "peers' C++ loop: build failed (see $out/cpp_train_build.log); its row stays empty" >&2
  cpp_train=
fi
echo "raw outputs: $out"

# Command prefixes: the environment with malloc_env.sh's settings only, and without any.
malloc_vars=(MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_ MALLOC_TOP_PAD_ GLIBC_TUNABLES)
no_malloc_env=(env)
for v in "${malloc_vars[@]}"; do no_malloc_env+=(-u "$v"); done
mapfile -t peer_malloc < <(env -i /bin/bash -c ". '$work/malloc_env.sh' && env" |
  grep -E '^(MALLOC_|GLIBC_TUNABLES=)')
[ ${#peer_malloc[@]} -gt 0 ] || die "$work/malloc_env.sh set no MALLOC_* variable"
with_malloc_env=("${no_malloc_env[@]}" "${peer_malloc[@]}")
echo "malloc_env.sh: ${peer_malloc[*]} (peers and cohort's plain baseline)"
cohort_ranks2=("${no_malloc_env[@]}" "$cohortrun" --no-prefix --nproc-per-node 2 "$bench")
ddp_train=("${with_malloc_env[@]}" "$py" "$work/ddp_train.py")

# run NAME MODEL ROUND COMMAND...: output in $out/MODEL.NAME.ROUND.txt, /usr/bin/time's peak
# RSS (KiB, the largest of the process and the children it waited for) in .rss. A failed run
# is reported and leaves its cell empty; the other runs go on.
run() {
  local name=$1 model=$2 round=$3
  shift 3
  local file=$out/$model.$name.$round
  if ! /usr/bin/time -f "%M" -o "$file.rss" "$@" >"$file.txt" 2>&1; then
    echo "  $name failed; the end of $file.txt:" >&2
    tail -3 "$file.txt" >&2
  fi
}

for r in $(seq "$rounds"); do
  for m in cnn mlp; do
    echo "[$(date +%H:%M:%S)] round $r/$rounds model $m" >&2
    common=(--model "$m" --threads 1 $timing)
    run cohort_ddp2 "$m" "$r" "${cohort_ranks2[@]}" "${common[@]}" --mode ddp --batch 64 \
      --bucket-mb 25
    run cohort_nosync2 "$m" "$r" "${cohort_ranks2[@]}" "${common[@]}" --mode ddp --batch 64 \
      --bucket-mb 25 --no-sync
    run cohort_private2 "$m" "$r" "${cohort_ranks2[@]}" "${common[@]}" --mode ddp --batch 64 \
      --bucket-mb 25 --private-buckets
    run cohort_plain64 "$m" "$r" "${with_malloc_env[@]}" "$bench" "${common[@]}" --mode plain \
      --batch 64
    run cohort_plain32 "$m" "$r" "${with_malloc_env[@]}" "$bench" "${common[@]}" --mode plain \
      --batch 32
    run cohort_plain64_tuned "$m" "$r" "${no_malloc_env[@]}" "$bench" "${common[@]}" \
      --mode plain --batch 64 --tune-malloc
    run cohort_ddp1 "$m" "$r" "${no_malloc_env[@]}" "$bench" "${common[@]}" --mode ddp \
      --batch 64 --bucket-mb 25
    run torch_ddp2 "$m" "$r" "${ddp_train[@]}" "${common[@]}" --mode ddp --world 2 --batch 64 \
      --bucket-mb 25
    run torch_nosync2 "$m" "$r" "${ddp_train[@]}" "${common[@]}" --mode ddp --world 2 \
      --batch 64 --bucket-mb 25 --no-sync
    run torch_ddp1 "$m" "$r" "${ddp_train[@]}" "${common[@]}" --mode ddp --world 1 --batch 64 \
      --bucket-mb 25
    if [ -n "$cpp_train" ]; then
      run cpp_plain64 "$m" "$r" "${with_malloc_env[@]}" "$cpp_train" "${common[@]}" --batch 64
    fi
  done
done

"$py" - "$out" "$rounds" <<'PY'
import glob, os, re, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])
rows = [  # name, label
    ("cohort_ddp2", "cohort DDP, 2 ranks, bucket 25 MiB"),
    ("cohort_nosync2", "cohort DDP, 2 ranks, no_sync"),
    ("cohort_private2", "cohort DDP, 2 ranks, private buckets (staged, before issue 21)"),
    ("cohort_ddp1", "cohort DDP, world 1"),
    ("cohort_plain64", "cohort plain loop, batch 64 (malloc_env)"),
    ("cohort_plain64_tuned", "cohort plain loop, batch 64 (cohort malloc)"),
    ("cohort_plain32", "cohort plain loop, batch 32 (per-rank compute)"),
    ("torch_ddp2", "PyTorch DDP, 2 ranks, bucket 25 MiB"),
    ("torch_nosync2", "PyTorch DDP, 2 ranks, no_sync"),
    ("torch_ddp1", "PyTorch DDP, world 1"),
    ("cpp_plain64", "peers' C++ plain loop, batch 64"),
]


def field(line, name):
    m = re.search(r"\b" + re.escape(name) + r"=([^ ]+)", line)
    return m.group(1) if m else None


def load(model, name):
    """[(samples_per_s, peak_rss_mb)] over the rounds that produced a STEP line."""
    runs = []
    for path in sorted(glob.glob(f"{out}/{model}.{name}.*.txt")):
        steps = [l for l in open(path, errors="replace") if l.startswith("STEP ")]
        if not steps:
            continue
        line = steps[-1]
        sps = float(field(line, "samples_per_s"))
        ranks = field(line, "peak_rss_mb_ranks")
        if ranks:  # cohort: its own getrusage, the largest rank
            rss = max(float(x) for x in ranks.split(","))
        else:  # peers: /usr/bin/time, the largest of the process and its children
            try:
                rss = int(open(path[:-4] + ".rss").read().split()[-1]) / 1024.0
            except (OSError, ValueError, IndexError):
                rss = None
        runs.append((sps, rss))
    return runs


def fmt(v, digits=0):
    return "-" if v is None else f"{v:.{digits}f}"


for model in ("cnn", "mlp"):
    med = {}
    rss = {}
    print(f"\n## {model}: global batch 64, 1 thread per rank, median over {rounds} rounds")
    print("| configuration | samples/s | (min-max) | ms/step | peak RSS MB (max rank) |")
    print("|---|---|---|---|---|")
    for name, label in rows:
        runs = load(model, name)
        if not runs:
            print(f"| {label} | - | | | |")
            continue
        s = [x[0] for x in runs]
        r = [x[1] for x in runs if x[1] is not None]
        med[name] = statistics.median(s)
        rss[name] = statistics.median(r) if r else None
        print(f"| {label} | {med[name]:.0f} | ({min(s):.0f}-{max(s):.0f}, n={len(s)}) | "
              f"{64e3 / med[name]:.2f} | {fmt(rss[name])} |")

    def ratio(a, b, table=med):
        return table[a] / table[b] if table.get(a) and table.get(b) else None

    def row(label, value, target=None, higher_is_better=True):
        if value is None:
            print(f"| {label} | - | {target or ''} | |")
            return
        verdict = ""
        if target is not None:
            ok = value >= target if higher_is_better else value <= target
            verdict = "met" if ok else "MISSED"
        goal = "" if target is None else (">= " if higher_is_better else "<= ") + f"{target:g}"
        print(f"| {label} | {value:.3f} | {goal} | {verdict} |")

    half = lambda v: None if v is None else v / 2
    print(f"\n| {model} ratio | value | target | |")
    print("|---|---|---|---|")
    row("cohort comm efficiency: DDP 2 ranks / no_sync 2 ranks",
        ratio("cohort_ddp2", "cohort_nosync2"), 0.97 if model == "cnn" else 0.9)
    row("  the same with private buckets (staged through the window)",
        ratio("cohort_private2", "cohort_nosync2"))
    row("PyTorch comm efficiency: DDP 2 ranks / no_sync 2 ranks",
        ratio("torch_ddp2", "torch_nosync2"))
    row("cohort DDP 2 ranks / PyTorch DDP 2 ranks", ratio("cohort_ddp2", "torch_ddp2"),
        1.15 if model == "cnn" else 2.0)
    row("cohort scaling efficiency: DDP 2 ranks / (2 x DDP world 1)",
        half(ratio("cohort_ddp2", "cohort_ddp1")))
    row("PyTorch scaling efficiency: DDP 2 ranks / (2 x DDP world 1)",
        half(ratio("torch_ddp2", "torch_ddp1")))
    row("cohort scaling over the plain loop: DDP 2 ranks / (2 x plain batch 64)",
        half(ratio("cohort_ddp2", "cohort_plain64")))
    row("cohort world-1 overhead: DDP world 1 / plain batch 64 (malloc_env)",
        ratio("cohort_ddp1", "cohort_plain64"), 0.98)
    row("  the same against the plain loop with cohort's malloc tuning",
        ratio("cohort_ddp1", "cohort_plain64_tuned"))
    row("peak RSS: cohort DDP world 1 / plain batch 64", ratio("cohort_ddp1", "cohort_plain64",
        rss), 1.05, higher_is_better=False)
    row("peak RSS: cohort DDP 2 ranks (max rank) / plain batch 32",
        ratio("cohort_ddp2", "cohort_plain32", rss), 1.05, higher_is_better=False)
    row("cohort plain / peers' C++ plain loop, batch 64 (same loop, synthetic data)",
        ratio("cohort_plain64", "cpp_plain64"))
print(f"\nraw outputs: {out}")
PY
