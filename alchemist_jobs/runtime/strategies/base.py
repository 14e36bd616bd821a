"""The strategy interface: what a training paradigm does after backward and every tau steps.

The training loop (runtime/trainer.py) is the same for every algorithm:

    strategy.setup(model)                 -> the module to run forward/backward on
    for each optimizer step:
        with strategy.accumulate(micro):  gradients of one micro-batch (no sync but the last)
            loss.backward()
        strategy.after_backward(step)     exchange gradients (async: push to / pull from PS)
        optimizer.step()
        strategy.after_step(step)         exchange models every tau steps (bmuf, easgd)
    strategy.finish()                     leave every rank with the model to evaluate and save

`ctx.lr` holds the current step's learning rate. With one worker every strategy is plain
local SGD: there is nothing to exchange.

Strategies count their own communication in `ctx.comm` (bytes, seconds, rounds), which the
loop turns into the contract's metrics. On a GPU, collectives return (and NCCL completes
their futures) when they are enqueued, so host clocks read near zero: their time is taken
with CUDA events on the streams that run them and read once per step in close_window().
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    import torch

    from alchemist_jobs.runtime.metrics import WorkerMetrics
    from alchemist_jobs.spec import JobSpec


@dataclass
class CommStats:
    """Running totals of this process's communication; the loop reads deltas per step.

    Collectives count what a ring all-reduce moves: 2*(n-1)/n times the tensor size in
    each direction, the same accounting for every collective strategy so their traffic
    compares. Parameter-server traffic counts the bytes actually sent and received.
    """

    sent_bytes: float = 0.0
    received_bytes: float = 0.0
    seconds: float = 0.0
    rounds: int = 0
    _window_start: float | None = None
    _window_end: float | None = None
    # (start, end) CUDA events of collectives on a GPU, in issue order; read in close_window
    _events: list = field(default_factory=list)

    def allreduce(self, nbytes: int, world: int) -> None:
        moved = 2.0 * (world - 1) / world * nbytes if world > 1 else 0.0
        self.sent_bytes += moved
        self.received_bytes += moved

    def payload(self, sent: int, received: int) -> None:
        """Bytes of a point-to-point exchange (parameter-server traffic), as sent."""
        self.sent_bytes += sent
        self.received_bytes += received

    def window(self, start: float, end: float) -> None:
        """Record one exchange in flight from start to end (overlapping ones merge)."""
        self._window_start = start if self._window_start is None else min(self._window_start, start)
        self._window_end = end if self._window_end is None else max(self._window_end, end)

    def event_window(self, start: Any, end: Any) -> None:
        """Record one exchange on the GPU between two recorded CUDA events."""
        self._events.append((start, end))

    def close_window(self) -> float:
        """Seconds of the merged window since the last call; added to `seconds`."""
        spent = 0.0
        if self._window_start is not None:
            spent = max(0.0, self._window_end - self._window_start)
            self._window_start = self._window_end = None
        if self._events:
            spent += events_span(self._events)
            self._events = []
        self.seconds += spent
        return spent

    @contextlib.contextmanager
    def timed(self, device: "torch.device | None" = None) -> Iterator[None]:
        """Time the block: host clock, or CUDA events where `device` is a GPU (the block
        enqueues work that its stream finishes later)."""
        if device is not None and device.type == "cuda":
            import torch

            start = torch.cuda.Event(enable_timing=True)
            start.record()
            try:
                yield
            finally:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                self.event_window(start, end)
            return
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.window(t0, time.perf_counter())


def events_span(events: list[tuple[Any, Any]]) -> float:
    """Seconds from the first start to the latest end of (start, end) CUDA events in issue
    order (overlapping exchanges merge, as on the host clock). Waits for the ends."""
    first = events[0][0]
    latest = 0.0
    for _start, end in events:
        end.synchronize()
        latest = max(latest, first.elapsed_time(end))  # milliseconds
    return latest / 1000.0


@dataclass
class WorkerContext:
    """Everything a strategy may need about its process and its job."""

    spec: "JobSpec"
    rank: int
    world_size: int
    local_rank: int
    device: "torch.device"
    metrics: "WorkerMetrics"
    comm: CommStats = field(default_factory=CommStats)
    # The current step's learning rate, set by the loop: a strategy that applies updates
    # elsewhere (async: the parameter server) sends it along with the gradient.
    lr: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class Strategy:
    """Base class: plain local SGD with no communication (what every strategy reduces to
    with one worker). Subclasses override the hooks they need."""

    name = "base"
    # True when every rank takes part in each checkpoint (a collective gather); a strategy
    # whose workers do not move in lock-step (async) sets False, and each worker then writes
    # its own checkpoint (position, RNG, its model) when it gets there.
    collective_checkpoint = True
    # True when all ranks hold the same model after finish() (what tests check for sync).
    replicas_identical = True

    def __init__(self, ctx: WorkerContext):
        self.ctx = ctx
        self.model: "torch.nn.Module | None" = None
        self.optimizer: "torch.optim.Optimizer | None" = None

    def bind_optimizer(self, optimizer: "torch.optim.Optimizer") -> None:
        """The local optimizer, for strategies that reset its state (bmuf)."""
        self.optimizer = optimizer

    def setup(self, model: "torch.nn.Module") -> "torch.nn.Module":
        """Take the freshly built (and possibly checkpoint-restored) model; return the
        module the loop runs forward/backward on."""
        self.model = model
        return model

    @contextlib.contextmanager
    def accumulate(self, last: bool) -> Iterator[None]:
        """Context for one micro-batch's backward; `last` is the step's final micro-batch."""
        yield

    def after_backward(self, step: int) -> None:
        """Gradients are ready; the optimizer has not stepped yet."""

    def after_step(self, step: int) -> None:
        """The optimizer stepped; `step` is the number of steps done (1-based)."""

    def finish(self) -> None:
        """Training is over: leave the model every rank should evaluate and save."""

    @contextlib.contextmanager
    def evaluation_model(self) -> Iterator["torch.nn.Module"]:
        """The model to evaluate mid-run (learning curves): by default the local one."""
        yield self.model

    def state_dict(self) -> dict[str, Any]:
        """Strategy state to checkpoint (block momentum, centre variable...)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        """Release connections and threads; called on every exit path."""
