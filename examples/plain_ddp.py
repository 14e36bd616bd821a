"""A plain torchrun DDP script with no Alchemist import: digits, MLP 64-64-10.

Runs unmodified under `torchrun --standalone --nproc-per-node=2 examples/plain_ddp.py` and
under `alchemist run examples/script.yaml`. bench/ uses it as the hand-written baseline.
"""

import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--result", default="", help="rank 0 writes a JSON summary here")
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)

    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=360, random_state=0, stratify=y)
    mean, std = x_tr.mean(0), x_tr.std(0) + 1e-6
    f = lambda a: torch.from_numpy(((a - mean) / std).astype(np.float32))  # noqa: E731
    train = TensorDataset(f(x_tr), torch.from_numpy(y_tr).long())
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)

    model = DDP(nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    steps, t0 = 0, time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            steps += 1
    train_s = time.perf_counter() - t0

    with torch.no_grad():
        acc = (model.module(f(x_te)).argmax(1) == torch.from_numpy(y_te)).float().mean().item()
    if rank == 0:
        print(f"steps {steps}  loss {loss.item():.4f}  test accuracy {acc:.4f}  "
              f"{steps / train_s:.1f} steps/s")
        if args.result:
            with open(args.result, "w") as fh:
                json.dump(dict(steps=steps, train_s=train_s, steps_per_s=steps / train_s,
                               test_accuracy=acc), fh)
    dist.barrier()  # then exit promptly: gloo can abort in interpreter teardown
    os._exit(0)


if __name__ == "__main__":
    main()
