"""A torchrun DDP script that reports its progress and metrics to Alchemist (digits, MLP).

    alchemist run examples/report.yaml

`report()` puts step and loss in `alchemist run`/`list`/`status`, Prometheus and TensorBoard,
and any other keyword (here `accuracy`) as `alchemist_script_metric{name="accuracy"}`.
Outside Alchemist (`torchrun --standalone --nproc-per-node=2 examples/report_ddp.py`) it
does nothing, so the script runs the same either way.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.nn.parallel import DistributedDataParallel as DDP

from alchemist_jobs.report import report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    world = int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    x, y = load_digits(return_X_y=True)
    x = torch.tensor((x - x.mean(0)) / (x.std(0) + 1e-6), dtype=torch.float32)
    y = torch.tensor(y)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    ddp = DDP(model) if world > 1 else model
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(rank)
    for step in range(1, args.steps + 1):
        idx = torch.randint(0, len(x), (args.batch_size,), generator=g)
        loss = F.cross_entropy(ddp(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == args.steps:
            with torch.no_grad():
                accuracy = (model(x).argmax(1) == y).float().mean().item()
            report(step=step, loss=loss.item(), total_steps=args.steps,
                   samples=args.batch_size * 10, accuracy=accuracy)
    if rank == 0:
        print(f"final accuracy {accuracy:.3f}")
    if world > 1:
        dist.barrier()


if __name__ == "__main__":
    main()
