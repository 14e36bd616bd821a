"""`sync`: synchronous SGD with DistributedDataParallel.

(No `from __future__ import annotations` here: DDP checks a comm hook's `bucket`
annotation at registration, so it must be the real `dist.GradBucket` class.)

Gradients are all-reduced in buckets while backward runs. A DDP communication hook times
each bucket's all-reduce and counts its bytes; optional compression (fp16, bf16, PowerSGD)
wraps the same hook. Gradient accumulation skips the all-reduce for all but the last
micro-batch of a step (`no_sync`).
"""

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist

from alchemist_jobs.runtime.strategies.base import Strategy

if TYPE_CHECKING:
    from alchemist_jobs.spec import SyncAlgo


class SyncStrategy(Strategy):
    name = "sync"

    def setup(self, model: torch.nn.Module) -> torch.nn.Module:
        self.model = model
        ctx, algo = (
            self.ctx,
            cast("SyncAlgo", self.ctx.spec.algorithm),
        )  # this strategy is built only for its own algorithm (its spec class names it)
        if ctx.world_size == 1 or not dist.is_initialized():
            return model  # one worker: plain SGD, nothing to synchronise
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        # Gradients as views into the all-reduce buckets: one copy less per step, less memory.
        self.ddp = DDP(model, device_ids=ids, bucket_cap_mb=algo.bucket_mb, gradient_as_bucket_view=True)
        self.ddp.register_comm_hook(self, _make_hook(algo, self))
        self._powersgd_state = None
        return self.ddp

    # -- called from the comm hook ------------------------------------------------------------
    def record(self, t0: "float | Any", nbytes: int, overlaps: bool = True) -> None:
        """One bucket done: `t0` is its host start time, or its start CUDA event on a GPU
        (NCCL completes the future at enqueue: only events see when the bytes moved).
        Buckets overlap the backward still to run; the step waits only after the last
        bucket's start (strategies/comm_stats.py)."""
        if isinstance(t0, float):
            self.ctx.comm.window(t0, time.perf_counter(), overlaps)
        else:
            end = torch.cuda.Event(enable_timing=True)
            end.record()  # on the callback's stream, which waits for the all-reduce
            self.ctx.comm.event_window(t0, end, overlaps)
        self.ctx.comm.allreduce(nbytes, self.ctx.world_size)

    @contextlib.contextmanager
    def accumulate(self, last: bool) -> Iterator[None]:
        ddp = getattr(self, "ddp", None)
        if ddp is None or last:
            yield
        else:
            with ddp.no_sync():  # local accumulation; the last micro-batch all-reduces
                yield

    def after_backward(self, step: int) -> None:
        if getattr(self, "ddp", None) is not None:
            self.ctx.comm.rounds += 1


def _allreduce_hook(strategy: "SyncStrategy", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """All-reduce (mean) one bucket, timing it and counting its bytes."""
    t0 = _start_mark(bucket.buffer())
    tensor = bucket.buffer()
    tensor.div_(strategy.ctx.world_size)
    fut = dist.all_reduce(tensor, async_op=True).get_future()

    def done(f: torch.futures.Future) -> torch.Tensor:
        strategy.record(t0, tensor.numel() * tensor.element_size())
        return f.value()[0]

    return fut.then(done)


def _start_mark(tensor: torch.Tensor) -> "float | Any":
    """Host time, or a CUDA event recorded on the current stream for a GPU bucket."""
    if tensor.is_cuda:
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        return start
    return time.perf_counter()


def _make_hook(algo: Any, strategy: SyncStrategy):
    if algo.compression == "none":
        return _allreduce_hook
    if algo.compression == "fp16":
        return _compressed(torch.float16)
    if algo.compression == "bf16":
        return _compressed(torch.bfloat16)
    if algo.compression == "powersgd":
        return _powersgd_hook(algo)
    raise ValueError(f"unknown compression {algo.compression!r}")


def _compressed(dtype: torch.dtype):
    """All-reduce the bucket in a 16-bit type, then cast back (what torch's fp16/bf16
    wrappers do). Our own wrapper because DDP refuses any hook *named*
    bf16_compress_wrapper_hook without CUDA and NCCL, although gloo reduces bfloat16 on CPU."""

    def hook(strategy: "SyncStrategy", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        full = bucket.buffer()
        bucket.set_buffer(full.to(dtype))
        fut = _allreduce_hook(strategy, bucket)

        def decompress(f: torch.futures.Future) -> torch.Tensor:
            full.copy_(f.value())
            return full

        return fut.then(decompress)

    return hook


def _powersgd_hook(algo: Any):
    """PowerSGD (Vogels et al., 2019) from torch's own hooks, timed and byte-counted.

    PowerSGD all-reduces two low-rank factors P (n x r) and Q (m x r) per compressed matrix
    instead of the n x m gradient; vectors travel uncompressed. Bytes are counted from that
    shape arithmetic, as torch's hook does not report them.

    On gloo the hook completes each bucket before DDP hands it the next: torch's hook issues
    its P and Q all-reduces from completion callbacks, so with several buckets two ranks can
    issue collectives in different orders, which gloo reports as a size mismatch and aborts
    (pytorch/pytorch#58467 records the hook failing its parity test on gloo).
    """
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

    state_box: dict[str, Any] = {}

    def hook(strategy: "SyncStrategy", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        if "state" not in state_box:
            state_box["state"] = ps.PowerSGDState(
                process_group=None,
                matrix_approximation_rank=algo.powersgd_rank,
                start_powerSGD_iter=2,
                min_compression_rate=1.0,
                use_error_feedback=True,
                warm_start=True,
            )
        st = state_box["state"]
        t0 = _start_mark(bucket.buffer())
        compressed = st.iter >= st.start_powerSGD_iter
        nbytes = 0
        for g in bucket.gradients():
            elem = g.element_size()
            if compressed and g.ndim > 1:
                n, m = g.shape[0], g[0].numel()
                r = min(n, m, algo.powersgd_rank)
                nbytes += (n + m) * r * elem if (n + m) * r < n * m else g.numel() * elem
            else:
                nbytes += g.numel() * elem
        fut = ps.powerSGD_hook(st, bucket)
        if dist.get_backend() == "gloo":
            value = fut.wait()
            strategy.record(t0, nbytes, overlaps=False)  # backward waited for it
            ready: torch.futures.Future[torch.Tensor] = torch.futures.Future()
            ready.set_result(value)
            return ready

        def done(f: torch.futures.Future) -> torch.Tensor:
            strategy.record(t0, nbytes)
            return f.value()

        return fut.then(done)

    return hook
