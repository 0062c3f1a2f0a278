#!/usr/bin/env python3
"""How far "W ranks with averaged gradients" lands from "one process on the whole batch" through
float32 rounding alone (docs/ddp.md, "What is tested"; README.md).

usage: /usr/bin/python3 bench/adam_rounding.py [--steps 50] [--batch 64] [--ranks 2] [--seeds 5]

A small MLP (10 -> 64 -> 64 -> 1, tanh, MSE) is trained twice from the same initial parameters
on the same batches: once on the whole batch of B per step, once as W "ranks" of B/W samples
each, whose gradients (of each rank's mean loss) are summed and divided by W, which is what
DistributedDataParallel's average gives every rank. Mathematically the two are the same
gradient; in floating point they are summed in another order. The script prints, after
--steps steps, the largest |difference| of any parameter element, the largest
|difference| / |one-process value| over elements (and the same over elements with
|value| >= 1e-3, since an element near zero makes the ratio meaningless), the largest
per-tensor ||difference|| / ||one-process value||, and ||difference|| over all parameters / the
distance one process's parameters travelled from the start (2-norms), for Adam, AdamW and SGD with momentum, in
float32 and, as a check that the difference is rounding, in float64. Median and largest over
--seeds seeds.
"""
import argparse
import statistics

import torch


def make_model(dtype):
    return torch.nn.Sequential(
        torch.nn.Linear(10, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, 1)).to(dtype)


OPTIMIZERS = {
    "Adam (lr 1e-3)": lambda p: torch.optim.Adam(p, lr=1e-3),
    "AdamW (lr 1e-2, wd 1e-2)": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=1e-2),
    "SGD (lr 0.05, momentum 0.9)": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
}


def train(model, make_optimizer, batches, ranks):
    optimizer = make_optimizer(model.parameters())
    for x, y in batches:
        optimizer.zero_grad()
        if ranks == 1:
            torch.nn.functional.mse_loss(model(x), y).backward()
        else:
            summed = [torch.zeros_like(p) for p in model.parameters()]
            for xs, ys in zip(x.chunk(ranks), y.chunk(ranks)):
                model.zero_grad()
                torch.nn.functional.mse_loss(model(xs), ys).backward()
                for s, p in zip(summed, model.parameters()):
                    s += p.grad
            for s, p in zip(summed, model.parameters()):
                p.grad = s / ranks  # DDP's average over the ranks
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def compare(a, b, initial):
    """a: the ranks' parameters, b: one process's, initial: where both started."""
    diff = max((x - y).abs().max().item() for x, y in zip(a, b))
    rel = max(((x - y).abs() / y.abs()).max().item() for x, y in zip(a, b))
    rel_big = max([((x - y).abs() / y.abs())[y.abs() >= 1e-3].max().item()
                   for x, y in zip(a, b) if (y.abs() >= 1e-3).any()] or [0.0])
    norm = max(((x - y).norm() / y.norm()).item() for x, y in zip(a, b))
    flat = lambda ts: torch.cat([t.flatten() for t in ts])
    travelled = ((flat(a) - flat(b)).norm() / (flat(b) - flat(initial)).norm()).item()
    return diff, rel, rel_big, norm, travelled


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}; MLP 10-64-64-1, {args.steps} steps, batch {args.batch} "
          f"against {args.ranks} ranks of {args.batch // args.ranks}, {args.seeds} seeds")
    print("optimizer, dtype: max |diff|, max |diff|/|p|, same over |p| >= 1e-3, "
          "max ||diff||/||p|| per tensor, ||diff|| / distance one process travelled"
          "  (median of seeds / largest)")
    for name, make_optimizer in OPTIMIZERS.items():
        for dtype in (torch.float32, torch.float64):
            figures = []
            for seed in range(args.seeds):
                torch.manual_seed(seed)
                initial = make_model(dtype)
                batches = [(torch.randn(args.batch, 10, dtype=dtype), torch.randn(args.batch, 1, dtype=dtype))
                           for _ in range(args.steps)]
                whole, ranks = make_model(dtype), make_model(dtype)
                whole.load_state_dict(initial.state_dict())
                ranks.load_state_dict(initial.state_dict())
                start = [p.detach().clone() for p in initial.parameters()]
                figures.append(compare(train(ranks, make_optimizer, batches, args.ranks),
                                       train(whole, make_optimizer, batches, 1), start))
            columns = zip(*figures)
            text = ", ".join(f"{statistics.median(c):.2e} / {max(c):.2e}" for c in columns)
            print(f"{name}, {str(dtype).replace('torch.', '')}: {text}", flush=True)


if __name__ == "__main__":
    main()
