#!/usr/bin/python3
"""PyTorch's peer of cohort-zero-bench: the same GPT (examples/char_lm/gpt.h), the same loop and
the same figures, under torch's DistributedDataParallel (gloo, CPU) with AdamW, or under DDP with
torch.distributed.optim.ZeroRedundancyOptimizer(AdamW) (ZeRO stage 1).

  /usr/bin/python3 bench/zero_peer.py --strategy ddp --world 2
  /usr/bin/python3 bench/zero_peer.py --strategy zero1 --world 2 --layers 12 --width 768

Each step: this rank's batch / world sequences of synthetic tokens (uniform ints; step time does
not depend on their values), forward, cross-entropy on next-token targets, backward (DDP's
allreduce), optimizer step. Timing as ddp_train.py: --warmup steps, then --windows windows of
--steps steps; rank 0 prints the STEP line (median of the windows), then one MEM line per rank:
model-state bytes computed from the tensors exactly as cohort-zero-bench computes them for its
DDP (parameters + .grad + the optimizer's exp_avg/exp_avg_sq/max_exp_avg_sq; the scalar step
counters are left out, as cohort::optimizer_state_bytes does), taken after the last step, and
the rank's peak RSS (getrusage). docs/bench.md, "ZeRO stages 1 and 2".
"""
import argparse
import math
import os
import resource
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer

INIT_STD = 0.02  # GPT-2's


# ---- the model: examples/char_lm/gpt.{h,cc}, module for module, in the same registration
# order (DDP buckets parameters in reverse registration order, so the buckets match too).

class CausalSelfAttention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.heads = a.heads
        self.query = nn.Linear(a.width, a.width)
        self.key = nn.Linear(a.width, a.width)
        self.value = nn.Linear(a.width, a.width)
        self.projection = nn.Linear(a.width, a.width)
        self.attention_dropout = nn.Dropout(a.dropout)
        self.residual_dropout = nn.Dropout(a.dropout)

    def split_heads(self, x):
        b, t, w = x.shape
        return x.view(b, t, self.heads, w // self.heads).transpose(1, 2)

    def forward(self, x):
        q = self.split_heads(self.query(x))
        k = self.split_heads(self.key(x))
        v = self.split_heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
        t = x.size(1)
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        weights = self.attention_dropout(torch.softmax(scores, -1))
        mixed = torch.matmul(weights, v).transpose(1, 2).reshape(x.shape)
        return self.residual_dropout(self.projection(mixed))


class TransformerBlock(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.attention_norm = nn.LayerNorm(a.width)
        self.attention = CausalSelfAttention(a)
        self.mlp_norm = nn.LayerNorm(a.width)
        self.expand = nn.Linear(a.width, 4 * a.width)
        self.contract = nn.Linear(4 * a.width, a.width)
        self.mlp_dropout = nn.Dropout(a.dropout)

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        hidden = F.gelu(self.expand(self.mlp_norm(x)))
        return x + self.mlp_dropout(self.contract(hidden))


class Gpt(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.token_embedding = nn.Embedding(a.vocab, a.width)
        self.position_embedding = nn.Embedding(a.context, a.width)
        self.embedding_dropout = nn.Dropout(a.dropout)
        self.blocks = nn.ModuleList(TransformerBlock(a) for _ in range(a.layers))
        self.final_norm = nn.LayerNorm(a.width)
        self.head = nn.Linear(a.width, a.vocab, bias=False)  # not tied, as in gpt.h
        self.initialize_weights(a.layers)

    def initialize_weights(self, layers):
        """gpt.cc's: N(0, 0.02) matrices and embeddings, the residual projections scaled by
        1/sqrt(2 layers), zero biases, LayerNorm at identity."""
        residual_std = INIT_STD / math.sqrt(2.0 * layers)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() < 2:
                    continue
                into_residual = "projection.weight" in name or "contract.weight" in name
                p.normal_(0.0, residual_std if into_residual else INIT_STD)
            for m in self.modules():
                if isinstance(m, nn.Linear) and m.bias is not None:
                    m.bias.zero_()

    def forward(self, tokens):
        t = tokens.size(1)
        positions = torch.arange(t, dtype=torch.int64, device=tokens.device)
        x = self.embedding_dropout(self.token_embedding(tokens) + self.position_embedding(positions))
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x))


# ---- memory, counted as cohort-zero-bench counts it

STATE_KEYS = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")  # cohort::optimizer_state_bytes' AdamW


def nbytes(t):
    return t.numel() * t.element_size() if t is not None else 0


def optimizer_state_bytes(opt):
    local = opt.optim if isinstance(opt, ZeroRedundancyOptimizer) else opt  # this rank's part
    return sum(nbytes(s.get(k)) for s in local.state.values() for k in STATE_KEYS)


def memory(model, opt):
    params = list(model.parameters())
    grads = sum(nbytes(p.grad) for p in params)
    return {"parameters": sum(nbytes(p) for p in params), "gradients": grads,
            # gradient_as_bucket_view: .grad are views of DDP's persistent buckets, so what is
            # held after backward is also the most held at once.
            "peak_gradients": grads, "optimizer_state": optimizer_state_bytes(opt)}


def peak_rss_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# ---- the run

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def make_optimizer(a, model):
    options = dict(lr=a.lr, weight_decay=a.weight_decay)
    if a.strategy == "zero1":
        return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                       **options)
    return torch.optim.AdamW(model.parameters(), **options)


def make_batches(a, rank):
    """A few fixed batches of this rank's sequences, cycled: making tokens is not what is timed."""
    g = torch.Generator().manual_seed(a.seed * 1000 + rank + 1)
    local = a.batch // a.world
    return [torch.randint(a.vocab, (local, a.context + 1), generator=g) for _ in range(4)]


class Loop:
    def __init__(self, a, model, opt, batches):
        self.a, self.model, self.opt, self.batches = a, model, opt, batches
        self.i = 0
        self.phases = {"forward": [], "backward": [], "optimizer": []}
        # Peak RSS before the first step, and how much each phase of all the steps raised it.
        self.rss_before = self.last_rss = peak_rss_kib()
        self.rss_growth = [0, 0, 0]

    def account_rss(self, phase):
        now = peak_rss_kib()
        self.rss_growth[phase] += now - self.last_rss
        self.last_rss = now

    def step(self, record):
        tokens = self.batches[self.i % len(self.batches)]
        self.i += 1
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        logits = self.model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))
        self.account_rss(0)
        t1 = time.perf_counter()
        loss.backward()
        self.account_rss(1)
        t2 = time.perf_counter()
        self.opt.step()
        self.account_rss(2)
        t3 = time.perf_counter()
        if record:
            for name, seconds in zip(self.phases, (t1 - t0, t2 - t1, t3 - t2)):
                self.phases[name].append(seconds)

    def windows(self):
        for _ in range(self.a.warmup):
            self.step(False)
        per_step = []
        for _ in range(self.a.windows):
            t0 = time.perf_counter()
            for _ in range(self.a.steps):
                self.step(True)
            per_step.append((time.perf_counter() - t0) / self.a.steps)
        return per_step


def gather(values, world):
    """Every rank's list of numbers, on every rank (int64: byte counts stay exact)."""
    mine = torch.tensor(values, dtype=torch.int64)
    everyone = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(everyone, mine)
    return [t.tolist() for t in everyone]


def report(a, params, per_step, phases, mems):
    med = statistics.median(per_step)
    ms = lambda name: statistics.median(phases[name]) * 1e3
    print(f"STEP impl=torch strategy={a.strategy} world={a.world} threads/rank={a.threads} "
          f"global_batch={a.batch} context={a.context} layers={a.layers} width={a.width} "
          f"heads={a.heads} vocab={a.vocab} params={params} ms_per_step_med={med * 1e3:.2f} "
          f"ms_min={min(per_step) * 1e3:.2f} ms_max={max(per_step) * 1e3:.2f} "
          f"samples_per_s={a.batch / med:.2f} tokens_per_s={a.batch * a.context / med:.1f} "
          f"windows={a.windows}x{a.steps} forward_ms={ms('forward'):.2f} "
          f"backward_ms={ms('backward'):.2f} optimizer_ms={ms('optimizer'):.2f}", flush=True)
    for rank, m in enumerate(mems):
        p, g, pg, o, rss, before, fwd, bwd, opt = m
        print(f"MEM impl=torch strategy={a.strategy} world={a.world} rank={rank} parameters={p} "
              f"gradients={g} peak_gradients={pg} optimizer_state={o} model_state={p + g + o} "
              f"peak_rss_mb={rss / 1024:.1f} rss_before_steps_mb={before / 1024:.1f} "
              f"rss_growth_mb=forward:{fwd / 1024:.1f},backward:{bwd / 1024:.1f},"
              f"optimizer:{opt / 1024:.1f}", flush=True)


def run(rank, a, port):
    torch.set_num_threads(a.threads)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=a.world)
    torch.manual_seed(a.seed)  # the same initial weights on every rank (DDP broadcasts them too)
    model = Gpt(a)
    params = sum(p.numel() for p in model.parameters())
    # gradient_as_bucket_view as cohort's DDP does by default: .grad live in the buckets, so the
    # gradients are held once (torch's default, False, holds them twice).
    model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb,
                                                gradient_as_bucket_view=True)
    opt = make_optimizer(a, model)
    loop = Loop(a, model, opt, make_batches(a, rank))
    per_step = loop.windows()
    m = memory(model, opt)
    mems = gather([m["parameters"], m["gradients"], m["peak_gradients"], m["optimizer_state"],
                   peak_rss_kib(), loop.rss_before] + loop.rss_growth, a.world)
    if rank == 0:
        report(a, params, per_step, loop.phases, mems)
    dist.barrier()
    dist.destroy_process_group()


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strategy", choices=["ddp", "zero1"], default="ddp")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--batch", type=int, default=8, help="GLOBAL batch, in sequences")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=128, help="tokens per sequence")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--bucket-mb", type=float, default=25)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.batch % a.world or a.width % a.heads:
        ap.error("--batch must be a multiple of --world and --width of --heads")
    return a


if __name__ == "__main__":
    args = parse()
    mp.spawn(run, args=(args, free_port()), nprocs=args.world, join=True)
