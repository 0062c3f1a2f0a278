#!/usr/bin/env python3
"""Markdown tables of bench/gpu/run.sh's bench.txt: medians over rounds, and ratios.

  python3 bench/gpu/summarize.py [--all] bench.txt

bench.txt holds cases ("### case=NAME key=KEY system=SYSTEM cmd: ...", their output, "### end
case=NAME rc=RC seconds=S"), appended run after run; by default only the last run (from its last
"# bench/gpu/run.sh" header) is read, --all reads every run.

- Training (STEP lines): per key (model, global batch, world size) and system, the median over
  rounds of ms/step, samples/s, peak GPU memory (torch's allocator, the largest rank) and peak
  RSS (the largest rank). Ratios are of samples/s (> 1: cohort is faster): cohort / plain
  compares with the plain loop of the same model and batch (at world 1), cohort / pytorch with
  every PyTorch system of the same key.
- FSDP (keys with an fsdp system, run.sh's (e)): per system the sharding strategy that ran,
  ms/step, peak GPU memory and its ratio to the DDP of the same implementation (< 1: less memory
  than DDP); then each cohort system against the PyTorch system of the same name (cohort-X /
  pytorch-X, X = ddp, fsdp, fsdp-offload): ms/step and peak GPU memory as cohort / pytorch
  (< 1: cohort is faster, or holds less). These keys are left out of the samples/s ratios.
- Allreduce (nccl-tests rows): per size, each system's median time and busbw, and cohort's busbw
  over each other system's (> 1: cohort is faster), and #wrong (must be 0).
Failed cases (rc != 0) are listed with their last stderr line.
"""
import argparse
import re
import statistics
import sys
from collections import OrderedDict, defaultdict

CASE = re.compile(r"^### case=(\S+) key=(\S+) system=(\S+) cmd: (.*)$")
END = re.compile(r"^### end case=(\S+) rc=(-?\d+) seconds=(\S+)")
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$")


def fields(line):
    return dict(tok.split("=", 1) for tok in line.split()[1:] if "=" in tok)


def last_run(lines, everything):
    if everything:
        return lines
    starts = [i for i, line in enumerate(lines) if line.startswith("# bench/gpu/run.sh")]
    return lines[starts[-1]:] if starts else lines


def parse(lines):
    """[{name, key, system, cmd, rc, steps: [dict], rows: [tuple], stderr: [str]}]"""
    cases, current = [], None
    for line in lines:
        line = line.rstrip("\n")
        m = CASE.match(line)
        if m:
            current = {"name": m.group(1), "key": m.group(2), "system": m.group(3),
                       "cmd": m.group(4), "rc": None, "steps": [], "rows": [], "stderr": []}
            cases.append(current)
            continue
        if current is None:
            continue
        m = END.match(line)
        if m:
            current["rc"] = int(m.group(2))
            current = None
        elif line.startswith("STEP "):
            current["steps"].append(fields(line))
        elif line.startswith("#! "):
            current["stderr"].append(line[3:])
        else:
            m = ROW.match(line)
            if m:
                current["rows"].append((int(m.group(1)), float(m.group(5)), float(m.group(7)),
                                        int(m.group(8))))
    return cases


def max_of(text):
    """The largest of "1.0,2.5"; None for "na" or nothing."""
    try:
        return max(float(x) for x in text.split(","))
    except (AttributeError, ValueError):
        return None


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(a, b):
    return a / b if a and b else None


def training(cases):
    """{key: {system: {ms, sps, gpu, rss, n}}} in order of appearance."""
    runs = OrderedDict()
    for case in cases:
        if not case["steps"]:
            continue
        step = case["steps"][-1]
        runs.setdefault(case["key"], OrderedDict()).setdefault(case["system"], []).append(step)
    table = OrderedDict()
    for key, systems in runs.items():
        table[key] = OrderedDict()
        for system, steps in systems.items():
            table[key][system] = {
                "ms": median([float(s["ms_per_step_med"]) for s in steps]),
                "sps": median([float(s["samples_per_s"]) for s in steps]),
                "gpu": median([max_of(s.get("peak_gpu_mb_ranks")) for s in steps]),
                "rss": median([max_of(s.get("peak_rss_mb_ranks")) for s in steps]),
                "n": len(steps),
                # FSDP's STEP fields (what ran: PyTorch's FSDP1 runs NO_SHARD at world 1)
                "strategy": steps[-1].get("strategy"),
                "offload": steps[-1].get("cpu_offload"),
            }
    return table


def has_fsdp(systems):
    """Whether a key's systems compare FSDP (summarized by print_fsdp, not by samples/s)."""
    return any("fsdp" in system for system in systems)


def plain_key(key):
    """The key of the plain loop of the same model and batch: world 1."""
    return re.sub(r"-w\d+$", "-w1", key)


def print_training(table):
    if not table:
        return
    print("## Training (median over rounds; peak memory of the largest rank)\n")
    print("| case | system | ms/step | samples/s | peak GPU MB | peak RSS MB | runs |")
    print("|---|---|---|---|---|---|---|")
    for key, systems in table.items():
        for system, r in systems.items():
            print(f"| {key} | {system} | {fmt(r['ms'])} | {fmt(r['sps'], 0)} | "
                  f"{fmt(r['gpu'], 1)} | {fmt(r['rss'], 0)} | {r['n']} |")
    print()
    rows = []
    for key, systems in table.items():
        if has_fsdp(systems):
            continue
        plain = table.get(plain_key(key), {}).get("plain")
        for system, r in systems.items():
            if not system.startswith("cohort"):
                continue
            if plain:
                rows.append(f"| {key} | {system} | plain (world 1) | "
                            f"{fmt(ratio(r['sps'], plain['sps']), 3)} |")
            for other, o in systems.items():
                if other.startswith("pytorch"):
                    rows.append(f"| {key} | {system} | {other} | "
                                f"{fmt(ratio(r['sps'], o['sps']), 3)} |")
    print_table("## Ratios of samples/s (> 1: cohort is faster)",
                "| case | cohort | against | ratio |", rows)


def print_table(title, head, rows):
    """A titled markdown table, or nothing without rows."""
    if not rows:
        return
    print(f"{title}\n")
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    print("\n".join(rows))
    print()


def print_fsdp(table):
    keys = [key for key, systems in table.items() if has_fsdp(systems)]
    if not keys:
        return
    print("## FSDP: peak GPU memory and step time (largest rank; medians over rounds)\n")
    print("| case | system | strategy | cpu offload | ms/step | peak GPU MB | GPU / own DDP |")
    print("|---|---|---|---|---|---|---|")
    for key in keys:
        systems = table[key]
        for system, r in systems.items():
            impl = system.split("-", 1)[0]  # cohort, pytorch
            ddp = systems.get(f"{impl}-ddp")
            print(f"| {key} | {system} | {r['strategy'] or '-'} | {r['offload'] or '-'} | "
                  f"{fmt(r['ms'])} | {fmt(r['gpu'], 1)} | "
                  f"{fmt(ratio(r['gpu'], ddp['gpu']) if ddp else None, 3)} |")
    print()
    rows = []
    for key in keys:
        systems = table[key]
        for system, c in systems.items():
            if not system.startswith("cohort-"):
                continue
            name = system[len("cohort-"):]
            p = systems.get("pytorch-" + name)
            if p is None:
                continue
            rows.append(f"| {key} | {name} | {fmt(c['ms'])} | {fmt(p['ms'])} | "
                        f"{fmt(ratio(c['ms'], p['ms']), 3)} | {fmt(c['gpu'], 1)} | "
                        f"{fmt(p['gpu'], 1)} | {fmt(ratio(c['gpu'], p['gpu']), 3)} |")
    print_table("## FSDP: cohort / PyTorch, same system (< 1: cohort is faster, or holds less)",
                "| case | system | ms/step cohort | ms/step pytorch | ms/step ratio | "
                "peak GPU MB cohort | peak GPU MB pytorch | GPU ratio |", rows)


def allreduce(cases):
    """{key: {system: {size: (time_us, busbw, wrong)}}}: medians over rounds, wrong summed."""
    runs = OrderedDict()
    for case in cases:
        if not case["rows"]:
            continue
        per_size = runs.setdefault(case["key"], OrderedDict()).setdefault(case["system"],
                                                                           defaultdict(list))
        for size, time_us, busbw, wrong in case["rows"]:
            per_size[size].append((time_us, busbw, wrong))
    table = OrderedDict()
    for key, systems in runs.items():
        table[key] = OrderedDict()
        for system, per_size in systems.items():
            table[key][system] = {
                size: (median([r[0] for r in rows]), median([r[1] for r in rows]),
                       sum(r[2] for r in rows))
                for size, rows in per_size.items()}
    return table


def size_name(size):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def print_allreduce(table):
    for key, systems in table.items():
        names = list(systems)
        cohort = [s for s in names if s.startswith("cohort")]
        others = [s for s in names if not s.startswith("cohort")]
        print(f"## Allreduce {key} (float32 sum; median time over iterations and rounds)\n")
        head = "| size |"
        for s in names:
            head += f" {s} us | {s} busbw GB/s | {s} #wrong |"
        for c in cohort:
            for o in others:
                head += f" {c} / {o} busbw |"
        print(head)
        print("|---" * (head.count("|") - 1) + "|")
        sizes = sorted({size for s in names for size in systems[s]})
        for size in sizes:
            line = f"| {size_name(size)} |"
            for s in names:
                t, bw, wrong = systems[s].get(size, (None, None, None))
                line += f" {fmt(t, 1)} | {fmt(bw, 3)} | {'-' if wrong is None else wrong} |"
            for c in cohort:
                for o in others:
                    a = systems[c].get(size, (None, None))[1]
                    b = systems[o].get(size, (None, None))[1]
                    line += f" {fmt(ratio(a, b), 2)} |"
            print(line)
        print()


def print_failures(cases):
    failed = [c for c in cases if c["rc"] != 0]
    if not failed:
        return
    print("## Failed cases\n")
    for c in failed:
        why = c["stderr"][-1] if c["stderr"] else ("no end line" if c["rc"] is None else "")
        print(f"- {c['name']}: rc={c['rc']} {why}  \n  `{c['cmd']}`")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench_txt")
    ap.add_argument("--all", action="store_true", help="every run in the file, not the last")
    a = ap.parse_args()
    with open(a.bench_txt, errors="replace") as f:
        lines = last_run(f.readlines(), a.all)
    for line in lines:  # run.sh's header: when, where, what
        if line.startswith(("# bench/gpu/run.sh", "# gpu:", "# torch:", "# cpus:")):
            print(line.rstrip() + "  ")
    print()
    cases = parse(lines)
    table = training(cases)
    print_training(table)
    print_fsdp(table)
    print_allreduce(allreduce(cases))
    print_failures(cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
