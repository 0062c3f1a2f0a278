#!/usr/bin/env python3
"""What a checkpoint costs training: synchronous against background saves in the char_lm example
(docs/checkpoints.md, "Asynchronous saves").

Runs char_lm at --nproc ranks (default 2, one thread each) for --steps steps with a checkpoint every --every steps (and one at the
end), four ways, interleaved --repeats times: no checkpoint, --sync-checkpoint, the default
background save (staged into the checkpointer's memory), and the background save without
staging (COHORT_CHECKPOINT_STAGING_MIB=0: streamed from the live tensors). For each it reads the example's own figures (the "checkpoints:" line: the time
training spent in the save calls, and, in the background, how long before_update() waited) and
the per-step metrics, and prints the medians over the repeats of:
  - the stall per save: the save calls' time, plus how much longer than the median step the
    step after each periodic save took (it runs while a background save is written, and its
    update waits in before_update() until the save no longer reads the parameters);
  - what training waited for in the checkpointer's calls per save (save() and before_update():
    the issue's "time training waits because of a save", without the slower steps beside the
    writer);
  - the time a background save took to be on disk;
  - rank 0's peak RSS (the example's memory line), against the run without checkpoints.

Usage: bench/async_checkpoint.py [--build build] [--steps 13] [--every 4] [--repeats 3]
                                 [--model "--layers 8 --width 512 --heads 8"]
                                 [--strategy ddp] [--nproc 2] [--dir DIRECTORY]
--dir: where the checkpoints go (default: a temporary directory under /tmp); pick the disk
whose speed you want to measure.
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile


def run(args, mode, directory):
    metrics = os.path.join(directory, f"steps-{mode}.jsonl")
    command = [f"{args.build}/bin/cohortrun", "--nproc-per-node", str(args.nproc),
               f"{args.build}/bin/char_lm",
               "--max-steps", str(args.steps), "--skip-eval", "--sample", "0", "--no-progress",
               "--strategy", args.strategy, "--metrics", metrics, *shlex.split(args.model)]
    if mode == "none":
        command += ["--checkpoint", ""]
    else:
        command += ["--overwrite-checkpoint", "--checkpoint", os.path.join(directory, f"ck-{mode}"),
                    "--checkpoint-every", str(args.every)]
    if mode == "sync":
        command.append("--sync-checkpoint")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if mode == "unstaged":
        env["COHORT_CHECKPOINT_STAGING_MIB"] = "0"
    out = subprocess.run(command, capture_output=True, text=True, timeout=7200, env=env)
    if out.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{out.stdout}{out.stderr}")
    steps = {}
    for line in open(metrics):
        record = json.loads(line)
        steps[record["step"]] = record["step_ms"] + record["data_ms"]
    rss = float(re.search(r"memory of rank 0: .*peak RSS ([\d.]+) MiB", out.stdout).group(1))
    result = {"rss": rss, "save_ms": 0.0, "waited_ms": 0.0, "written_ms": float("nan"),
              "saves": 0, "extra_step_ms": 0.0}
    line = re.search(r"checkpoints: (\d+) written (.*)", out.stdout)
    if line:
        result["saves"] = int(line.group(1))
        result["save_ms"] = float(re.search(r"spent ([\d.]+) ms in the save calls",
                                            line.group(2)).group(1))
        waited = re.search(r"waited ([\d.]+) ms before its updates", line.group(2))
        written = re.search(r"in ([\d.]+) ms each", line.group(2))
        if waited:
            result["waited_ms"] = float(waited.group(1))
            result["written_ms"] = float(written.group(1))
    # The step after each periodic save, against the median of the others (the first step,
    # which warms up, left out).
    after = {s + 1 for s in range(args.every, args.steps, args.every)}
    others = [ms for s, ms in steps.items() if s not in after and s > 1]
    median = statistics.median(others)
    result["extra_step_ms"] = sum(steps[s] - median for s in after if s in steps)
    result["median_step_ms"] = median
    result["periodic_saves"] = len(after)
    return result


def waited_per_save(r):
    """What training waited for in the checkpointer's calls: save() and before_update()."""
    if r["saves"] == 0:
        return 0.0
    return (r["save_ms"] + r["waited_ms"]) / r["saves"]


def stall_per_save(r):
    if r["saves"] == 0:
        return 0.0
    return r["save_ms"] / r["saves"] + r["extra_step_ms"] / r["periodic_saves"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--steps", type=int, default=13)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="--layers 8 --width 512 --heads 8")
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--nproc", type=int, default=2, help="ranks (each with one thread)")
    parser.add_argument("--dir")
    args = parser.parse_args()
    runs = {"none": [], "sync": [], "background": [], "unstaged": []}
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        for repeat in range(args.repeats):
            for mode in runs:
                runs[mode].append(run(args, mode, directory))
                r = runs[mode][-1]
                print(f"  repeat {repeat + 1} {mode:10s}: stall/save {stall_per_save(r):8.1f} ms, "
                      f"median step {r['median_step_ms']:7.1f} ms, written {r['written_ms']:7.1f} "
                      f"ms, peak RSS {r['rss']:7.1f} MiB", flush=True)
            size = os.path.getsize(os.path.join(directory, "ck-sync")) if args.strategy == "ddp" \
                else sum(e.stat().st_size for e in os.scandir(os.path.join(directory, "ck-sync")))
    med = lambda mode, f: statistics.median(f(r) for r in runs[mode])
    sync_stall = med("sync", stall_per_save)
    background_stall = med("background", stall_per_save)
    print(f"char_lm {args.model} --strategy {args.strategy}, {args.nproc} rank(s), {args.steps} steps, a "
          f"checkpoint every {args.every} ({size / 2**20:.0f} MiB); medians of {args.repeats}")
    print(f"{'':12s} {'stall/save ms':>14s} {'of which in save()':>19s} {'waited/save ms':>15s} "
          f"{'written ms':>11s} {'peak RSS MiB':>13s}")
    for mode in runs:
        in_save = med(mode, lambda r: r["save_ms"] / r["saves"] if r["saves"] else 0.0)
        print(f"{mode:12s} {med(mode, stall_per_save):14.1f} {in_save:19.1f} "
              f"{med(mode, waited_per_save):15.1f} "
              f"{med(mode, lambda r: r['written_ms']):11.1f} {med(mode, lambda r: r['rss']):13.1f}")
    print(f"background stall / synchronous stall: {background_stall / sync_stall:.3f} "
          f"(unstaged: {med('unstaged', stall_per_save) / sync_stall:.3f})")
    print(f"training waited in the save calls, background / synchronous: "
          f"{med('background', waited_per_save) / med('sync', waited_per_save):.3f} "
          f"(unstaged: {med('unstaged', waited_per_save) / med('sync', waited_per_save):.3f})")
    print(f"median step with background saves / without checkpoints: "
          f"{med('background', lambda r: r['median_step_ms']) / med('none', lambda r: r['median_step_ms']):.3f}")


if __name__ == "__main__":
    main()
