"""PyTorch's own torch.nn.SyncBatchNorm on the batches of sync_batch_norm_cuda_test.cc, compared
with cohort's outputs and input gradients, which that test dumps when COHORT_SYNCBN_DUMP is set.

Runs on a machine with a GPU and PyTorch 2.x: W ranks (processes, gloo with CUDA tensors, one
GPU), each with its slice of the same seeded batch. Prints, for every case, the largest
difference between PyTorch and cohort and between each of them and one process running BatchNorm
on the whole batch; exits 1 when PyTorch and cohort differ by more than the test's tolerance.

    COHORT_SYNCBN_DUMP=/tmp/d ctest -R SyncBatchNormCuda && python3 pytorch_sync_batch_norm.py /tmp/d
"""
import os
import socket
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

CASES = [("4,4", "fp32", 1e-4), ("3,0,5,2", "fp32", 1e-4), ("5,3", "bf16", 3e-2)]


def batch(sizes):
    """The test's batch: seeded on the CPU, the same numbers as libtorch's C++ randn."""
    torch.manual_seed(5)
    total = sum(sizes)
    inputs = (torch.randn(total, 6, 5, 5) * 3 + 1).cuda()
    upstream = torch.randn(total, 6, 5, 5).cuda()
    return inputs, upstream


def reference(inputs, upstream):
    x = inputs.clone().requires_grad_()
    bn = torch.nn.BatchNorm2d(6).cuda()
    out = bn(x)
    (out * upstream).sum().backward()
    return out.detach(), x.grad


def rank_main(rank, sizes, dtype, port, dump, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=len(sizes))
    inputs, upstream = batch(sizes)
    ref_out, ref_grad = reference(inputs, upstream)
    begin, end = sum(sizes[:rank]), sum(sizes[: rank + 1])
    x = inputs[begin:end].to(torch.bfloat16 if dtype == "bf16" else torch.float32)
    x = x.detach().requires_grad_()
    bn = torch.nn.SyncBatchNorm(6).cuda()
    out = bn(x)
    (out.float() * upstream[begin:end]).sum().backward()
    name = f"{','.join(map(str, sizes))}_{dtype}_{rank}"
    cohort_out = np.fromfile(os.path.join(dump, f"out_{name}.bin"), dtype=np.float32)
    cohort_grad = np.fromfile(os.path.join(dump, f"grad_{name}.bin"), dtype=np.float32)
    mine = [out.detach().float().cpu().numpy().ravel(), x.grad.float().cpu().numpy().ravel()]
    refs = [ref_out[begin:end].cpu().numpy().ravel(), ref_grad[begin:end].cpu().numpy().ravel()]

    def gap(a, b):
        return float(np.abs(a - b).max()) if a.size else 0.0

    results.put((rank, [gap(mine[0], cohort_out), gap(mine[1], cohort_grad),
                        gap(mine[0], refs[0]), gap(cohort_out, refs[0]),
                        gap(mine[1], refs[1]), gap(cohort_grad, refs[1])]))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    dump = sys.argv[1]
    ctx = mp.get_context("spawn")
    ok = True
    print("case | rank | out: torch-cohort | grad: torch-cohort | out: torch-ref | out: cohort-ref"
          " | grad: torch-ref | grad: cohort-ref")
    for sizes_text, dtype, tol in CASES:
        sizes = [int(s) for s in sizes_text.split(",")]
        results = ctx.Queue()
        port = free_port()
        procs = [ctx.Process(target=rank_main, args=(r, sizes, dtype, port, dump, results))
                 for r in range(len(sizes))]
        for p in procs:
            p.start()
        rows = sorted(results.get(timeout=300) for _ in procs)
        for p in procs:
            p.join(timeout=60)
        for rank, gaps in rows:
            print(f"{sizes_text} {dtype} | {rank} | " + " | ".join(f"{g:.2e}" for g in gaps))
            ok = ok and gaps[0] <= tol * 4 and gaps[1] <= tol * 4
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
