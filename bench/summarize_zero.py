#!/usr/bin/python3
"""Tables of bench/compare_zero.sh's raw outputs: OUT/MODEL.SYSTEM.RANKS.ROUND.txt, each holding
the STEP line and the MEM lines of cohort-zero-bench or bench/zero_peer.py.

  bench/summarize_zero.py OUT

Throughput: the median over rounds of samples/s (and min-max), with the median step phases.
Memory: model-state bytes of the largest rank (the same every round), peak RSS of the largest
rank (median over rounds). Then the ratios the issue sets targets for (docs/bench.md).
"""
import glob
import os
import re
import statistics
import sys

SYSTEMS = [  # name, label
    ("cohort_ddp", "cohort DDP"),
    ("cohort_zero1", "cohort ZeRO-1"),
    ("cohort_zero2", "cohort ZeRO-2"),
    ("torch_ddp", "PyTorch DDP"),
    ("torch_zero1", "PyTorch ZeroRedundancyOptimizer"),
    # compare_zero.sh with BASELINE_ZERO_BENCH: another build's cohort, in the same rounds.
    ("base_ddp", "baseline cohort DDP"),
    ("base_zero1", "baseline cohort ZeRO-1"),
    ("base_zero2", "baseline cohort ZeRO-2"),
]
MB = 1e6


def fields(line):
    return dict(re.findall(r"(\S+?)=(\S+)", line))


def load(out, model, system, ranks, with_round=False):
    """[(step fields, [mem fields by rank])] over the rounds that printed a STEP line (with the
    round number first when with_round)."""
    runs = []
    for path in sorted(glob.glob(f"{out}/{model}.{system}.{ranks}.*.txt")):
        lines = open(path, errors="replace").read().splitlines()
        steps = [fields(l) for l in lines if l.startswith("STEP ")]
        mems = [fields(l) for l in lines if l.startswith("MEM ")]
        if steps:
            round_number = int(os.path.basename(path).split(".")[-2])
            runs.append((round_number, steps[-1], mems) if with_round else (steps[-1], mems))
    return runs


def med(values):
    return statistics.median(values) if values else None


def largest_rank(mems, key):
    return max(float(m[key]) for m in mems)


def throughput_table(out, model, ranks=2):
    """Prints the table; returns {system: {round: samples/s}}."""
    print(f"\n## {model} model, {ranks} ranks: throughput (median over rounds)")
    print("| system | params | samples/s | (min-max, n) | ms/step | forward | backward | "
          "optimizer | exposed comm |")
    print("|---|---|---|---|---|---|---|---|---|")
    result = {}
    for name, label in SYSTEMS:
        runs = load(out, model, name, ranks)
        if not runs:
            if not name.startswith("base_"):
                print(f"| {label} | - | - | | | | | | |")
            continue
        sps = [float(s["samples_per_s"]) for s, _ in runs]
        phase = lambda k: med([float(s[k]) for s, _ in runs if k in s])
        result[name] = {r: float(s["samples_per_s"])
                        for r, s, _ in load(out, model, name, ranks, with_round=True)}
        exposed = phase("exposed_comm_ms")
        print(f"| {label} | {runs[0][0]['params']} | {med(sps):.2f} | "
              f"({min(sps):.2f}-{max(sps):.2f}, n={len(sps)}) | "
              f"{float(runs[0][0]['global_batch']) * 1e3 / med(sps):.0f} | "
              f"{phase('forward_ms'):.0f} | {phase('backward_ms'):.0f} | "
              f"{phase('optimizer_ms'):.0f} | {'-' if exposed is None else f'{exposed:.0f}'} |")
    return result


def memory_table(out, model, ranks):
    """Prints the table; returns {system: (model_state, peak model state, params)} in bytes."""
    print(f"\n## {model} model, {ranks} ranks: model state of the largest rank (MB = 1e6 B)")
    print("| system | parameters | gradients | peak gradients | optimizer state | model state "
          "| bytes/param | peak model state | peak RSS MiB (median, max rank) |")
    print("|---|---|---|---|---|---|---|---|---|")
    result = {}
    for name, label in SYSTEMS:
        runs = load(out, model, name, ranks)
        if not runs:
            continue
        mems = runs[-1][1]
        get = lambda key: largest_rank(mems, key)
        params = int(runs[-1][0]["params"])
        state = get("model_state")
        peak = get("parameters") + get("peak_gradients") + get("optimizer_state")
        rss = med([largest_rank(m, "peak_rss_mb") for _, m in runs])
        result[name] = (state, peak)
        print(f"| {label} | {get('parameters') / MB:.0f} | {get('gradients') / MB:.0f} | "
              f"{get('peak_gradients') / MB:.0f} | {get('optimizer_state') / MB:.0f} | "
              f"{state / MB:.0f} | {state / params:.2f} | {peak / MB:.0f} | {rss:.0f} |")
    rss_phase_table(out, model, ranks)
    return result


def rss_phase_table(out, model, ranks):
    """Where the peak RSS beyond the model state comes from: the largest rank's peak RSS before
    the first step and what each phase of the steps added to it (median over rounds); rows only
    for the runs that report it."""
    rows = []
    for name, label in SYSTEMS:
        runs = [m for _, m in load(out, model, name, ranks) if m and "rss_growth_mb" in m[0]]
        if not runs:
            continue
        def growth(mems, phase):
            return max(float(dict(x.split(":") for x in m["rss_growth_mb"].split(","))[phase])
                       for m in mems)
        cells = [med([largest_rank(m, "rss_before_steps_mb") for m in runs])]
        cells += [med([growth(m, ph) for m in runs]) for ph in ("forward", "backward", "optimizer")]
        cells.append(med([largest_rank(m, "peak_rss_mb") for m in runs]))
        rows.append(f"| {label} | " + " | ".join(f"{c:.0f}" for c in cells) + " |")
    if rows:
        print(f"\n{model} model, {ranks} ranks: peak RSS by phase (MiB, largest rank, all steps)")
        print("| system | before the first step | + forward | + backward | + optimizer step | "
              "peak RSS |")
        print("|---|---|---|---|---|---|")
        print("\n".join(rows))


def ratio_row(label, a, b, target=None):
    """a, b: {round: samples/s}. The ratio of the medians, and the median (min-max) of the
    ratios within each round, which the machine's drift between rounds disturbs less."""
    goal = "" if target is None else f">= {target:g}"
    if not a or not b:
        print(f"| {label} | - | - | {goal} | |")
        return
    value = med(list(a.values())) / med(list(b.values()))
    paired = [a[r] / b[r] for r in sorted(a) if r in b]
    per_round = (f"{med(paired):.3f} ({min(paired):.3f}-{max(paired):.3f}, n={len(paired)})"
                 if paired else "-")
    verdict = "" if target is None else ("met" if value >= target else "MISSED")
    print(f"| {label} | {value:.3f} | {per_round} | {goal} | {verdict} |")


def throughput_ratios(model, t):
    g = t.get
    print(f"\n| {model} model, 2 ranks: throughput ratio | of the medians | per round, median "
          "(min-max) | target | |")
    print("|---|---|---|---|---|")
    ratio_row("cohort ZeRO-1 / cohort DDP", g("cohort_zero1"), g("cohort_ddp"), 0.95)
    ratio_row("cohort ZeRO-2 / cohort DDP", g("cohort_zero2"), g("cohort_ddp"), 0.95)
    ratio_row("cohort ZeRO-1 / PyTorch ZeroRedundancyOptimizer", g("cohort_zero1"),
              g("torch_zero1"), 1.5)
    ratio_row("cohort DDP / PyTorch DDP", g("cohort_ddp"), g("torch_ddp"))
    ratio_row("PyTorch ZeroRedundancyOptimizer / PyTorch DDP", g("torch_zero1"), g("torch_ddp"))
    if g("base_ddp") is not None:
        ratio_row("baseline ZeRO-1 / baseline DDP", g("base_zero1"), g("base_ddp"), 0.95)
        ratio_row("baseline ZeRO-2 / baseline DDP", g("base_zero2"), g("base_ddp"), 0.95)
        for s in ("ddp", "zero1", "zero2"):
            ratio_row(f"cohort {s} / baseline {s}", g(f"cohort_{s}"), g(f"base_{s}"))


def memory_ratios(model, by_ranks):
    print(f"\n| {model} model: model state / DDP's | 2 ranks | 4 ranks | ZeRO paper (Adam, "
          "12 B of state per parameter: DDP 16 B) |")
    print("|---|---|---|---|")
    paper = {"cohort_zero1": lambda w: (8 + 8 / w) / 16, "cohort_zero2": lambda w: (4 + 12 / w) / 16,
             "torch_zero1": lambda w: (8 + 8 / w) / 16}
    paper["base_zero1"], paper["base_zero2"] = paper["cohort_zero1"], paper["cohort_zero2"]
    for name, label in SYSTEMS[1:3] + SYSTEMS[4:5] + SYSTEMS[6:]:
        if not any(name in m for m in by_ranks.values()):
            continue
        base = {"torch": "torch_ddp", "base_": "base_ddp"}.get(name[:5], "cohort_ddp")
        for kind, index in (("now", 0), ("peak", 1)):
            cells = []
            for ranks in (2, 4):
                m = by_ranks.get(ranks, {})
                cells.append(f"{m[name][index] / m[base][index]:.3f}"
                             if name in m and base in m else "-")
            formula = " / ".join(f"{paper[name](w):.3f}" for w in (2, 4))
            print(f"| {label} / {base.replace('_', ' ')}, {kind} | {cells[0]} | {cells[1]} | "
                  f"{formula} |")


def main():
    out = sys.argv[1]
    found = {os.path.basename(p).split(".")[0] for p in glob.glob(f"{out}/*.txt")}
    models = [m for m in ("small", "large", "short") if m in found] + sorted(
        found - {"small", "large", "short"})
    for model in models:
        throughput_ratios(model, throughput_table(out, model))
    for model in (m for m in models if m != "short"):  # the large model's memory once
        by_ranks = {}
        for ranks in (2, 4):
            if glob.glob(f"{out}/{model}.*.{ranks}.*.txt"):
                by_ranks[ranks] = memory_table(out, model, ranks)
        memory_ratios(model, by_ranks)
    print(f"\nraw outputs: {out}")


if __name__ == "__main__":
    main()
