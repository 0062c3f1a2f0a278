#!/usr/bin/env python3
"""Tables of bench/large_batch.sh's raw outputs: summarize_large_batch.py WORK_DIR."""
import json
import pathlib
import re
import statistics
import sys


def steps_of(jsonl):
    return [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]


def cost_table(work):
    runs = {}
    for jsonl in sorted(work.glob("cost.*.jsonl")):
        _, setting, _round = jsonl.stem.split(".")
        steps = steps_of(jsonl)
        runs.setdefault(setting, []).append(statistics.median(s["step_ms"] for s in steps[10:]))
    if not runs:
        return
    print("\n## SyncBatchNorm's cost: CNN with BatchNorm, global batch 64, 2 ranks")
    print("| layer | step ms, median over rounds (min-max) | rounds |")
    print("|---|---|---|")
    for setting, values in sorted(runs.items()):
        print(f"| {setting} | {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
              f" | {len(values)} |")
    if "bn" in runs and "syncbn" in runs:
        ratio = statistics.median(runs["syncbn"]) / statistics.median(runs["bn"])
        print(f"\nsyncbn / bn step time: {ratio:.3f}")


def table(work):
    rows = {}
    for out in sorted(work.glob("table.*.out")):
        _, batch, setting = out.stem.split(".")
        text = out.read_text()
        accuracy = re.findall(r"test accuracy ([\d.]+)%", text)
        steps = steps_of(out.with_suffix(".jsonl"))
        ms = sum(s["step_ms"] for s in steps)
        samples = sum(s["samples"] for s in steps)
        rows[(int(batch), setting)] = (accuracy[-1] if accuracy else "n/a",
                                       samples / (ms / 1000) if ms else float("nan"),
                                       steps[-1]["lr"] if steps else float("nan"))
    if not rows:
        return
    print("\n## Large batches: CNN with BatchNorm, 2 ranks, same epochs")
    print("| global batch | setting | test accuracy % | samples/s | final LR |")
    print("|---|---|---|---|---|")
    for (batch, setting), (acc, rate, lr) in sorted(rows.items()):
        print(f"| {batch} | {setting} | {acc} | {rate:.0f} | {lr:.4g} |")


def main(work):
    work = pathlib.Path(work)
    cost_table(work)
    table(work)


if __name__ == "__main__":
    main(sys.argv[1])
