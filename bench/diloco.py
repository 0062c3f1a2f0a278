#!/usr/bin/env python3
"""DiLoCo against DDP in the char_lm example (docs/compression.md, "DiLoCo and Streaming DiLoCo").

Runs char_lm at 2 ranks for --steps steps under each configuration (plain DDP; DiLoCo with each
H of --periods; Streaming DiLoCo with --fragments; DiLoCo with bfloat16 pseudo-gradients) and
prints the final validation loss, the bytes each rank sent for the model's synchronization over
the run (the metrics file's reduced_bytes), the largest single step's bytes (the peak a link
must carry at once) and the wall time.

With --net RATE the ranks run on a simulated cluster of 2 hosts x 1 rank whose link is limited to
RATE (scripts/netns-cluster, as root), so that every synchronization crosses the slow link.

Usage: bench/diloco.py [--build build] [--steps 300] [--periods 20 50] [--fragments 4]
                       [--net 100mbit]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def launcher(build, cluster):
    if cluster is None:
        return [f"{build}/bin/cohortrun", "--nproc-per-node", "2"]
    return ["scripts/netns-cluster", "run", "--cluster", cluster, "--ranks-per-host", "1",
            "--timeout", "7200", "--"]


def threads(cluster):
    # One rank per simulated host sees no local peers and would take every core.
    return [] if cluster is None else ["--threads", "1"]


def run(build, steps, extra, cluster=None):
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)
        command = [*launcher(build, cluster), f"{build}/bin/char_lm",
                   "--max-steps", str(steps), "--sample", "0", "--no-progress", "--checkpoint",
                   f"{tmp}/ck", "--metrics", f"{tmp}/steps.jsonl", *threads(cluster), *extra]
        start = time.monotonic()
        out = subprocess.run(command, capture_output=True, text=True, timeout=7200,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        wall = time.monotonic() - start
        if out.returncode != 0:
            sys.exit(f"{' '.join(command)} failed:\n{out.stdout}{out.stderr}")
        steps_sent = [json.loads(line)["reduced_bytes"] for line in open(f"{tmp}/steps.jsonl")]
    loss = re.search(r"final: validation loss ([\d.]+)", out.stdout)
    return {"loss": float(loss.group(1)) if loss else float("nan"), "sent": sum(steps_sent),
            "peak": max(steps_sent), "wall": wall}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--periods", nargs="+", type=int, default=[20, 50])
    parser.add_argument("--fragments", type=int, default=4)
    parser.add_argument("--net", help="a link rate in tc units (100mbit): run on a netns cluster")
    args = parser.parse_args()
    cluster = None
    if args.net:
        cluster = f"cohort-diloco-{os.getpid()}"
        subprocess.run(["scripts/netns-cluster", "up", "--hosts", "2", "--name", cluster,
                        "--rate", args.net], check=True, stdout=subprocess.DEVNULL)
    configs = [("DDP", [])]
    configs += [(f"DiLoCo H={h}", ["--diloco", str(h)]) for h in args.periods]
    h = args.periods[0]
    configs.append((f"Streaming DiLoCo H={h} F={args.fragments}",
                    ["--diloco", str(h), "--diloco-fragments", str(args.fragments)]))
    configs.append((f"DiLoCo H={h} bf16", ["--diloco", str(h), "--diloco-dtype", "bf16"]))
    where = f"2 hosts x 1 rank at {args.net}" if args.net else "2 ranks on one host"
    print(f"char_lm (default model), {where}, {args.steps} steps; bytes per rank")
    print(f"{'configuration':32s} {'val. loss':>9s} {'bytes sent':>12s} {'peak step':>11s} {'wall s':>7s}")
    try:
        for name, extra in configs:
            r = run(args.build, args.steps, extra, cluster)
            print(f"{name:32s} {r['loss']:9.4f} {r['sent']:12d} {r['peak']:11d} {r['wall']:7.1f}",
                  flush=True)
    finally:
        if cluster:
            subprocess.run(["scripts/netns-cluster", "down", "--name", cluster],
                           stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
