#!/usr/bin/env python3
"""How fast libtorch computes a bfloat16 linear/matmul on this CPU, against float32 (docs/amp.md).

usage: /usr/bin/python3 bench/bf16_cpu_check.py [--repeats N] [--sizes BxIxO,...] [--matrix]

Without --matrix: times torch.nn.functional.linear(x, w) (x: B x I, w: O x I) and
torch.matmul(x, w.t()) in float32 and in bfloat16 in this process, as the environment set it up,
and prints the median (min-max) of --repeats runs after one warm-up run, in ms.

--matrix: runs itself once per environment below (each in a fresh process: libtorch and its
libraries read these variables when they load), and first a one-shot probe of each with
ONEDNN_VERBOSE=1 that shows which oneDNN kernel (ISA) ran the bfloat16 linear, or its error:
  default                         what this CPU does
  ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16   oneDNN without AMX: avx512_bf16 only
  ONEDNN_MAX_CPU_ISA=AVX512_CORE  oneDNN without any bfloat16 instruction (AVX-512 only)
  ATEN_CPU_CAPABILITY=avx2        ATen's own vectorized kernels limited to AVX2
  ... + ONEDNN_MAX_CPU_ISA=AVX2 (and DNNL_MAX_CPU_ISA=AVX2, the older name)
  ... + OPENBLAS_CORETYPE=Haswell (float32's sgemm limited to AVX2) + torch.backends.mkldnn off
      (--no-mkldnn): libtorch 1.13 sends a bfloat16 matmul to oneDNN wherever cpuinfo reports
      AVX-512 (mkldnn_bf16_device_check), whatever ONEDNN_MAX_CPU_ISA says; an AVX2-only CPU
      gets ATen's own gemm instead, and turning mkldnn off is the switch that reaches that path
      on an AVX-512 CPU.
Debian's python3-torch 1.13 is the libtorch 1.13.1 cohort links.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2"}
ENVIRONMENTS = [
    ("default", {}, False),
    ("ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, False),
    ("ONEDNN_MAX_CPU_ISA=AVX512_CORE", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, False),
    ("ATEN_CPU_CAPABILITY=avx2", {"ATEN_CPU_CAPABILITY": "avx2"}, False),
    ("ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2", AVX2, False),
    ("ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell"
     " --no-mkldnn", dict(AVX2, OPENBLAS_CORETYPE="Haswell"), True),
]


def parse_sizes(text):
    return [tuple(int(v) for v in size.split("x")) for size in text.split(",")]


def time_ms(fn, repeats):
    try:
        fn()  # warm-up: oneDNN builds its kernel, the allocator settles
    except RuntimeError as error:  # oneDNN refusing a bfloat16 matmul it has no kernel for
        return "RuntimeError: " + str(error).splitlines()[0]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), min(times), max(times)


def measure(args):
    import torch
    import torch.nn.functional as F
    if args.no_mkldnn:
        torch.backends.mkldnn.enabled = False
    capability = [l.strip() for l in torch.__config__.show().splitlines() if "CPU capability" in l]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{capability[0] if capability else '?'}, mkldnn enabled: {torch.backends.mkldnn.enabled}")
    torch.manual_seed(0)
    for batch, inputs, outputs in parse_sizes(args.sizes):
        x32 = torch.randn(batch, inputs)
        w32 = torch.randn(outputs, inputs) / inputs ** 0.5
        row = {}
        for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
            x, w = x32.to(dtype), w32.to(dtype)
            with torch.no_grad():
                row[("linear", name)] = time_ms(lambda: F.linear(x, w), args.repeats)
                row[("matmul", name)] = time_ms(lambda: torch.matmul(x, w.t()), args.repeats)
        for op in ("linear", "matmul"):
            f32, bf16 = row[(op, "float32")], row[(op, "bfloat16")]
            if isinstance(bf16, str) or isinstance(f32, str):
                text = [v if isinstance(v, str) else f"{v[0]:.2f} ms" for v in (f32, bf16)]
                print(f"  {op:6s} {batch}x{inputs}x{outputs}: float32 {text[0]}  bfloat16 {text[1]}")
                continue
            print(f"  {op:6s} {batch}x{inputs}x{outputs}: float32 {f32[0]:9.2f} ms ({f32[1]:.2f}-{f32[2]:.2f})"
                  f"  bfloat16 {bf16[0]:9.2f} ms ({bf16[1]:.2f}-{bf16[2]:.2f})"
                  f"  bfloat16/float32 {bf16[0] / f32[0]:6.2f}x", flush=True)


def probe(env, no_mkldnn):
    """Which oneDNN kernel runs one bfloat16 linear in this environment (ONEDNN_VERBOSE lines)."""
    code = ("import torch, torch.nn.functional as F\n"
            f"torch.backends.mkldnn.enabled = {not no_mkldnn}\n"
            "x = torch.randn(64, 256).bfloat16(); w = torch.randn(256, 256).bfloat16()\n"
            "F.linear(x, w)\n")
    full_env = dict(os.environ, **env, ONEDNN_VERBOSE="1", DNNL_VERBOSE="1")
    out = subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True)
    lines = [l for l in (out.stdout + out.stderr).splitlines()
             if ",isa:" in l or ",exec," in l or "Error" in l]
    return [l[:160] for l in lines[:3]] or ["(no oneDNN call: the linear ran outside oneDNN)"]


def matrix(args):
    for label, env, no_mkldnn in ENVIRONMENTS:
        print(f"== {label}", flush=True)
        for line in probe(env, no_mkldnn):
            print(f"  oneDNN: {line}", flush=True)
        command = [sys.executable, __file__, "--repeats", str(args.repeats), "--sizes", args.sizes]
        if no_mkldnn:
            command.append("--no-mkldnn")
        subprocess.run(command, env=dict(os.environ, **env), check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", default="64x1024x1024,256x1024x1024,256x4096x4096",
                        help="batch x in_features x out_features, comma-separated")
    parser.add_argument("--matrix", action="store_true", help="every environment, each in its own process")
    parser.add_argument("--no-mkldnn", action="store_true", help="torch.backends.mkldnn.enabled = False")
    args = parser.parse_args()
    matrix(args) if args.matrix else measure(args)


if __name__ == "__main__":
    main()
