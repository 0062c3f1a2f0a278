#!/usr/bin/env python3
"""PyTorch's own DistributedDataParallel on CUDA: the twin of `cohort-ddp-bench --device cuda`
(bench/ddp_bench/ddp_bench.cc), with the same models, data, loop, options and STEP line, so that
bench/gpu/run.sh compares them line for line (bench/gpu/summarize.py reads both).

  torchrun --standalone --nproc_per_node 1 bench/gpu/torch_ddp_cuda.py --backend nccl
  torchrun --standalone --nproc_per_node 2 bench/gpu/torch_ddp_cuda.py --backend gloo  # one GPU

Ranks come from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK; none: one process). Each
rank runs on cuda:<LOCAL_RANK mod device count>, so 2 ranks on a machine with one GPU share it
(gloo takes that; NCCL refuses two ranks on one GPU).

What is the same as cohort-ddp-bench:
- models: the CNN and MLP of shared/peers/fmnist.py (models/fmnist_models.h), and char_lm's GPT
  (models/gpt.h; its PyTorch twin is bench/zero_peer.py's Gpt, imported from there);
- data: synthetic Fashion-MNIST (normal pixels, uniform labels, 60000 samples) kept on the device,
  sampled as ddp_train.py does (a seeded permutation per epoch, copied to the device once per
  epoch, cut into global batches, rank r taking slice r); the GPT cycles 4 batches of uniform
  byte tokens. Step time does not depend on the values;
- the loop: zero_grad(set_to_none), forward, loss, backward, [GPT: clip_grad_norm_ 1.0], step.
  SGD(0.01, momentum 0.9) with nll_loss; AdamW(1e-3, betas 0.9/0.95, weight decay 0.1) with
  next-token cross-entropy;
- timing: --warmup steps, then --windows windows of --steps steps, the device synchronized
  before the clock is read at each window's end; the median window is reported, and the peak GPU
  memory (torch.cuda.max_memory_allocated, reset after the warm-up) beside the peak RSS.

By default the optimizer and clipping run as libtorch's do (--optim loop): one parameter at a
time (foreach=False), and the GPT's gradient norm read on the host (libtorch's clip_grad_norm_
returns a double, which waits for the device): the two programs then do the same work and differ
only in DDP. --optim foreach runs them as PyTorch does by default (multi-tensor kernels, no
host read): what a PyTorch user gets, and a larger gap that is not DDP's.

--mode fsdp (the twin of cohort-ddp-bench --mode fsdp) wraps the model in
torch.distributed.fsdp.FullyShardedDataParallel (FSDP1): FULL_SHARD, one unit per GPT block
(ModuleWrapPolicy on the block class; the embeddings, final norm and head in the root unit, as
cohort's default units), use_orig_params=False, PyTorch's other defaults; --cpu-offload adds
CPUOffload(offload_params=True) (parameters, gradients and the optimizer's state on the host,
AdamW stepping on the CPU: give --threads). The optimizer steps FSDP's flat parameters and the
GPT is clipped by FSDP's own clip_grad_norm_. The STEP line adds strategy= (what FSDP runs:
PyTorch's FSDP1 turns FULL_SHARD into NO_SHARD at world size 1, with a warning; with offload
the parameters still live on the host between uses), units= and cpu_offload=. --gpt-size large
is cohort-ddp-bench's large GPT (57,196,032 parameters); params= counts the model before
wrapping, so it is the whole model's on every rank, as cohort's.
"""
import argparse
import functools
import inspect
import os
import resource
import statistics
import sys
import time
import types

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

SAMPLES = 60000
DATA_SEED = 20261122  # ddp_bench.cc's kDataSeed
# --gpt-size: ddp_bench.cc's (small: examples/char_lm's defaults; large: its kLargeGpt).
GPT_SIZES = {"small": {"context": 64, "layers": 4, "heads": 4, "width": 128},
             "large": {"context": 128, "layers": 8, "heads": 12, "width": 768}}


# ---- models: shared/peers/fmnist.py's, layer for layer (DDP buckets gradients in reverse
# registration order, so the order matches cohort's too)

class Net(nn.Module):
    """pytorch/examples mnist/main.py Net: 1,199,882 parameters."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


class MLP(nn.Module):
    """784-1024-1024-10: 1,863,690 parameters."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 1024)
        self.fc2 = nn.Linear(1024, 1024)
        self.fc3 = nn.Linear(1024, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return F.log_softmax(self.fc3(x), dim=1)


def zero_peer():
    """bench/zero_peer.py, whose Gpt is char_lm's GPT (models/gpt.h) module for module."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import zero_peer as module  # noqa: E402 (bench/, imported only when asked for)
    return module


def make_gpt(a):
    return zero_peer().Gpt(types.SimpleNamespace(vocab=a.vocab, context=a.context,
                                                 layers=a.layers, heads=a.heads, width=a.width,
                                                 dropout=0.1))


# ---- optimizer settings (--optim)

def foreach_kwargs(function, a):
    """{'foreach': False} for --optim loop where `function` takes it (libtorch's per-parameter
    loop), {} otherwise (PyTorch's own choice, multi-tensor on CUDA)."""
    if a.optim == "foreach" or "foreach" not in inspect.signature(function).parameters:
        return {}
    return {"foreach": False}


# ---- workloads: a model, its batches, its loss and its optimizer

class FmnistWorkload:
    def __init__(self, a, rank, world, device):
        g = torch.Generator().manual_seed(DATA_SEED)
        self.images = torch.randn(SAMPLES, 1, 28, 28, generator=g).to(device)
        self.labels = torch.randint(10, (SAMPLES,), generator=g).to(device)
        self.model = (Net() if a.model == "cnn" else MLP()).to(device)
        self.a, self.device = a, device
        self.global_batch, self.local = a.batch, a.batch // world
        self.rank = rank
        self.steps_per_epoch = SAMPLES // a.batch
        self.generator = torch.Generator().manual_seed(a.seed)
        self.permutation, self.step = None, 0

    def description(self):
        return ""

    def next_loss(self, model):
        if self.permutation is None or self.step == self.steps_per_epoch:
            # Copied once per epoch: a copy per step would wait for the device every step.
            self.permutation = torch.randperm(SAMPLES, generator=self.generator).to(self.device)
            self.step = 0
        begin = self.step * self.global_batch + self.rank * self.local
        self.step += 1
        idx = self.permutation[begin:begin + self.local]
        return F.nll_loss(model(self.images.index_select(0, idx)), self.labels.index_select(0, idx))

    def make_optimizer(self, params):
        return torch.optim.SGD(params, lr=0.01, momentum=0.9,
                               **foreach_kwargs(torch.optim.SGD, self.a))

    def before_step(self, model, params):
        pass


class GptWorkload:
    def __init__(self, a, rank, world, device):
        self.model = make_gpt(a).to(device)
        self.a = a
        g = torch.Generator().manual_seed(a.seed * 1000 + rank + 1)
        local = a.batch // world
        self.batches = [torch.randint(a.vocab, (local, a.context + 1), generator=g).to(device)
                        for _ in range(4)]
        self.step = 0

    def description(self):
        a = self.a
        return (f" context={a.context} layers={a.layers} heads={a.heads} width={a.width}"
                f" vocab={a.vocab}")

    def next_loss(self, model):
        tokens = self.batches[self.step % len(self.batches)]
        self.step += 1
        logits = model(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, self.a.vocab), tokens[:, 1:].reshape(-1))

    def make_optimizer(self, params):
        return torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1,
                                 **foreach_kwargs(torch.optim.AdamW, self.a))

    def before_step(self, model, params):
        if self.a.clip <= 0:
            return
        if self.a.mode == "fsdp":  # the norm over every rank's shards, as cohort::clip_grad_norm
            norm = model.clip_grad_norm_(self.a.clip)
        else:
            clip = torch.nn.utils.clip_grad_norm_
            norm = clip(params, self.a.clip, **foreach_kwargs(clip, self.a))
        if self.a.optim == "loop":
            float(norm)  # libtorch's clip_grad_norm_ returns a double: the same wait


# ---- the run

def launch_env():
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)))


def select_device(a, local_rank):
    if a.device == "cpu":  # for checking this script where there is no GPU
        return torch.device("cpu")
    if not torch.cuda.is_available():
        sys.exit("torch_ddp_cuda.py: error: this torch sees no CUDA device (--device cpu?)")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gather(value, a, device, rank, world):
    """Every rank's `value`, by rank (this rank's alone without a group)."""
    if not dist.is_initialized():
        return [value]
    where = device if a.backend == "nccl" else torch.device("cpu")
    t = torch.zeros(world, dtype=torch.float64, device=where)
    t[rank] = value
    dist.all_reduce(t)
    return t.tolist()


def megabytes(values):
    return ",".join(f"{v:.1f}" for v in values)


def timed_windows(a, step, device):
    for _ in range(a.warmup):
        step()
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)  # the peak of the timed steps, not of set-up
    per_step = []
    for _ in range(a.windows):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        synchronize(device)
        per_step.append((time.perf_counter() - t0) / a.steps)
    return per_step


# ---- FSDP (--mode fsdp): imported only there, so that --help runs on any torch

def wrap_fsdp(a, model, device):
    """FSDP1 over the default group: FULL_SHARD, a unit per TransformerBlock (the GPT; the rest
    in the root unit) or the whole model in one (the CNN and MLP, as cohort's default units),
    the parameters on the host between uses with --cpu-offload."""
    from torch.distributed.fsdp import CPUOffload, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    policy = None
    if a.model == "gpt":
        block = zero_peer().TransformerBlock  # the class make_gpt's blocks are of
        try:
            from torch.distributed.fsdp.wrap import ModuleWrapPolicy  # torch >= 2.0
            policy = ModuleWrapPolicy({block})
        except ImportError:
            from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
            policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={block})
    # use_orig_params stays at its default, False (FSDP's flat parameters are what the optimizer
    # steps); torch 1.13 does not take the argument at all.
    kwargs = {"sharding_strategy": ShardingStrategy.FULL_SHARD, "auto_wrap_policy": policy,
              "cpu_offload": CPUOffload(offload_params=a.cpu_offload)}
    if device.type == "cuda":
        kwargs["device_id"] = device
    return FSDP(model, **kwargs)


def fsdp_description(a, model):
    """ strategy=NO_SHARD units=9 cpu_offload=1: the strategy FSDP runs (FSDP1 clamps FULL_SHARD
    to NO_SHARD at world size 1) and its units, the root included."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    strategy = getattr(model, "sharding_strategy", None)
    return (f" strategy={getattr(strategy, 'name', strategy)}"
            f" units={len(FSDP.fsdp_modules(model))} cpu_offload={int(a.cpu_offload)}")


def report(a, workload, per_step, device, rank, world, nparams, sharding):
    distributed = a.mode != "plain"
    rss = gather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, a, device, rank,
                 world)
    gpu = None
    if device.type == "cuda":
        gpu = gather(torch.cuda.max_memory_allocated(device) / 2.0 ** 20, a, device, rank, world)
    if rank != 0:
        return
    tag = (f"model={a.model} mode={a.mode}{'-nosync' if a.no_sync else ''} world={world} "
           f"threads/rank={a.threads} global_batch={a.batch}"
           + (f" bucket_cap_mb={a.bucket_mb}" if a.mode == "ddp" else "") + f" params={nparams}"
           + workload.description() + sharding + f" device={device}"
           + (f" group={a.backend}" if distributed else ""))
    med = statistics.median(per_step)
    line = (f"STEP {tag} ms_per_step_med={med * 1e3:.2f} ms_min={min(per_step) * 1e3:.2f} "
            f"ms_max={max(per_step) * 1e3:.2f} samples_per_s={a.batch / med:.1f} "
            f"windows={a.windows}x{a.steps} peak_rss_mb={rss[0]:.1f} "
            f"peak_rss_mb_ranks={megabytes(rss)}")
    if gpu is not None:
        line += f" peak_gpu_mb={gpu[0]:.1f} peak_gpu_mb_ranks={megabytes(gpu)}"
    print(f"{line} impl=pytorch optim={a.optim}", flush=True)


def validate(a, world):
    """cohort-ddp-bench's checks of the same options."""
    def fail(message):
        sys.exit(f"torch_ddp_cuda.py: error: {message}")
    if a.mode == "plain" and (world != 1 or a.no_sync):
        fail("--mode plain runs one process without DDP or --no-sync")
    if a.no_sync and a.mode != "ddp":
        fail("--no-sync is DDP's: give it with --mode ddp only")
    if a.cpu_offload and a.mode != "fsdp":
        fail("--cpu-offload is FSDP's (CPUOffload(offload_params=True)): give it with --mode fsdp")
    if a.cpu_offload and a.device != "cuda":
        fail("--cpu-offload moves a CUDA model's parameters to host memory: it needs --device "
             "cuda (a model on the CPU has nothing to offload)")
    if a.gpt_size != "small" and a.model != "gpt":
        fail("--gpt-size is for --model gpt")
    if a.batch % world:
        fail(f"--batch {a.batch} is not a multiple of the world size {world}")


def run(a):
    rank, world, local_rank = launch_env()
    validate(a, world)
    torch.set_num_threads(a.threads)
    device = select_device(a, local_rank)
    if a.mode != "plain":
        dist.init_process_group(a.backend)  # env:// from torchrun
    torch.manual_seed(a.seed)  # the same initial weights on every rank (DDP broadcasts them too)
    workload = (GptWorkload if a.model == "gpt" else FmnistWorkload)(a, rank, world, device)
    model = workload.model
    nparams = sum(p.numel() for p in model.parameters())  # before FSDP flattens and shards them
    sharding = ""
    if a.mode == "ddp":
        ids = [device.index] if device.type == "cuda" else None
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids,
                                                          bucket_cap_mb=a.bucket_mb)
    elif a.mode == "fsdp":
        model = wrap_fsdp(a, model, device)
        sharding = fsdp_description(a, model)
    params = list(model.parameters())  # under FSDP its flat parameters (on the host: offload)
    opt = workload.make_optimizer(params)

    def step():
        opt.zero_grad(set_to_none=True)
        with (model.no_sync() if a.no_sync else _nothing()):
            loss = workload.next_loss(model)
            loss.backward()
        workload.before_step(model, params)
        opt.step()

    per_step = timed_windows(a, step, device)
    report(a, workload, per_step, device, rank, world, nparams, sharding)
    if a.mode != "plain":
        dist.barrier()
        dist.destroy_process_group()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["cnn", "mlp", "gpt"], default="cnn")
    ap.add_argument("--mode", choices=["ddp", "fsdp", "plain"], default="ddp",
                    help="ddp: DistributedDataParallel; fsdp: FullyShardedDataParallel "
                         "(FULL_SHARD, a unit per GPT block); plain: no group")
    ap.add_argument("--cpu-offload", action="store_true",
                    help="fsdp with --device cuda: CPUOffload(offload_params=True)")
    ap.add_argument("--backend", choices=["nccl", "gloo"], default="nccl",
                    help="torch.distributed backend of DDP or FSDP")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: only to check this script on a machine without a GPU")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64, help="GLOBAL batch")
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-sync", action="store_true",
                    help="every step inside model.no_sync(): no gradient allreduce")
    ap.add_argument("--optim", choices=["loop", "foreach"], default="loop",
                    help="loop: optimizer and clipping one parameter at a time, the norm read "
                         "on the host, as libtorch's; foreach: PyTorch's defaults")
    g = ap.add_argument_group("gpt (sizes: --gpt-size's unless given)")
    g.add_argument("--gpt-size", choices=sorted(GPT_SIZES), default="small",
                   help="small: examples/char_lm's defaults (context 64, 4 layers, 4 heads, "
                        "width 128; 867,072 parameters); large: cohort-ddp-bench's (context 128, "
                        "8 layers, 12 heads, width 768; 57,196,032 parameters)")
    for name in ("context", "layers", "heads", "width"):
        g.add_argument(f"--{name}", type=int, default=None)
    g.add_argument("--vocab", type=int, default=256)
    g.add_argument("--clip", type=float, default=1.0, help="gradient 2-norm limit; 0: none")
    a = ap.parse_args(argv)
    for name, value in GPT_SIZES[a.gpt_size].items():
        if getattr(a, name) is None:
            setattr(a, name, value)
    return a


if __name__ == "__main__":
    run(parse_args())
