#!/usr/bin/env python3
"""DiLoCo against DDP in the char_lm example (docs/compression.md, "DiLoCo and Streaming DiLoCo").

Runs char_lm at 2 ranks for --steps steps under each configuration (plain DDP; DiLoCo with each
H of --periods; Streaming DiLoCo with --fragments; DiLoCo with bfloat16 pseudo-gradients) and
prints the final validation loss, the bytes each rank sent for the model's synchronization over
the run (the metrics file's reduced_bytes), the largest single step's bytes (the peak a link
must carry at once) and the wall time.

With --net RATE the ranks run on a simulated cluster of 2 hosts x --ranks-per-host ranks whose
links are limited to RATE (scripts/netns-cluster, as root), and the bytes that crossed between
the hosts (every host's eth0 transmit counter) are printed too. With 2 ranks per host the runs
add local SGD (period: the first of --periods) and hierarchical DiLoCo (DDP inside a host).

Usage: bench/diloco.py [--build build] [--steps 300] [--periods 20 50] [--fragments 4]
                       [--net 100mbit] [--ranks-per-host 1] [--only NAME ...]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def launcher(build, cluster, ranks_per_host):
    if cluster is None:
        return [f"{build}/bin/cohortrun", "--nproc-per-node", "2"]
    return ["scripts/netns-cluster", "run", "--cluster", cluster, "--ranks-per-host",
            str(ranks_per_host), "--timeout", "7200", "--"]


def threads(cluster):
    # A rank of a simulated host sees no peers on other hosts and would take every core.
    return [] if cluster is None else ["--threads", "1"]


def host_tx_bytes(cluster, hosts=2):
    """Bytes every simulated host has sent on its link so far, summed."""
    total = 0
    for h in range(hosts):
        out = subprocess.run(["ip", "netns", "exec", f"{cluster}-h{h}", "cat",
                              "/sys/class/net/eth0/statistics/tx_bytes"],
                             capture_output=True, text=True, check=True)
        total += int(out.stdout)
    return total


def run(build, steps, extra, cluster=None, ranks_per_host=1):
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)
        command = [*launcher(build, cluster, ranks_per_host), f"{build}/bin/char_lm",
                   "--max-steps", str(steps), "--sample", "0", "--no-progress", "--checkpoint",
                   f"{tmp}/ck", "--metrics", f"{tmp}/steps.jsonl", *threads(cluster), *extra]
        tx_before = host_tx_bytes(cluster) if cluster else 0
        start = time.monotonic()
        out = subprocess.run(command, capture_output=True, text=True, timeout=7200,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        wall = time.monotonic() - start
        across = host_tx_bytes(cluster) - tx_before if cluster else 0
        if out.returncode != 0:
            sys.exit(f"{' '.join(command)} failed:\n{out.stdout}{out.stderr}")
        steps_sent = [json.loads(line)["reduced_bytes"] for line in open(f"{tmp}/steps.jsonl")]
    loss = re.search(r"final: validation loss ([\d.]+)", out.stdout)
    return {"loss": float(loss.group(1)) if loss else float("nan"), "sent": sum(steps_sent),
            "peak": max(steps_sent), "wall": wall, "across": across}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--periods", nargs="+", type=int, default=[20, 50])
    parser.add_argument("--fragments", type=int, default=4)
    parser.add_argument("--net", help="a link rate in tc units (100mbit): run on a netns cluster")
    parser.add_argument("--ranks-per-host", type=int, default=1)
    parser.add_argument("--only", nargs="+", help="run only the configurations whose names "
                        "start with one of these (DDP, 'local SGD', DiLoCo, Streaming, ...)")
    args = parser.parse_args()
    cluster = None
    if args.net:
        cluster = f"cohort-diloco-{os.getpid()}"
        subprocess.run(["scripts/netns-cluster", "up", "--hosts", "2", "--name", cluster,
                        "--rate", args.net], check=True, stdout=subprocess.DEVNULL)
    h = args.periods[0]
    configs = [("DDP", [])]
    if args.ranks_per_host > 1:
        configs.append((f"local SGD period {h}", ["--local-sgd", str(h)]))
    configs += [(f"DiLoCo H={p}", ["--diloco", str(p)]) for p in args.periods]
    if args.ranks_per_host > 1:
        configs.append((f"hierarchical DiLoCo H={h}", ["--diloco", str(h),
                                                       "--diloco-hierarchical"]))
    configs.append((f"Streaming DiLoCo H={h} F={args.fragments}",
                    ["--diloco", str(h), "--diloco-fragments", str(args.fragments)]))
    configs.append((f"DiLoCo H={h} bf16", ["--diloco", str(h), "--diloco-dtype", "bf16"]))
    if args.only:
        configs = [c for c in configs if any(c[0].startswith(o) for o in args.only)]
    where = (f"2 hosts x {args.ranks_per_host} rank(s) at {args.net}" if args.net
             else "2 ranks on one host")
    print(f"char_lm (default model), {where}, {args.steps} steps; bytes per rank (sent: what "
          f"rank 0 put into reductions; across: what crossed between the hosts, all ranks)")
    print(f"{'configuration':32s} {'val. loss':>9s} {'bytes sent':>12s} {'peak step':>11s} "
          f"{'across':>12s} {'wall s':>7s}")
    try:
        for name, extra in configs:
            r = run(args.build, args.steps, extra, cluster, args.ranks_per_host)
            print(f"{name:32s} {r['loss']:9.4f} {r['sent']:12d} {r['peak']:11d} "
                  f"{r['across']:12d} {r['wall']:7.1f}", flush=True)
    finally:
        if cluster:
            subprocess.run(["scripts/netns-cluster", "down", "--name", cluster],
                           stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
