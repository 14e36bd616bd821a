"""A rank's shard of a task's training set, batch by batch, and its evaluation.

A TensorDataset of (inputs, targets) is sliced in place (the built-in tasks, and any user
task that keeps its data in two tensors); any other map-style dataset is read sample by
sample and collated, in this process or in `data.loader_workers` DataLoader processes.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data._utils.collate import default_collate

from alchemist_jobs.task import Task


def to_device(x: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """A batch's inputs or targets on `device`: a tensor, or tensors in lists, tuples, dicts."""
    if isinstance(x, torch.Tensor):
        return x.to(device, non_blocking=non_blocking)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device, non_blocking) for v in x)
    if isinstance(x, dict):
        return {k: to_device(v, device, non_blocking) for k, v in x.items()}
    return x


def batch_len(y: Any) -> int:
    """Samples in a batch, from its targets' leading dimension."""
    if isinstance(y, torch.Tensor):
        return int(y.shape[0]) if y.dim() else 1
    if isinstance(y, dict):
        return batch_len(next(iter(y.values())))
    return (
        batch_len(y[0])
        if isinstance(y, (list, tuple)) and y and isinstance(y[0], (torch.Tensor, list, tuple, dict))
        else len(y)
    )


def tensor_pair(dataset: Any, collate: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(inputs, targets) of a dataset that is two tensors and needs no collation, else None."""
    if collate is None and isinstance(dataset, TensorDataset) and len(dataset.tensors) == 2:
        return dataset.tensors[0], dataset.tensors[1]
    return None


class Batches:
    """This rank's shard of the training set, batch by batch, resumable mid-epoch.

    The per-epoch index order is exactly DistributedSampler's (shuffled by seed + epoch,
    padded so every rank gets the same count). A two-tensor set is sliced in memory: with
    `loader_workers` > 0, that many threads gather batches ahead of the loop (at most 2 per
    thread in flight), in order; on a GPU the set then stays in pinned host memory and each
    thread copies its batches on its own stream. With 0, the whole set lives on the device
    and batches are sliced there. Any other dataset is collated sample by sample, by
    `loader_workers` DataLoader processes (0: in this one).
    """

    def __init__(
        self,
        task: Task,
        batch: int,
        rank: int,
        world: int,
        seed: int,
        device: torch.device,
        loader_workers: int = 0,
    ):
        from torch.utils.data.distributed import DistributedSampler

        self.device = device
        self.prefetch = loader_workers
        self.cuda = device.type == "cuda"
        self.dataset, self.collate = task.train, task.collate or default_collate
        pair = tensor_pair(task.train, task.collate)
        self.x: torch.Tensor | None = None  # a two-tensor set's inputs and targets, else None
        self.y: torch.Tensor | None = None
        if pair is not None:
            home = torch.device("cpu") if self.prefetch else device
            self.x, self.y = pair[0].to(home), pair[1].to(home)
            if self.prefetch and self.cuda:
                self.x, self.y = self.x.pin_memory(), self.y.pin_memory()
        self.batch = batch
        # This rank's indices per epoch; of the dataset the sampler reads only its len().
        self.sampler: DistributedSampler[int] = DistributedSampler(
            task.train, num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=False
        )
        self.per_epoch = math.ceil(self.sampler.num_samples / batch)

    def _slice(self, idx: torch.Tensor, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.x is not None and self.y is not None  # only a two-tensor set is sliced
        sel = idx[b * self.batch : (b + 1) * self.batch]
        return self.x[sel], self.y[sel]

    def epoch(self, epoch: int, start_batch: int = 0) -> Iterator[tuple[int, Any, Any]]:
        self.sampler.set_epoch(epoch)
        if self.x is None:
            yield from self._collated(list(iter(self.sampler)), start_batch)
            return
        idx = torch.tensor(list(iter(self.sampler)), device=self.x.device)
        if not self.prefetch:
            for b in range(start_batch, self.per_epoch):
                yield (b, *self._slice(idx, b))
            return
        yield from self._prefetched(idx, start_batch)

    def _collated(self, idx: list[int], start: int) -> Iterator[tuple[int, Any, Any]]:
        """Batches of a general dataset: its samples at this rank's indices, collated."""
        todo = [idx[b * self.batch : (b + 1) * self.batch] for b in range(start, self.per_epoch)]
        if self.prefetch:
            batches: Any = DataLoader(
                self.dataset,
                batch_sampler=todo,
                collate_fn=self.collate,
                num_workers=self.prefetch,
                pin_memory=self.cuda,
            )
        else:
            batches = (self.collate([self.dataset[i] for i in sel]) for sel in todo)
        for b, (x, y) in enumerate(batches, start):
            yield b, to_device(x, self.device, self.cuda), to_device(y, self.device, self.cuda)

    def _prefetched(self, idx: torch.Tensor, start: int) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        """Batches gathered into pinned memory and copied by worker threads, in order."""
        todo = list(range(start, self.per_epoch))
        slots: list[queue.Queue] = [queue.Queue(maxsize=2) for _ in range(self.prefetch)]
        stop = threading.Event()

        def work(w: int) -> None:
            stream = torch.cuda.Stream(self.device) if self.cuda else None
            for b in todo[w :: self.prefetch]:
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


def _accuracy(out: Any, y: Any) -> float | None:
    """Share of argmax(outputs, last dim) equal to the targets, when outputs are class
    scores and targets class indices of the same leading shape; else None."""
    if (
        isinstance(out, torch.Tensor)
        and isinstance(y, torch.Tensor)
        and out.dim() >= 2
        and out.is_floating_point()
        and not y.is_floating_point()
        and out.shape[:-1] == y.shape
    ):
        return (out.argmax(-1) == y).float().mean().item()
    return None


@torch.no_grad()  # no autograd graph of the test set (time, and memory on a GPU)
def evaluate(model: torch.nn.Module, task: Task, device: torch.device) -> dict[str, float]:
    """The test set's mean loss, accuracy (where it applies, see Task.metrics) and the task's
    own metrics, each averaged over samples, in batches of `task.eval_batch_size`."""
    was_training = model.training
    model.eval()
    pair = tensor_pair(task.test, task.collate)
    size = max(1, task.eval_batch_size)
    if pair is not None:
        x, y = pair
        batches: Any = ((x[i : i + size], y[i : i + size]) for i in range(0, len(x), size))
    else:
        batches = DataLoader(
            task.test, batch_size=size, shuffle=False, collate_fn=task.collate or default_collate
        )
    sums: dict[str, float] = {}
    count = 0
    for xb, yb in batches:
        xb, yb = to_device(xb, device), to_device(yb, device)
        out = model(xb)
        out = out.float() if isinstance(out, torch.Tensor) else out
        n = batch_len(yb)
        values = {"loss": float(task.loss(out, yb))}
        acc = _accuracy(out, yb)
        if acc is not None:
            values["accuracy"] = acc
        if task.metrics is not None:
            values.update({k: float(v) for k, v in task.metrics(out, yb).items()})
        for k, v in values.items():
            sums[k] = sums.get(k, 0.0) + v * n
        count += n
    model.train(was_training)
    return {k: v / count for k, v in sums.items()}
