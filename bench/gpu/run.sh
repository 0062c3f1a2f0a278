#!/usr/bin/env bash
# The GPU benchmarks, for one prepared run on a machine with one NVIDIA GPU (an H100) and
# PyTorch's CUDA wheel in $PYTHON (default python3): cohort's DistributedDataParallel against
# the plain libtorch loop and PyTorch's own DDP, and cohort's staged allreduce against gloo's,
# all on CUDA. Run it after scripts/gpu/build_and_test.sh has configured and built BUILD_DIR:
#
#   bench/gpu/run.sh [BUILD_DIR]          (default build-gpu; about 3 minutes on an H100, and
#                                          about 1.5 more for (e))
#
# (a) Fashion-MNIST CNN, global batch 64 and 1024, one rank: the plain loop, cohort DDP on its
#     NCCL group, PyTorch DDP on NCCL;
# (b) the same at 2 ranks on the one GPU (NCCL refuses two ranks on one device): cohort DDP on
#     its staged group (--group staged) against PyTorch DDP on gloo, both through host memory;
# (c) examples/char_lm's GPT (its default sizes, batch 64), one rank: plain, cohort NCCL,
#     PyTorch NCCL (optimizer as libtorch's, and with PyTorch's own foreach defaults);
# (d) float32 sum allreduce of device buffers at 2 ranks, 4 KiB to 256 MiB: cohort's staged
#     group against torch.distributed gloo on CUDA tensors;
# (e) last, so that a spent budget drops them first: the large GPT (--gpt-size large, 57.2 M
#     parameters, batch 16), one rank over NCCL, for GPU memory against step time: cohort
#     FULL_SHARD with CPU offload, cohort DDP, PyTorch FSDP with CPU offload, cohort FULL_SHARD,
#     PyTorch DDP, PyTorch FSDP (in that order: the offload pair and its DDP baseline first).
#     PyTorch's FSDP1 runs NO_SHARD at world size 1 (it says so; the STEP line's strategy=).
# Every multi-process program (cohort's and PyTorch's) is started by torchrun --standalone;
# cohort::init() reads its variables (src/comm/launch_env.cc).
#
# Results are appended to ${OUT:-.}/bench.txt: per case a line
#   ### case=NAME key=KEY system=SYSTEM cmd: COMMAND
# then what the command printed (STEP lines, or the allreduce table; a failed command's stderr
# follows as "#! " lines), then "### end case=NAME rc=RC seconds=S". Each command runs under
# `timeout`; a failed case is recorded and the rest still run. At the end bench/gpu/summarize.py
# writes ${OUT:-.}/bench.md (medians and ratios) and prints it; the full stderr of every case is
# in ${OUT:-.}/bench-logs/.
#
# Env: PYTHON (python3), ROUNDS (1: every case once; more: the cases again, in the same order,
# and summarize.py takes medians), TIMING (the training runs' "--warmup 5 --steps 20
# --windows 3"), LARGE_TIMING ((e)'s: "--warmup 2 --steps 5 --windows 2"), ALLREDUCE ("-b 4K
# -e 256M -f 4 -n 10 -w 3"), BUDGET_S (200: cases not started by then are recorded as skipped,
# so that a hang cannot spend the machine's time), CASES (which groups run, in this order:
# "cnn gpt allreduce gpt-large"; e.g. CASES=gpt-large for (e) alone).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
build=${1:-build-gpu}
out=${OUT:-.}
python=${PYTHON:-python3}
rounds=${ROUNDS:-1}
budget=${BUDGET_S:-200}
read -r -a timing <<<"${TIMING:---warmup 5 --steps 20 --windows 3}"
read -r -a large_timing <<<"${LARGE_TIMING:---warmup 2 --steps 5 --windows 2}"
read -r -a groups <<<"${CASES:-cnn gpt allreduce gpt-large}"
read -r -a allreduce <<<"${ALLREDUCE:--b 4K -e 256M -f 4 -n 10 -w 3}"
results=$out/bench.txt
logs=$out/bench-logs
mkdir -p "$out" "$logs"

ddp_bench=$build/bin/cohort-ddp-bench
staged_bench=$build/bin/cohort-staged-bench
torch_ddp=bench/gpu/torch_ddp_cuda.py
torch_allreduce=bench/gpu/torch_gloo_cuda_allreduce.py
# torchrun as the module of the same Python as torch; underscores: every torch version takes them.
torchrun=("$python" -m torch.distributed.run --standalone)
one_rank=("${torchrun[@]}" --nproc_per_node 1)
two_ranks=("${torchrun[@]}" --nproc_per_node 2)

# The two benchmark programs, built here if build_and_test.sh did not build them (its configure
# may have left COHORT_BUILD_BENCH off). Not timed with the cases.
build_benchmarks() {
  [ -x "$ddp_bench" ] && [ -x "$staged_bench" ] && return 0
  echo "building cohort-ddp-bench and cohort-staged-bench in $build (log: $logs/build.log)"
  if ! { cmake -S . -B "$build" -DCOHORT_BUILD_BENCH=ON >"$logs/build.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" --target cohort-ddp-bench cohort-staged-bench \
      >>"$logs/build.log" 2>&1; }; then
    echo "build failed (the cases that need it will fail):"
    grep -E "rror" "$logs/build.log" | head -20
  fi
}

started=$SECONDS  # of the cases, for BUDGET_S (reset once the build is done)

# case_ NAME KEY SYSTEM LIMIT_S COMMAND...: runs COMMAND under timeout and records it.
case_() {
  local name=$1 key=$2 system=$3 limit=$4
  shift 4
  local start rc
  start=$(date +%s.%N)
  echo "### case=$name key=$key system=$system cmd: $*" >>"$results"
  if [ $((SECONDS - started)) -ge "$budget" ]; then  # the machine's time is counted: stop
    echo "#! skipped: the run's budget of $budget s is spent" >>"$results"
    echo "### end case=$name rc=125 seconds=0" >>"$results"
    echo "$name skipped (budget of $budget s spent)"
    return
  fi
  timeout -k 10 "$limit" "$@" >"$logs/$name.out" 2>"$logs/$name.err"
  rc=$?
  cat "$logs/$name.out" >>"$results"
  [ "$rc" -eq 0 ] || tail -15 "$logs/$name.err" | sed 's/^/#! /' >>"$results"
  local seconds
  seconds=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  echo "### end case=$name rc=$rc seconds=$seconds" >>"$results"
  local last
  last=$(grep -E "^STEP|avg busbw" "$logs/$name.out" | tail -1 | cut -c1-150)
  [ -n "$last" ] || last=$(tail -1 "$logs/$name.err" | cut -c1-150)
  printf '%-34s rc=%-3s %6ss  %s\n' "$name" "$rc" "$seconds" "$last"
}

# (a), (b): the CNN at one global batch.
cnn_cases() {
  local b=$1
  local common=(--device cuda --model cnn --batch "$b" "${timing[@]}")
  case_ "cnn-b$b-w1-plain" "cnn-b$b-w1" plain 60 "$ddp_bench" --mode plain "${common[@]}"
  case_ "cnn-b$b-w1-cohort-nccl" "cnn-b$b-w1" cohort-nccl 60 \
    "${one_rank[@]}" --no_python "$ddp_bench" --group nccl "${common[@]}"
  case_ "cnn-b$b-w1-pytorch-nccl" "cnn-b$b-w1" pytorch-nccl 60 \
    "${one_rank[@]}" "$torch_ddp" --backend nccl "${common[@]}"
  case_ "cnn-b$b-w2-cohort-staged" "cnn-b$b-w2" cohort-staged 60 \
    "${two_ranks[@]}" --no_python "$ddp_bench" --group staged "${common[@]}"
  case_ "cnn-b$b-w2-pytorch-gloo" "cnn-b$b-w2" pytorch-gloo 60 \
    "${two_ranks[@]}" "$torch_ddp" --backend gloo "${common[@]}"
}

# (c): char_lm's GPT.
gpt_cases() {
  local common=(--device cuda --model gpt --batch 64 "${timing[@]}")
  case_ gpt-b64-w1-plain gpt-b64-w1 plain 60 "$ddp_bench" --mode plain "${common[@]}"
  case_ gpt-b64-w1-cohort-nccl gpt-b64-w1 cohort-nccl 60 \
    "${one_rank[@]}" --no_python "$ddp_bench" --group nccl "${common[@]}"
  case_ gpt-b64-w1-pytorch-nccl gpt-b64-w1 pytorch-nccl 60 \
    "${one_rank[@]}" "$torch_ddp" --backend nccl "${common[@]}"
  case_ gpt-b64-w1-pytorch-nccl-foreach gpt-b64-w1 pytorch-nccl-foreach 60 \
    "${one_rank[@]}" "$torch_ddp" --backend nccl --optim foreach "${common[@]}"
}

# (d): allreduce of device buffers, 2 ranks on the one GPU.
allreduce_cases() {
  case_ allreduce-w2-cohort-staged allreduce-w2 cohort-staged 90 \
    "${two_ranks[@]}" --no_python "$staged_bench" "${allreduce[@]}"
  case_ allreduce-w2-pytorch-gloo allreduce-w2 pytorch-gloo 90 \
    "${two_ranks[@]}" "$torch_allreduce" --backend gloo "${allreduce[@]}"
}

# (e): the large GPT at one rank over NCCL, cohort's FSDP with and without CPU offload against
# DDP and against PyTorch's. Every process gets the machine's cores (--threads): under offload
# the optimizer steps 57 M parameters on the CPU (the other cases barely use them).
gpt_large_cases() {
  local common=(--device cuda --model gpt --gpt-size large --batch 16 --threads "$(nproc)"
    "${large_timing[@]}")
  local key=gpt-large-b16-w1
  case_ "$key-cohort-fsdp-offload" "$key" cohort-fsdp-offload 60 \
    "${one_rank[@]}" --no_python "$ddp_bench" --group nccl --mode fsdp --cpu-offload "${common[@]}"
  case_ "$key-cohort-ddp" "$key" cohort-ddp 60 \
    "${one_rank[@]}" --no_python "$ddp_bench" --group nccl --mode ddp "${common[@]}"
  case_ "$key-pytorch-fsdp-offload" "$key" pytorch-fsdp-offload 60 \
    "${one_rank[@]}" "$torch_ddp" --backend nccl --mode fsdp --cpu-offload "${common[@]}"
  case_ "$key-cohort-fsdp" "$key" cohort-fsdp 60 \
    "${one_rank[@]}" --no_python "$ddp_bench" --group nccl --mode fsdp "${common[@]}"
  case_ "$key-pytorch-ddp" "$key" pytorch-ddp 60 \
    "${one_rank[@]}" "$torch_ddp" --backend nccl --mode ddp "${common[@]}"
  case_ "$key-pytorch-fsdp" "$key" pytorch-fsdp 60 \
    "${one_rank[@]}" "$torch_ddp" --backend nccl --mode fsdp "${common[@]}"
}

# Whether CASES names the group $1.
wanted() {
  local g
  for g in "${groups[@]}"; do [ "$g" = "$1" ] && return 0; done
  return 1
}

# The run's header in bench.txt: when, which commit, which GPU, which torch.
header() {
  local commit gpu torch_version
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 |
    head -1)
  torch_version=$("$python" -c 'import torch
try: nccl = torch.cuda.nccl.version()
except Exception: nccl = None
print(torch.__version__, "cuda", torch.version.cuda, "nccl", nccl)' 2>&1 | tail -1)
  echo "# bench/gpu/run.sh $(date -u +%FT%TZ) commit $commit build $build rounds $rounds"
  echo "# gpu: $gpu"
  echo "# torch: $torch_version"
  echo "# cpus: $(nproc)  timing: ${timing[*]}  large: ${large_timing[*]}  allreduce:" \
    "${allreduce[*]}  cases: ${groups[*]}"
}

build_benchmarks
header >>"$results"
started=$SECONDS
for round in $(seq "$rounds"); do
  echo "round $round/$rounds"
  if wanted cnn; then for b in 64 1024; do cnn_cases "$b"; done; fi
  if wanted gpt; then gpt_cases; fi
  if wanted allreduce; then allreduce_cases; fi
  if wanted gpt-large; then gpt_large_cases; fi
done
echo "cases done in $((SECONDS - started)) s; results in $results"
"$python" bench/gpu/summarize.py "$results" | tee "$out/bench.md"
