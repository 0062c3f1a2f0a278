#!/usr/bin/env python3
"""Tables and plots of bench/compression.sh's raw outputs: summarize_compression.py WORK_DIR.

For each link (the part of a run's name before the dot: shm, net-1gbit, ...) and method: the
median over epochs of the epoch's training time (the sum of its steps' step_ms), the mean
bytes per step each rank handed to gradient collectives, the last test accuracy printed, and
the speed-up over ddp on the same link. One SVG per link of test accuracy against cumulative
training time (gnuplot, when installed).
"""
import json
import pathlib
import re
import shutil
import statistics
import subprocess
import sys


def steps_of(jsonl):
    return [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]


def run_figures(out):
    steps = steps_of(out.with_suffix(".jsonl"))
    epoch_ms = {}
    for s in steps:
        epoch_ms[s["epoch"]] = epoch_ms.get(s["epoch"], 0.0) + s["step_ms"]
    accuracies = [float(a) for a in re.findall(r"test accuracy ([\d.]+)%", out.read_text())]
    return {
        "epoch_s": statistics.median(epoch_ms.values()) / 1000 if epoch_ms else float("nan"),
        # A mean, not a median: local SGD sends the model every H-th step and nothing between.
        "bytes": statistics.mean(s["reduced_bytes"] for s in steps) if steps else 0,
        "accuracy": accuracies[-1] if accuracies else float("nan"),
        # (cumulative training seconds, accuracy) after each evaluated epoch
        "curve": list(zip(cumulative([epoch_ms[e] / 1000 for e in sorted(epoch_ms)]), accuracies)),
    }


def cumulative(values):
    total, out = 0.0, []
    for v in values:
        total += v
        out.append(total)
    return out


def plot(work, link, runs):
    if not shutil.which("gnuplot"):
        return
    data = work / f"{link}.curves.dat"
    with data.open("w") as f:
        for method, r in runs.items():
            f.write(f'"{method}"\n0 nan\n')
            for t, a in r["curve"]:
                f.write(f"{t:.2f} {a:.2f}\n")
            f.write("\n\n")
    svg = work / f"{link}.accuracy.svg"
    script = f"""
set terminal svg size 720,440 dynamic
set output "{svg}"
set title "Fashion-MNIST CNN, {link}: test accuracy after each epoch"
set xlabel "training time, s"
set ylabel "test accuracy, %"
set key bottom right
set grid
plot for [i=0:{len(runs) - 1}] "{data}" index i using 1:2 with linespoints title columnheader(1)
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=False)
    print(f"\nplot: {svg}")


def main(work):
    work = pathlib.Path(work)
    links = {}
    for out in sorted(work.glob("*.out")):
        link, method = out.stem.split(".", 1)
        links.setdefault(link, {})[method] = run_figures(out)
    for link, runs in sorted(links.items()):
        base = runs.get("ddp")
        print(f"\n## {link}: Fashion-MNIST CNN")
        print("| method | s per epoch | speed-up over ddp | bytes per step and rank | test accuracy % |")
        print("|---|---|---|---|---|")
        for method, r in runs.items():
            speedup = base["epoch_s"] / r["epoch_s"] if base else float("nan")
            print(f"| {method} | {r['epoch_s']:.1f} | {speedup:.2f}x | {r['bytes']:,.0f} | "
                  f"{r['accuracy']:.2f} |")
        plot(work, link, runs)


if __name__ == "__main__":
    main(sys.argv[1])
