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

Strategies count their own communication in `ctx.comm` (bytes, spans in flight, rounds;
strategies/comm_stats.py), which the loop turns into the contract's metrics: the seconds each
step waited for communication, and apart from them the seconds it ran hidden behind compute.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alchemist_jobs.runtime.strategies.comm_stats import CommStats  # noqa: F401 (re-export)

if TYPE_CHECKING:
    import torch

    from alchemist_jobs.runtime.metrics import WorkerMetrics
    from alchemist_jobs.spec import JobSpec


@dataclass
class WorkerContext:
    """Everything a strategy may need about its process and its job."""

    spec: JobSpec
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    metrics: WorkerMetrics
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
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None

    def bind_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """The local optimizer, for strategies that reset its state (bmuf)."""
        self.optimizer = optimizer

    def setup(self, model: torch.nn.Module) -> torch.nn.Module:
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
    def evaluation_model(self) -> Iterator[torch.nn.Module]:
        """The model to evaluate mid-run (learning curves): by default the local one."""
        assert self.model is not None  # setup() ran first
        yield self.model

    def state_dict(self) -> dict[str, Any]:
        """Strategy state to checkpoint (block momentum, centre variable...)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        """Release connections and threads; called on every exit path."""
