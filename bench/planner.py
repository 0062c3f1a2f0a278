#!/usr/bin/env python3
"""How right the planner is (docs/planner.md, "Measured"): predicted against measured step time
and peak memory for every strategy, and the planner's own pick against the best of them.

For each example (fashion_mnist's CNN, char_lm's default model) and each rank count, runs the
example once per strategy with --plan-out (which makes it plan the configuration given, print
the prediction and, at COHORT_LOG_LEVEL=info, log the epoch's measured median step against it,
before and after the online correction), then once with --strategy auto --bucket-cap-mb auto.
Measured peak memory is the most tensor memory rank 0 held during the first epoch's steps
beyond what it held before the model was made (the data sets); predicted is the plan's peak.
Rounds are interleaved, each running the configurations in its own shuffled order (a machine that
slows down or speeds up for a minute then does not favour the rows that run at the same place
in every round); medians are printed, with each row's spread (the slowest round's measured step
over the fastest's, minus one), which says how far apart two rows must be to differ.

With --net RATE the ranks run on 2 simulated hosts of scripts/netns-cluster (root only) whose
links are limited to RATE, --ranks-per-host each; the cluster is calibrated first
(cohort-bench --calibrate over it, one rank per host), and every run reads that calibration
(COHORT_COST_MODEL).

The gain (docs/planner.md, "Measured"): with --ddp-buckets CAPS the example also runs under ddp
at each of those bucket sizes (bench/bucket_sweep's), and the summary puts auto against the
defaults (ddp, 25 MiB buckets) and the best of those hand-picked sizes. --memory-budget-mb M
gives auto a budget (the fixed configurations run as they are: their predicted peak says whether
they would have fit).

--also "STRATEGY FLAGS..." runs further configurations given by hand, e.g. "full_shard
--fsdp-no-prefetch" or "full_shard --fsdp-min-unit-params 0" (the FSDP units and prefetch the
planner also chooses among), or "ddp --comm-hook powersgd" (PowerSGD given by hand: the run
plans and logs it as it runs). --auto-args "FLAGS..." gives auto further options, e.g.
"--allow-powersgd" (PowerSGD a candidate; write --auto-args=--allow-powersgd, as argparse
takes a value that starts with a dash only after "=").

Usage: bench/planner.py [--build build] [--ranks 2 4] [--steps 40] [--rounds 3]
                        [--examples fashion_mnist char_lm] [--net RATE --ranks-per-host K]
                        [--ddp-buckets 1 4 8] [--memory-budget-mb M] [--strategies ddp ...]
                        [--also "full_shard --fsdp-no-prefetch" ...] [--auto-args "FLAGS..."]
"""
import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

STRATEGIES = ["ddp", "zero1", "zero2", "full_shard", "shard_grad_op"]
EXAMPLE_ARGS = {
    "fashion_mnist": ["--model", "cnn"],
    "char_lm": ["--sample", "0"],
}


def launcher(build, ranks, cluster, ranks_per_host):
    if cluster is None:
        return [f"{build}/bin/cohortrun", "--nproc-per-node", str(ranks)]
    return ["scripts/netns-cluster", "run", "--cluster", cluster, "--ranks-per-host",
            str(ranks_per_host), "--timeout", "1800", "--"]


def calibrate(build, cluster, path):
    """The cost model of the cluster's links, written to `path`."""
    out = subprocess.run(["scripts/netns-cluster", "run", "--cluster", cluster, "--ranks-per-host",
                          "1", "--timeout", "900", "--", f"{build}/bin/cohort-bench",
                          "--calibrate", path], capture_output=True, text=True, timeout=1000)
    if out.returncode != 0:
        sys.exit(f"calibration failed:\n{out.stdout}{out.stderr}")
    print("".join(line + "\n" for line in out.stdout.splitlines() if line.startswith("#")), end="")


def configuration_args(configuration, budget_mb, auto_args, tmp):
    """"auto", a strategy, "ddp@CAP" (ddp at that bucket size) or "STRATEGY FLAGS..." as the
    example's options."""
    if configuration == "auto":
        budget = ["--memory-budget-mb", str(budget_mb)] if budget_mb else []
        return ["--strategy", "auto", "--bucket-cap-mb", "auto", *budget, *auto_args.split()]
    strategy, *flags = configuration.split()
    strategy, _, cap = strategy.partition("@")
    buckets = ["--bucket-cap-mb", cap] if cap else []
    return ["--strategy", strategy, *buckets, *flags, "--plan-out", f"{tmp}/job.json"]


def run(build, example, ranks, configuration, steps, cluster, ranks_per_host, budget_mb,
        auto_args):
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)
        extra = configuration_args(configuration, budget_mb, auto_args, tmp)
        threads = [] if cluster is None else ["--threads", "1"]
        command = [*launcher(build, ranks, cluster, ranks_per_host), f"{build}/bin/{example}",
                   "--max-steps", str(steps), "--skip-eval", "--no-progress", "--checkpoint", "",
                   *threads, *EXAMPLE_ARGS[example], *extra]
        out = subprocess.run(command, capture_output=True, text=True, timeout=1800,
                             env={**os.environ, "OMP_NUM_THREADS": "1",
                                  "COHORT_LOG_LEVEL": "info"})
    text = out.stdout + out.stderr
    if out.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{text}")
    plan = re.search(r"(?:\[0\] )?plan: (.*?) \(predicted step ([\d.]+) ms.*?peak ([\d.]+) MiB", text)
    accuracy = re.search(r"plan: epoch 1: measured (?:median|mean) step ([\d.]+) ms against ([\d.]+) ms "
                         r"predicted.*?before the online correction ([\d.]+) ms.*?peak memory "
                         r"([\d.]+) MiB", text)
    if not (plan and accuracy):
        sys.exit(f"{' '.join(command)}: no plan, accuracy or memory line:\n{text}")
    return {"config": plan.group(1), "measured": float(accuracy.group(1)),
            "corrected": float(accuracy.group(2)), "predicted": float(accuracy.group(3)),
            "peak_predicted": float(plan.group(3)), "peak_measured": float(accuracy.group(4))}


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def spread(runs):
    measured = [r["measured"] for r in runs]
    return max(measured) / min(measured) - 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--ranks", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--examples", nargs="+", default=["fashion_mnist", "char_lm"])
    parser.add_argument("--net", help="a link rate in tc units: run on a netns cluster of 2 hosts")
    parser.add_argument("--ranks-per-host", type=int, default=2)
    parser.add_argument("--ddp-buckets", nargs="*", default=[],
                        help="also run ddp at these bucket sizes (MiB): the hand-picked best")
    parser.add_argument("--memory-budget-mb", type=int, default=0, help="auto's budget")
    parser.add_argument("--strategies", nargs="+", default=STRATEGIES)
    parser.add_argument("--also", nargs="*", default=[],
                        help='further configurations: "STRATEGY FLAGS...", one argument each')
    parser.add_argument("--auto-args", default="",
                        help='further options of the auto run, e.g. "--allow-powersgd"')
    args = parser.parse_args()
    strategies = list(args.strategies)
    cluster = None
    calibration = tempfile.TemporaryDirectory()
    if args.net:
        cluster = f"cohort-planner-{os.getpid()}"
        subprocess.run(["scripts/netns-cluster", "up", "--hosts", "2", "--name", cluster,
                        "--rate", args.net], check=True, stdout=subprocess.DEVNULL)
        args.ranks = [2 * args.ranks_per_host]
        if args.ranks_per_host > 1 and args.strategies == STRATEGIES:
            strategies.append("hybrid_shard")
        os.chmod(calibration.name, 0o777)
        calibrate(args.build, cluster, f"{calibration.name}/cost_model.json")
        os.environ["COHORT_COST_MODEL"] = f"{calibration.name}/cost_model.json"  # after: a
        # named file that is not there yet is an error
    try:
        for example in args.examples:
            for ranks in args.ranks:
                swept = [f"ddp@{cap}" for cap in args.ddp_buckets]
                runs = {s: [] for s in strategies + swept + args.also + ["auto"]}
                for round_index in range(args.rounds):
                    order = list(runs)
                    random.Random(round_index).shuffle(order)
                    for s in order:
                        runs[s].append(run(args.build, example, ranks, s, args.steps, cluster,
                                           args.ranks_per_host, args.memory_budget_mb,
                                           args.auto_args))
                where = (f"2 hosts x {args.ranks_per_host} at {args.net}" if cluster
                         else f"{ranks} ranks, one host")
                print(f"\n{example}, {where}, {args.steps} steps, medians of {args.rounds}")
                print(f"{'configuration':42s} {'predicted':>9s} {'corrected':>9s} "
                      f"{'measured':>9s} {'error':>7s} {'MiB pred.':>9s} {'MiB meas.':>9s} "
                      f"{'error':>7s} {'spread':>7s}")
                for s, rs in runs.items():
                    measured, predicted = median_of(rs, "measured"), median_of(rs, "predicted")
                    peak_p, peak_m = median_of(rs, "peak_predicted"), median_of(rs, "peak_measured")
                    name = rs[0]["config"] + (" (auto)" if s == "auto" else "")
                    print(f"{name:42s} {predicted:9.1f} {median_of(rs, 'corrected'):9.1f} "
                          f"{measured:9.1f} {(predicted / measured - 1) * 100:+6.1f}% "
                          f"{peak_p:9.1f} {peak_m:9.1f} {(peak_p / peak_m - 1) * 100:+6.1f}% "
                          f"{spread(rs) * 100:6.1f}%", flush=True)
                def against(label, configuration):
                    other = median_of(runs[configuration], "measured")
                    return (f"{label}, {runs[configuration][0]['config']}: {other:.1f} ms "
                            f"({(auto / other - 1) * 100:+.1f}%)")
                best = min(strategies + swept + args.also,
                           key=lambda s: median_of(runs[s], "measured"))
                auto = median_of(runs["auto"], "measured")
                picks = sorted({r["config"] for r in runs["auto"]})  # each round probes anew
                print(f"auto picked {' / '.join(picks)}: {auto:.1f} ms; "
                      + against("the best tried", best))
                same = ([s for s in strategies + swept + args.also
                         if runs[s][0]["config"] == picks[0]] if len(picks) == 1 else [])
                if same:
                    print("  against " + against("the same configuration as its own row", same[0]))
                if "ddp" in runs:
                    print("  against " + against("the defaults", "ddp"))
                if swept:
                    hand = min(swept + ["ddp"], key=lambda s: median_of(runs[s], "measured"))
                    print("  against " + against("the best hand-picked ddp bucket", hand))
    finally:
        if cluster:
            subprocess.run(["scripts/netns-cluster", "down", "--name", cluster],
                           stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
