"""Your own training loop with the job's algorithm: a torchrun-style script that trains the
character-level transformer of charlm.py and hands its loop to Alchemist in two lines
(examples/own_loop.yaml runs it with bmuf; any algorithm applies):

    model, optimizer = alchemist_jobs.prepare(model, optimizer)
    ... optimizer.step()  # the algorithm's exchange happens inside

It resumes where the newest checkpoint left off, reports its progress, and still runs with
plain `torchrun --nproc-per-node=2 own_loop.py` (prepare then wraps the model in DDP).
"""

import argparse
import os

import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

import alchemist_jobs
from alchemist_jobs.report import report
from charlm import CharTransformer, Windows, corpus, loss

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--lr", type=float, default=0.003)
args = parser.parse_args()

rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
text = corpus()
cut = int(len(text) * 0.9)
train, test = Windows(text[:cut]), Windows(text[cut:])
model = CharTransformer()
optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
model, optimizer = alchemist_jobs.prepare(model, optimizer)  # also starts the process group
start = alchemist_jobs.checkpoint.resume().get("step", 0)  # 0 unless resuming after a failure

sampler = DistributedSampler(train, num_replicas=world, rank=rank, seed=0)
loader = DataLoader(train, batch_size=32, sampler=sampler)
total = args.epochs * len(loader)
step = 0
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    for x, y in loader:
        step += 1
        if step <= start:
            continue  # trained before a restart
        optimizer.zero_grad()
        value = loss(model(x), y)
        value.backward()
        optimizer.step()
        report(step=step, loss=value.item(), total_steps=total, samples=len(x))
        if step % 100 == 0:
            alchemist_jobs.checkpoint.save(epoch=epoch)  # every rank, at the same step

alchemist_jobs.finish()  # the algorithm's last exchange: every rank holds the final model
model.eval()
with torch.no_grad():
    batches = [(model(x).argmax(-1) == y).float().mean().item()
               for x, y in DataLoader(test, batch_size=256)]
accuracy = sum(batches) / len(batches)
report(accuracy=accuracy)
if rank == 0:
    print(f"next-character accuracy on held-out text: {accuracy:.4f}")
