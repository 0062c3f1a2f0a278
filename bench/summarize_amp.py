#!/usr/bin/env python3
"""Tables of bench/compare_amp.sh's raw outputs: summarize_amp.py WORK_DIR."""
import json
import pathlib
import re
import statistics
import sys


def figures(jsonl, out):
    steps = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    text = out.read_text()
    rss = re.search(r"memory of rank 0: model state ([\d.]+) MiB.*peak RSS ([\d.]+) MiB", text)
    accuracy = re.search(r"final: test accuracy ([\d.]+)%", text)
    validation = re.search(r"final: validation loss ([\d.]+)", text)
    return {
        "step_ms": statistics.median(s["step_ms"] for s in steps[5:]),
        "reduced_mb": statistics.median(s["reduced_bytes"] for s in steps) / 1e6,
        "model_state_mib": float(rss.group(1)) if rss else float("nan"),
        "peak_rss_mib": float(rss.group(2)) if rss else float("nan"),
        "quality": float((accuracy or validation).group(1)) if (accuracy or validation) else float("nan"),
    }


def spread(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main(work):
    runs = {}
    for jsonl in sorted(pathlib.Path(work).glob("*.jsonl")):
        example, setting, _round = jsonl.stem.split(".")
        runs.setdefault((example, setting), []).append(figures(jsonl, jsonl.with_suffix(".out")))
    for example, quality in (("fashion_mnist", "test accuracy %"), ("char_lm", "validation loss")):
        print(f"\n## {example} at 2 ranks (median over rounds, min-max)")
        print(f"| setting | step ms | reduced MB/step | model state MiB | peak RSS MiB | {quality} | n |")
        print("|---|---|---|---|---|---|---|")
        for (ex, setting), rs in sorted(runs.items()):
            if ex != example:
                continue
            row = [spread([r[k] for r in rs]) for k in
                   ("step_ms", "reduced_mb", "model_state_mib", "peak_rss_mib", "quality")]
            print(f"| {setting.strip('_').replace('_', ' ')} | " + " | ".join(row) + f" | {len(rs)} |")


if __name__ == "__main__":
    main(sys.argv[1])
