#!/usr/bin/env python3
"""The table of bench/chaos.sh, from what it recorded in its work directory.

For each run (<mode>-fault-free, <mode>-chaos): <run>.node<N> (every line a node's cohortrun
printed, stamped with the time it arrived), <run>.kills ("<time> rank <pid>" or "<time> node
<n>"), <run>.window ("<start> <end>") and, under --elastic, <run>.samples/ (each rank's
--sample-log: "<step> <epoch> <generation> <rank> <world> <index>..." per committed step).

  goodput    committed samples per second from the first step to the window's end, over the
             fault-free run's of the same mode
  kill->step from a kill to the first step line after the job's first change that followed it
             (a new generation, or every rank restarted): the job training again without the
             victim, by this script's clock
  lost       samples of complete epochs no committed step trained, and samples of steps no
             rank logged; twice: samples trained by more than one committed step of an epoch;
             unlogged: samples of committed steps whose line a rank did not write (killed
             between its commit and its log line), counted apart from lost
"""
import argparse
import collections
import glob
import os
import re
import statistics
import sys

ELASTIC_STEP = re.compile(r"^(\S+) \[slot \d+\] step (\d+) loss ")
PLAIN_STEP = re.compile(r"^(\S+) \[\d+\] epoch (\d+)/\d+ step (\d+)/(\d+) ")
ELASTIC_CHANGE = re.compile(r"^(\S+) \[slot \d+\] membership: generation (\d+)")
PLAIN_CHANGE = re.compile(r"^(\S+) cohortrun: restarting every rank")


def read_lines(work, run):
    lines = []
    for path in glob.glob(os.path.join(work, run + ".node*")):
        with open(path, errors="replace") as f:
            lines.extend(line.rstrip("\n") for line in f)
    lines.sort(key=lambda line: float(line.split(" ", 1)[0]) if line[:1].isdigit() else 0.0)
    return lines


def steps_and_changes(lines, elastic):
    steps, changes = [], []  # (time, global step), times
    for line in lines:
        if elastic:
            m = ELASTIC_STEP.match(line)
            if m:
                steps.append((float(m.group(1)), int(m.group(2))))
            m = ELASTIC_CHANGE.match(line)
            if m and int(m.group(2)) > 1:
                changes.append(float(m.group(1)))
        else:
            m = PLAIN_STEP.match(line)
            if m:
                per_epoch = int(m.group(4))
                steps.append((float(m.group(1)), (int(m.group(2)) - 1) * per_epoch + int(m.group(3))))
            m = PLAIN_CHANGE.match(line)
            if m:
                changes.append(float(m.group(1)))
    return steps, changes


def read_kills(work, run):
    path = os.path.join(work, run + ".kills")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [float(line.split()[0]) for line in f if line.strip()]


def kill_to_step(kills, steps, changes, end):
    """Seconds from each kill to the first step after the first change after it (None: none)."""
    out = []
    for k in kills:
        change = next((c for c in changes if c > k), None)
        step = None if change is None else next((t for t, _ in steps if t > change), None)
        out.append(step - k if step is not None and step <= end else None)
    return out


def percentile(values, q):
    values = sorted(values)
    if not values:
        return float("nan")
    i = min(len(values) - 1, max(0, int(round(q / 100.0 * len(values) + 0.5)) - 1))
    return values[i]


def sample_counts(directory, dataset_size, batch):
    """lost, twice, unlogged samples, and committed steps with no line, from the sample logs."""
    entries = collections.defaultdict(dict)  # step -> (generation, rank) -> (epoch, world, idx)
    for path in glob.glob(os.path.join(directory, "samples.*.log")):
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) < 5:
                    continue
                step, epoch, generation, rank, world = map(int, fields[:5])
                entries[step][(generation, rank)] = (epoch, world, list(map(int, fields[5:])))
    if not entries:
        return None
    seen = collections.defaultdict(collections.Counter)  # epoch -> index -> times
    unlogged = collections.Counter()  # epoch -> samples
    for step, by_member in entries.items():
        generations = {g for g, _ in by_member}
        for generation in generations:  # a step committed by two generations trained twice
            members = {r: v for (g, r), v in by_member.items() if g == generation}
            epoch, world = next(iter(members.values()))[:2]
            logged = 0
            for _, _, indices in members.values():
                seen[epoch].update(indices)
                logged += len(indices)
            if len(members) < world:
                unlogged[epoch] += max(0, batch - logged)
    epoch_of = {step: next(iter(m.values()))[0] for step, m in entries.items()}
    missing_steps = [s for s in range(max(entries) + 1) if s not in entries]
    last_epoch = max(seen)
    twice = sum(c - 1 for counter in seen.values() for c in counter.values() if c > 1)
    lost = 0
    for epoch in range(last_epoch):  # complete epochs: every sample once
        lost += max(0, dataset_size - len(seen[epoch]) - unlogged[epoch])
    for step in missing_steps:  # in the open epoch, whose coverage cannot tell
        before = max(s for s in entries if s < step) if step > min(entries) else None
        if before is None or epoch_of[before] == last_epoch:
            lost += batch
    return {"lost": lost, "twice": twice, "unlogged": sum(unlogged.values()),
            "missing_steps": len(missing_steps), "steps": len(entries)}


def summarize(work, run, batch, dataset_size):
    elastic = run.startswith("elastic")
    with open(os.path.join(work, run + ".window")) as f:
        start, end = map(float, f.read().split())
    steps, changes = steps_and_changes(read_lines(work, run), elastic)
    steps = [(t, s) for t, s in steps if t <= end]
    r = {"run": run, "window": end - start, "kills": read_kills(work, run)}
    if not steps:
        r.update(progress=0, rate=0.0, step_s=float("nan"), latencies=[], lines=0)
        return r
    first = steps[0][0]
    r["progress"] = steps[-1][1]  # where the job stands at the end (a restart goes back)
    r["lines"] = len(steps)
    r["rate"] = r["progress"] * batch / max(1e-9, end - first)
    gaps = [b[0] - a[0] for a, b in zip(steps, steps[1:]) if b[1] == a[1] + 1]
    r["step_s"] = statistics.median(gaps) if gaps else float("nan")
    r["latencies"] = kill_to_step(r["kills"], steps, changes, end)
    r["after_last_kill"] = bool(r["kills"]) and steps[-1][0] > max(r["kills"])
    r["samples"] = sample_counts(os.path.join(work, run + ".samples"), dataset_size, batch) \
        if elastic else None
    return r


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("work")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--dataset-size", type=int, default=60000)
    parser.add_argument("--modes", nargs="+", default=["elastic", "restart"])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless the elastic chaos run lost and doubled no sample "
                             "and trained after its last kill")
    args = parser.parse_args()
    print("%-18s %7s %7s %10s %8s %6s %9s %8s %8s %7s %5s %6s %8s" % (
        "run", "window", "steps", "samples/s", "goodput", "kills", "recovered", "p50_s",
        "p99_s", "step_s", "lost", "twice", "unlogged"))
    failures = []
    for mode in args.modes:
        free = summarize(args.work, mode + "-fault-free", args.batch, args.dataset_size)
        chaos = summarize(args.work, mode + "-chaos", args.batch, args.dataset_size)
        for r in (free, chaos):
            lat = [x for x in r["latencies"] if x is not None]
            s = r.get("samples") or {}
            goodput = r["rate"] / free["rate"] if free["rate"] > 0 else float("nan")
            print("%-18s %7.1f %7d %10.0f %8.3f %6d %9s %8.3f %8.3f %7.4f %5s %6s %8s" % (
                r["run"], r["window"], r["progress"], r["rate"], goodput, len(r["kills"]),
                "%d/%d" % (len(lat), len(r["latencies"])), percentile(lat, 50),
                percentile(lat, 99), r["step_s"], s.get("lost", "-"), s.get("twice", "-"),
                s.get("unlogged", "-")))
            if mode == "restart" and r is chaos:
                print("%-18s %d steps trained and lost to restarts" % (
                    "", r["lines"] - r["progress"]))
        if mode == "elastic" and args.check:
            s = chaos.get("samples")
            if not chaos["kills"]:
                failures.append("no kill happened")
            if not s:
                failures.append("no sample log")
            elif s["lost"] or s["twice"]:
                failures.append("samples lost %d, trained twice %d" % (s["lost"], s["twice"]))
            if not chaos.get("after_last_kill"):
                failures.append("no step committed after the last kill")
    for failure in failures:
        print("CHECK FAILED: " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
