#!/usr/bin/env python3
"""Tables of bench/async.sh's results.csv (docs/async.md, "Measured"): medians over repeats."""
import csv
import statistics
import sys
from collections import defaultdict


def main(path):
    runs = defaultdict(list)
    for row in csv.DictReader(open(path)):
        runs[(row["table"], row["mode"], row["slow"])].append(row)
    order = ["sync", "backup", "ssp1", "ssp4", "ssp16", "async"]

    def median(rows, key):
        return statistics.median(float(r[key]) for r in rows)

    straggler_tables = sorted({k[0] for k in runs if k[0].startswith(("straggler", "net"))})
    for table in straggler_tables:
        base = runs.get((table, "sync", "1"))
        base_rate = median(base, "samples_per_s") if base else None
        slows = sorted({k[2] for k in runs if k[0] == table}, key=float)
        print(f"\n{table}:\n\n| mode | " +
              " | ".join(f"one rank slowed {s}x: samples/s (vs sync 1x), accuracy"
                         for s in slows) + " |")
        print("|---|" + "---|" * len(slows))
        for mode in order + ["async-hybrid"]:
            if not any(k[0] == table and k[1] == mode for k in runs):
                continue
            cells = []
            for s in slows:
                rows = runs.get((table, mode, s))
                if not rows:
                    cells.append("")
                    continue
                rate = median(rows, "samples_per_s")
                ratio = f" ({rate / base_rate:.2f}x)" if base_rate else ""
                cells.append(f"{rate:.0f}{ratio}, {median(rows, 'accuracy'):.2f}%")
            print(f"| {mode} | " + " | ".join(cells) + " |")
    if any(k[0] == "staleness" for k in runs):
        print("\n| mode | test accuracy | mean staleness | samples/s |")
        print("|---|---|---|---|")
        for mode in order:
            rows = runs.get(("staleness", mode, "1"))
            if rows:
                print(f"| {mode} | {median(rows, 'accuracy'):.2f}% | "
                      f"{median(rows, 'mean_staleness'):.2f} | {median(rows, 'samples_per_s'):.0f} |")


if __name__ == "__main__":
    main(sys.argv[1])
