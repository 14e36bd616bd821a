"""A rank's shard of a built-in task's training set, batch by batch, and its evaluation."""

from __future__ import annotations

import math
import queue
import threading
from typing import Iterator

import torch
import torch.nn.functional as F

from alchemist_jobs.runtime.tasks import TaskData


class Batches:
    """This rank's shard of the training set, batch by batch, resumable mid-epoch.

    The per-epoch index order is exactly DistributedSampler's (shuffled by seed + epoch,
    padded so every rank gets the same count), but batches are sliced from in-memory tensors
    instead of collated sample by sample. With `loader_workers` > 0, that many threads gather
    batches ahead of the loop (at most 2 per thread in flight), in order; on a GPU the set
    then stays in pinned host memory and each thread copies its batches on its own stream.
    With 0, the whole set lives on the device and batches are sliced there.
    """

    def __init__(self, data: TaskData, batch: int, rank: int, world: int, seed: int,
                 device: torch.device, loader_workers: int = 0):
        from torch.utils.data.distributed import DistributedSampler

        self.device = device
        self.prefetch = loader_workers
        self.cuda = device.type == "cuda"
        home = torch.device("cpu") if self.prefetch else device
        self.x, self.y = data.x_train.to(home), data.y_train.to(home)
        if self.prefetch and self.cuda:
            self.x, self.y = self.x.pin_memory(), self.y.pin_memory()
        self.batch = batch
        self.sampler = DistributedSampler(range(len(self.x)), num_replicas=world, rank=rank,
                                          shuffle=True, seed=seed, drop_last=False)
        self.per_epoch = math.ceil(self.sampler.num_samples / batch)

    def _slice(self, idx: torch.Tensor, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        sel = idx[b * self.batch:(b + 1) * self.batch]
        return self.x[sel], self.y[sel]

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        self.sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(self.sampler)), device=self.x.device)
        if not self.prefetch:
            for b in range(start_batch, self.per_epoch):
                yield (b, *self._slice(idx, b))
            return
        yield from self._prefetched(idx, start_batch)

    def _prefetched(self, idx: torch.Tensor, start: int) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        """Batches gathered into pinned memory and copied by worker threads, in order."""
        todo = list(range(start, self.per_epoch))
        slots: list[queue.Queue] = [queue.Queue(maxsize=2) for _ in range(self.prefetch)]
        stop = threading.Event()

        def work(w: int) -> None:
            stream = torch.cuda.Stream(self.device) if self.cuda else None
            for b in todo[w::self.prefetch]:
                if stop.is_set():
                    return
                x, y = self._slice(idx, b)
                done = None
                if stream is not None:
                    with torch.cuda.stream(stream):
                        x = x.pin_memory().to(self.device, non_blocking=True)
                        y = y.pin_memory().to(self.device, non_blocking=True)
                        done = torch.cuda.Event()
                        done.record(stream)
                slots[w].put((b, x, y, done))

        threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(self.prefetch)]
        for t in threads:
            t.start()
        try:
            for i in range(len(todo)):
                b, x, y, done = slots[i % self.prefetch].get()
                if done is not None:
                    current = torch.cuda.current_stream(self.device)
                    current.wait_event(done)
                    x.record_stream(current)  # made on a side stream, freed after use here
                    y.record_stream(current)
                yield b, x, y
        finally:
            stop.set()


@torch.no_grad()
@torch.no_grad()  # no autograd graph of the whole test set (time, and memory on a GPU)
def evaluate(model: torch.nn.Module, data: TaskData, device: torch.device) -> tuple[float, float]:
    """(test loss, test accuracy) over the whole test set."""
    was_training = model.training
    model.eval()
    logits = model(data.x_test.to(device)).float()
    y = data.y_test.to(device)
    loss = F.cross_entropy(logits, y).item()
    acc = (logits.argmax(1) == y).float().mean().item()
    model.train(was_training)
    return loss, acc
