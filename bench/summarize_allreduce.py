#!/usr/bin/env python3
"""Summarizes interleaved allreduce rounds of several peers as one Markdown table.

  summarize_allreduce.py OUT_DIR ROUNDS CAPTION BASE PEER[:FORMAT] ...

OUT_DIR holds PEER.<round>.txt files; FORMAT says how to read their rows: `cohort` for
cohort-bench (size count type redop time algbw busbw wrong, the default) or `peer` for the
peer programs of ../shared/peers (bytes iters time_med time_min time_max algbw busbw rng). Prints, per size,
each peer's median over rounds of its busbw in GB/s (4 KiB: the time in us) with the min-max,
and the ratio of BASE to every other peer (above 1: BASE is faster).
"""
import glob
import statistics
import sys

SIZES = [4096, 65536, 1 << 20, 16 << 20, 64 << 20, 256 << 20]


def parse(path, fmt):
    rows = {}
    for line in open(path):
        f = line.split()
        if not f or not f[0].isdigit():
            continue
        if fmt == "cohort":
            rows[int(f[0])] = (float(f[4]), float(f[6]))
        else:
            rows[int(f[0])] = (float(f[2]), float(f[6]))
    return rows


def main():
    out, rounds, caption, base = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    specs = [a.split(":") + ["cohort"] for a in sys.argv[5:]]
    peers = [s[0] for s in specs]
    data = {s[0]: [parse(f, s[1]) for f in sorted(glob.glob(f"{out}/{s[0]}.*.txt"))]
            for s in specs}

    def med(peer, size, i):
        vals = [r[size][i] for r in data[peer] if size in r]
        return (statistics.median(vals), min(vals), max(vals)) if vals else None

    others = [p for p in peers if p != base]
    print(f"{caption}, median over {rounds} rounds (min-max); busbw GB/s, 4 KiB as time in us")
    print("| size | " + " | ".join(peers) + " | " + " | ".join(f"{base}/{o}" for o in others) + " |")
    print("|---" * (len(peers) + len(others) + 1) + "|")
    for s in SIZES:
        i = 0 if s == 4096 else 1
        cells, meds = [], {}
        for p in peers:
            m = med(p, s, i)
            meds[p] = m[0] if m else None
            cells.append(f"{m[0]:.3g} ({m[1]:.3g}-{m[2]:.3g})" if m else "-")

        def ratio(other):
            if not meds[base] or not meds[other]:
                return "-"
            r = meds[other] / meds[base] if i == 0 else meds[base] / meds[other]
            return f"{r:.2f}x"

        label = f"{s // 1024} KiB" if s < (1 << 20) else f"{s >> 20} MiB"
        print(f"| {label} | " + " | ".join(cells) + " | " +
              " | ".join(ratio(o) for o in others) + " |")
    print(f"raw outputs: {out}")


main()
