#!/usr/bin/env python3
"""Activation checkpointing in the char_lm example (docs/bench.md, "Activation checkpointing").

For each strategy (DDP, FULL_SHARD) and each global batch size, runs char_lm at 2 ranks with and
without --activation-checkpointing (every transformer block recomputed in backward) and reads
rank 0's memory line and step time:
  - steps' tensor memory at peak (counted at the allocator: cohort::track_cpu_tensor_memory),
    and its activation part: the peak less the gradients and the optimizer state the steps made;
  - the median step time, median over --repeats runs.
Then the largest batch whose steps fit --cap-mib per rank, with and without.

Usage: bench/activation_checkpointing.py [--build build] [--cap-mib 160] [--repeats 3]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

MEMORY = re.compile(
    r"\[0\]\s+memory of rank 0: model state [\d.]+ MiB \(parameters [\d.]+"
    r"(?: \+ units gathered at once [\d.]+)? \+ gradients ([\d.]+)(?: \(peak ([\d.]+) in backward\))?"
    r" \+ optimizer state ([\d.]+)\), tensors of the steps ([\d.]+) MiB at peak")
STEP = re.compile(r"step ([\d.]+) ms median")


def run(build, strategy, batch, checkpointed, steps, model):
    with tempfile.TemporaryDirectory() as tmp:
        command = [f"{build}/bin/cohortrun", "--nproc-per-node", "2", f"{build}/bin/char_lm",
                   "--strategy", strategy, "--batch-size", str(batch), "--max-steps", str(steps),
                   "--skip-eval", "--sample", "0", "--no-progress", "--checkpoint",
                   f"{tmp}/ck", *model.split()]
        if checkpointed:
            command.append("--activation-checkpointing")
        out = subprocess.run(command, capture_output=True, text=True, timeout=1800,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
    if out.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{out.stdout}{out.stderr}")
    memory, step = MEMORY.search(out.stdout), STEP.search(out.stdout)
    if memory is None or step is None:
        sys.exit(f"no memory or step line in:\n{out.stdout}")
    gradients = float(memory.group(2) or memory.group(1))
    peak = float(memory.group(4))
    return {"peak": peak, "activations": peak - gradients - float(memory.group(3)),
            "step_ms": float(step.group(1))}


def measure(args, strategy, batch, checkpointed):
    runs = [run(args.build, strategy, batch, checkpointed, args.steps, args.model)
            for _ in range(args.repeats)]
    times = [r["step_ms"] for r in runs]
    return {"peak": runs[0]["peak"], "activations": runs[0]["activations"],
            "step_ms": statistics.median(times), "spread": max(times) - min(times)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--strategies", nargs="+", default=["ddp", "full_shard"])
    parser.add_argument("--batches", nargs="+", type=int, default=[32, 64, 128, 256, 512])
    parser.add_argument("--cap-mib", type=float, default=160.0,
                        help="per-rank limit on the steps' tensor memory at peak")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--model", default="--layers 4 --width 128 --heads 4 --context 64")
    args = parser.parse_args()
    print(f"char_lm {args.model}, 2 ranks, {args.steps} steps per run, step time the median of "
          f"{args.repeats} runs' medians; memory per rank (rank 0) in MiB")
    for strategy in args.strategies:
        print(f"\n{strategy}\n  batch | peak off  peak on | activ. off  activ. on  cut | "
              "step ms off   step ms on   overhead")
        fits = {False: 0, True: 0}
        for batch in args.batches:
            off = measure(args, strategy, batch, False)
            on = measure(args, strategy, batch, True)
            for checkpointed, result in ((False, off), (True, on)):
                if result["peak"] <= args.cap_mib:
                    fits[checkpointed] = batch
            cut = 1 - on["activations"] / off["activations"]
            overhead = on["step_ms"] / off["step_ms"] - 1
            print(f"  {batch:5d} | {off['peak']:8.1f} {on['peak']:8.1f} | {off['activations']:10.1f}"
                  f" {on['activations']:10.1f} {cut:4.0%} | {off['step_ms']:7.1f} ±{off['spread']:<5.1f}"
                  f"{on['step_ms']:7.1f} ±{on['spread']:<5.1f} {overhead:+5.0%}", flush=True)
        print(f"  largest batch within {args.cap_mib:.0f} MiB: {fits[False]} without, "
              f"{fits[True]} with activation checkpointing")


if __name__ == "__main__":
    main()
