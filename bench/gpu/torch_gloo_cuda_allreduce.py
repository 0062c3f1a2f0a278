#!/usr/bin/env python3
"""torch.distributed's allreduce of CUDA tensors (gloo by default: it copies them through host
memory, as cohort's staged group does), float32 sum: the peer of cohort-staged-bench
(bench/gpu/staged_allreduce.cc), with the same sizes, timing, check and lines.

  torchrun --standalone --nproc_per_node 2 bench/gpu/torch_gloo_cuda_allreduce.py

Ranks come from torchrun's environment; each uses cuda:<LOCAL_RANK mod device count>, so 2 ranks
on a machine with one GPU share it. Rank 0 prints cohort-bench's columns (docs/bench.md):
size(B), count, type, redop, time(us), algbw(GB/s), busbw(GB/s) = algbw x 2(n-1)/n, #wrong.

Each size: --warmup, then --iters allreduces, each timed alone: the input restored (untimed),
a barrier, then dist.all_reduce and torch.cuda.synchronize (gloo's copy back to the device is
queued on the stream); an iteration's time is its slowest rank's, the size's the median of those.
The last timed allreduce's result is checked against closed-form values (cohort-bench's: small
integers repeating with period 251), and the wrong elements of all ranks are counted; any makes
the exit code 1.
"""
import argparse
import os
import re
import statistics
import sys
import time

import torch
import torch.distributed as dist

PERIOD = 251


def parse_bytes(text):
    """'4K', '256M', '1G' (binary), 'KiB'/'KB' too, or a plain number of bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([kmg]?)(i?b)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def sizes(a):
    size = a.min_bytes
    while size <= a.max_bytes:
        yield size
        size *= a.factor


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def base_values(count, device):
    """index mod 251 + 1, as float32: rank r holds (r + 1) times it."""
    return (torch.arange(count, dtype=torch.int32, device=device) % PERIOD + 1).float()


def timed_allreduce(data, source, device):
    data.copy_(source)
    synchronize(device)
    dist.barrier()
    t0 = time.perf_counter()
    dist.all_reduce(data, op=dist.ReduceOp.SUM)
    synchronize(device)
    return time.perf_counter() - t0


def collective_device(a, device):
    """Where the bookkeeping tensors (times, counts) live: NCCL takes only device tensors."""
    return device if a.backend == "nccl" else torch.device("cpu")


def measure(a, nbytes, rank, world, device):
    count = nbytes // 4
    base = base_values(count, device)
    source = base * float(rank + 1)
    data = torch.empty_like(source)
    seconds = []
    for i in range(a.warmup + a.iters):
        t = timed_allreduce(data, source, device)
        if i >= a.warmup:
            seconds.append(t)
    where = collective_device(a, device)
    slowest = torch.tensor(seconds, dtype=torch.float64, device=where)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    expected = base * float(world * (world + 1) // 2)
    wrong = torch.tensor([int((data != expected).sum().item())], dtype=torch.int64, device=where)
    dist.all_reduce(wrong)
    return count * 4, count, statistics.median(slowest.tolist()) * 1e6, int(wrong.item())


def busbw_factor(world):
    return 2.0 * (world - 1) / world


def print_header(a, world, device):
    print(f"# torch-{a.backend}-cuda-allreduce allreduce  ranks {world}  device {device}  "
          f"dtype float32  op sum  iters {a.iters}  warmup {a.warmup}  torch {torch.__version__}")
    print("# time: per op, median over iters of the slowest rank (each op alone: input restored, "
          f"barrier, allreduce, device synchronized); busbw factor {busbw_factor(world):.4g}\n#")
    print(f"# {'size(B)':>13} {'count':>12} {'type':>9} {'redop':>7} {'time(us)':>12} "
          f"{'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'#wrong':>8}", flush=True)


def print_row(row, world):
    nbytes, count, time_us, wrong = row
    algbw = nbytes / (time_us * 1e-6) / 1e9
    print(f"  {nbytes:>13} {count:>12} {'float32':>9} {'sum':>7} {time_us:>12.2f} "
          f"{algbw:>12.3f} {algbw * busbw_factor(world):>12.3f} {wrong:>8}", flush=True)


def print_footer(rows, world):
    wrong = sum(r[3] for r in rows)
    busbw = [r[0] / (r[2] * 1e-6) / 1e9 * busbw_factor(world) for r in rows]
    print(f"#\n# #wrong total: {wrong} ({'FAILED' if wrong else 'OK'})")
    print(f"# avg busbw: {statistics.mean(busbw):.3f} GB/s (mean over {len(rows)} sizes)",
          flush=True)


def select_device(a, local_rank):
    if a.device == "cpu":  # for checking this script where there is no GPU
        return torch.device("cpu")
    if not torch.cuda.is_available():
        sys.exit("torch_gloo_cuda_allreduce.py: error: this torch sees no CUDA device")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def run(a):
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    device = select_device(a, int(os.environ.get("LOCAL_RANK", 0)))
    torch.set_num_threads(1)
    dist.init_process_group(a.backend)  # env:// from torchrun
    if rank == 0:
        print_header(a, world, device)
    rows = []
    for nbytes in sizes(a):
        rows.append(measure(a, nbytes, rank, world, device))
        if rank == 0:
            print_row(rows[-1], world)
    if rank == 0:
        print_footer(rows, world)
    dist.barrier()
    dist.destroy_process_group()
    return 1 if any(r[3] for r in rows) else 0


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-b", "--min-bytes", type=parse_bytes, default=4 << 10)
    ap.add_argument("-e", "--max-bytes", type=parse_bytes, default=256 << 20)
    ap.add_argument("-f", "--factor", type=int, default=4, help="each size is the last times this")
    ap.add_argument("-n", "--iters", type=int, default=20, help="timed allreduces per size")
    ap.add_argument("-w", "--warmup", type=int, default=5, help="untimed allreduces before them")
    ap.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: only to check this script on a machine without a GPU")
    a = ap.parse_args(argv)
    if not (4 <= a.min_bytes <= a.max_bytes) or a.factor < 2 or a.iters < 1 or a.warmup < 0:
        ap.error("need 4 <= --min-bytes <= --max-bytes, --factor >= 2, --iters >= 1, --warmup >= 0")
    return a


if __name__ == "__main__":
    sys.exit(run(parse_args()))
