"""The job's algorithm in your own training loop: two lines in a torchrun-style script.

    import alchemist_jobs

    model, optimizer = alchemist_jobs.prepare(model, optimizer)
    for step, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()                     # the algorithm's exchange happens here

`prepare` reads the job's spec from the run and applies its `algorithm` with the same
strategy objects the built-in trainer uses (runtime/strategies/): sync wraps the model in
DistributedDataParallel (with its compression and bucket options), bmuf and easgd exchange
models every `tau` optimizer steps, async pushes each step's gradients to the job's
parameter servers and loads what they answer. It also starts every rank from rank 0's
model and resumes from the newest checkpoint that `alchemist_jobs.checkpoint.save` wrote.
At the script's end the bootstrap runs the algorithm's last exchange (`finish`) if the
script did not; call `alchemist_jobs.finish()` yourself before evaluating the final model.

Outside an Alchemist run the same script still runs: under plain `torchrun` `prepare`
wraps the model in DDP (starting the process group if the script did not), under plain
`python` it returns both unchanged; `finish`, `checkpoint.save` and `checkpoint.resume` then
do nothing (resume gives {}).
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from alchemist_jobs import environment as E
from alchemist_jobs.rundir import RunDir
from alchemist_jobs.runtime import script_report
from alchemist_jobs.runtime.config_error import fail
from alchemist_jobs.runtime.metrics import WorkerMetrics
from alchemist_jobs.runtime.script_report import not_applied_message
from alchemist_jobs.runtime.step_metrics import StepMetrics
from alchemist_jobs.runtime.strategies import build_strategy
from alchemist_jobs.runtime.strategies.base import WorkerContext
from alchemist_jobs.worker_env import restarts

if TYPE_CHECKING:
    import torch

    from alchemist_jobs.runtime.strategies.base import Strategy
    from alchemist_jobs.runtime.worker_checkpoint import WorkerCheckpoints
    from alchemist_jobs.spec import JobSpec

_prepared: Prepared | None = None


class NotApplied(Exception):
    """A script asked for an algorithm other than sync and never handed its loop to it."""


class Prepared:
    """One worker's loop under the job's strategy: its step count, checkpoints and metrics."""

    def __init__(
        self,
        spec: JobSpec,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        strategy: Strategy,
        checkpoints: WorkerCheckpoints,
        ctx: Any,
        step_metrics: Any,
        reporter: Any,
    ):
        self.spec, self.model, self.optimizer, self.strategy = spec, model, optimizer, strategy
        self.checkpoints, self.ctx, self.step_metrics = checkpoints, ctx, step_metrics
        self.reporter = reporter
        self.step = 0  # optimizer steps taken, over every attempt of the run
        self.resumed: dict[str, Any] = {}  # what the checkpoint resumed from holds (save()'s)
        self.finished = False
        self.train_model: Any = model  # what strategy.setup returned (sync: the DDP module)
        self._last = time.perf_counter()

    def wrap_step(self) -> None:
        """The optimizer's own step, between the strategy's two hooks (on the instance:
        the optimizer stays the user's object, and lr schedulers wrap this step in turn)."""
        inner = self.optimizer.step

        @functools.wraps(inner)
        def step(*args: Any, **kwargs: Any) -> Any:
            if self.finished:
                raise RuntimeError(
                    "alchemist_jobs.finish() was called: the algorithm's last exchange is done, no more steps"
                )
            self.ctx.lr = float(self.optimizer.param_groups[0]["lr"])
            self.strategy.after_backward(self.step)  # gradient exchange (async: PS push/pull)
            out = inner(*args, **kwargs)
            self.step += 1
            self.strategy.after_step(self.step)  # model exchange every tau steps
            self._record()
            return out

        self.optimizer.step = step  # type: ignore[method-assign]

    def _record(self) -> None:
        now = time.perf_counter()
        self.step_metrics.record(
            step_s=now - self._last, data_s=0.0, samples=0, lr=self.ctx.lr, epoch=0.0, comm=self.ctx.comm
        )
        self._last = now
        if self.reporter is not None:
            self.reporter.loop_step(self.step)

    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        self.strategy.finish()
        self.step_metrics.record_final_exchange(self.ctx.comm)


def prepare(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Apply the job's algorithm to a model and its optimizer; returns the module to run
    forward and backward on, and the optimizer whose step() runs the algorithm."""
    import torch.distributed as dist

    global _prepared
    if _prepared is not None:
        raise RuntimeError(
            "alchemist_jobs.prepare() was called already in this process; "
            "accepted: one model and optimizer per worker"
        )
    run_dir = E.RUN_DIR.get()
    world = int(os.environ.get("WORLD_SIZE", 1))
    if run_dir is None:  # plain torchrun: DDP over the group torchrun's variables describe
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            device = next(model.parameters()).device
            if not dist.is_initialized():
                dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
            return DDP(model, device_ids=[device.index] if device.type == "cuda" else None), optimizer
        return model, optimizer  # plain python: one process, nothing to exchange
    _prepared = _prepare_in_run(run_dir, model, optimizer, world)
    return _prepared.train_model, optimizer


def _prepare_in_run(
    run_dir: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer, world: int
) -> Prepared:
    import torch.distributed as dist
    import yaml

    from alchemist_jobs.runtime.worker_checkpoint import WorkerCheckpoints
    from alchemist_jobs.spec import JobSpec

    run = RunDir(run_dir)
    spec = JobSpec.model_validate(yaml.safe_load(run.spec.read_text()))
    if spec.algorithm.micro_batches > 1:  # the trainer's: a loop accumulates as it likes
        _refuse(
            f"algorithm.grad_accum: {spec.algorithm.micro_batches} is the built-in "
            "trainer's; in your own loop accumulate yourself (model.no_sync() under "
            "sync); accepted: grad_accum 1 with alchemist_jobs.prepare"
        )
    rank, local_rank = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    device = next(model.parameters()).device
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    reporter = script_report.current()
    if reporter is not None:
        reporter.applied = True  # its first reported step need not stop the script
    metrics = (
        reporter.metrics
        if reporter is not None
        else WorkerMetrics(
            dict(
                job=spec.name,
                run=run.run_id,
                rank=str(rank),
                node=E.NODE.get() or socket.gethostname(),
                algorithm=spec.algorithm.name,
            ),
            enabled=False,
        )
    )
    ctx = WorkerContext(
        spec=spec,
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        device=device,
        metrics=metrics,
        extra={"run": run},
    )
    strategy = build_strategy(ctx)
    checkpoints = WorkerCheckpoints(run, spec.checkpoint.keep, strategy, rank, world, device.type == "cuda")
    loaded = checkpoints.newest() if spec.checkpoint.resume else None
    if loaded is not None:
        checkpoints.restore_model(model, loaded)
    elif world > 1 and strategy.collective_checkpoint:
        _same_start(model)  # a script seeds as it likes: every rank takes rank 0's model
    train_model = strategy.setup(model)
    strategy.bind_optimizer(optimizer)
    p = Prepared(spec, model, optimizer, strategy, checkpoints, ctx, StepMetrics(metrics), reporter)
    p.train_model = train_model
    if loaded is not None:
        checkpoints.restore_rest(model, optimizer, loaded)
        p.step = int(loaded[1].get("step", loaded[0]))
        p.resumed = dict(loaded[1].get("extra") or {}, step=p.step)
        if checkpoints.writes:
            print(f"alchemist: resumed from checkpoint at step {p.step}, restart {restarts()}", flush=True)
    p.wrap_step()
    return p


def _refuse(message: str) -> None:
    """A spec this loop cannot honour: one line, and an exit no restart repeats."""
    code = fail(message)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _same_start(model: torch.nn.Module) -> None:
    """Every rank's parameters and buffers become rank 0's (DDP does the same at its start)."""
    import torch
    import torch.distributed as dist

    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            dist.broadcast(t.data, src=0)


def current() -> Prepared | None:
    return _prepared


def in_run() -> bool:
    """This process is a worker of an Alchemist run (not plain torchrun or python)."""
    return E.RUN_DIR.get() is not None


def require(what: str) -> Prepared:
    if _prepared is None:
        raise RuntimeError(
            f"alchemist_jobs.{what} needs alchemist_jobs.prepare(model, "
            "optimizer) first, inside an Alchemist run"
        )
    return _prepared


def finish() -> None:
    """The algorithm's last exchange: every rank then holds the model to evaluate and save
    (bmuf: the global model; easgd: the centre; async: the servers' final model). Called by
    the bootstrap at the script's end if the script did not; no more steps afterwards."""
    if _prepared is not None:
        _prepared.finish()


@contextlib.contextmanager
def evaluation_model() -> Iterator[torch.nn.Module]:
    """The model the algorithm would hand out now (bmuf: the last block's global model;
    easgd: the centre), for an evaluation mid-run; the local one comes back afterwards."""
    p = require("evaluation_model()")
    with p.strategy.evaluation_model() as m:
        yield m


def finish_at_exit() -> None:
    """The bootstrap, after the script returned: finish a prepared loop and close its
    connections; refuse a non-sync algorithm that the script never applied."""
    if _prepared is not None:
        try:
            _prepared.finish()
        finally:
            _prepared.strategy.close()
        return
    algorithm = _spec_algorithm()
    reporter = script_report.current()
    if reporter is not None and reporter.applied:  # applied another way (jax_averaging)
        return
    if algorithm not in (None, "sync"):
        raise NotApplied(not_applied_message(algorithm, _target()))


def _spec_algorithm() -> str | None:
    """The run's algorithm name, read without torch (this runs for TF and JAX scripts too)."""
    import yaml

    run_dir = E.RUN_DIR.get()
    try:
        raw = yaml.safe_load((run_dir / "spec.yaml").read_text()) if run_dir else None
    except (OSError, yaml.YAMLError):
        return None  # no spec to hold the script to (a bare bootstrap, as in its tests)
    algorithm = raw.get("algorithm") if isinstance(raw, dict) else None
    return str(algorithm.get("name", "sync")) if isinstance(algorithm, dict) else None


def _target() -> str:
    return sys.argv[0] if sys.argv and sys.argv[0] else "the script"
