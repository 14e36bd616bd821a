"""Measure one worker's cost for `alchemist plan`: forward, backward and optimizer seconds per
step, when in backward each of DDP's buckets is ready, the local arithmetic of an exchange
(the algorithm's `local_update`), and the bytes one exchange moves.

It runs the job's real model, data and optimizer on one worker, with the threads a worker
gets, without communication. Emulated nodes (`concurrent=k`) share this machine's processors:
k copies run at once, start each lockstep period together, and the times are scaled by the
slowest copy's span over their mean. Only built-in tasks can be profiled; a script's cost is
given with `--step-ms` and `--model-mb`.
"""

from __future__ import annotations

import importlib
import itertools
import multiprocessing as mp
import queue
import statistics
import time
from pathlib import Path
from typing import Any

from alchemist_jobs.errors import UserError
from alchemist_jobs.planner.model import MIB, Profile, ddp_buckets, uniform_buckets
from alchemist_jobs.spec import JobSpec
from alchemist_jobs.worker_env import threads_per_worker

_BYTES_PER_ELEMENT = {"none": None, "fp16": 2, "bf16": 2}


def exchange_bytes(spec: JobSpec, params: int, element_size: int) -> int:
    """Bytes of one exchange: every parameter, at the precision the algorithm sends it in
    (sync: `compression`; bmuf/easgd: `exchange_dtype`)."""
    compression = spec.algorithm.wire_format
    if compression not in _BYTES_PER_ELEMENT:
        raise UserError(
            f"algorithm.compression={compression!r}: the plan models none, fp16 and "
            "bf16 (PowerSGD's volume depends on the rank and the layer shapes)"
        )
    return params * (_BYTES_PER_ELEMENT[compression] or element_size)


def bucket_cap_bytes(spec: JobSpec) -> int:
    """DDP's bucket limit as the sync strategy builds it: bucket_cap_mb=algorithm.bucket_mb,
    which (given explicitly) is also the first bucket's limit."""
    return int(spec.algorithm.gradient_bucket_mb * MIB)


def profile_spec(
    spec: JobSpec,
    data_root: Path,
    steps: int = 200,
    warmup: int = 20,
    concurrent: int = 1,
    code_dir: Path | None = None,
) -> Profile:
    """Time `steps` real training steps of the spec's model on this machine, in `concurrent`
    processes at once (emulated nodes sharing it), and average them. `code_dir`: where a
    `task.entry` file lies (the spec's directory)."""
    if not spec.task.trained_by_alchemist:
        raise UserError(
            f"task: a {spec.task.kind} task runs its own loop, which `alchemist "
            "plan` cannot profile; give its cost with --step-ms MS and --model-mb MB, "
            "or make it a task.entry (docs/bring-your-model.md)"
        )
    if steps < 1:
        raise UserError(f"--profile-steps {steps}: expected a whole number of at least 1")
    if concurrent < 1:
        raise ValueError(f"concurrent={concurrent}: expected at least 1 process")
    if concurrent == 1:
        runs = [_measure(spec, data_root, steps, warmup, code_dir=code_dir)]
    else:
        runs = _measure_concurrently(spec, data_root, steps, warmup, concurrent, code_dir)
    return _combine(spec, runs, steps, concurrent)


def slowest_copy_factor(runs: list[dict[str, Any]]) -> float:
    """How much longer the slowest of the copies takes than their mean: per lockstep period,
    from the first copy's start to the last copy's end (one clock: perf_counter is the
    machine's monotonic clock), against the mean compute of a copy's steps in it."""
    if len(runs) < 2:
        return 1.0
    period = runs[0]["period"]
    spans = [
        max(r["spans"][j][1] for r in runs) - min(r["spans"][j][0] for r in runs)
        for j in range(len(runs[0]["spans"]))
    ]
    busy = statistics.fmean(r["forward"] + r["backward"] + r["optimizer"] for r in runs)
    return statistics.fmean(spans) / period / busy if busy > 0 else 1.0


def _combine(spec: JobSpec, runs: list[dict[str, Any]], steps: int, concurrent: int) -> Profile:
    # Every worker waits for the slowest at each exchange: its compute is what a step costs.
    slowest = slowest_copy_factor(runs)
    mean = lambda key: statistics.fmean(r[key] for r in runs)  # noqa: E731
    first = runs[0]
    # Gradients in the order backward produces them (the mean ready time over every copy).
    ready = [statistics.fmean(r["ready"][i] for r in runs) for i in range(len(first["ready"]))]
    order = sorted(range(len(ready)), key=lambda i: ready[i])
    full = sum(first["grad_bytes"])
    nbytes = exchange_bytes(spec, first["params"], first["element"])
    ratio = nbytes / full if full else 1.0  # compression sends a 16-bit copy of each bucket
    buckets = ddp_buckets(
        [(first["grad_bytes"][i], min(1.0, ready[i])) for i in order], bucket_cap_bytes(spec)
    )
    period = first["period"]
    where = (
        f"profiled {steps} steps on this machine"
        if concurrent == 1
        else f"profiled {steps} steps in each of {concurrent} processes at once on this machine "
        f"(emulated nodes sharing its processors), all starting every {period} step(s) "
        f"together as after an exchange; the slowest sets the pace ({slowest:.2f}x their "
        f"mean)"
    )
    return Profile(
        forward_s=mean("forward") * slowest,
        backward_s=mean("backward") * slowest,
        optimizer_s=mean("optimizer") * slowest,
        exchange_local_s=mean("exchange_local"),
        exchange_bytes=nbytes,
        batch_per_worker=spec.hyper.batch_size,
        buckets=tuple((int(b * ratio), r) for b, r in buckets),
        source=where,
    )


def _exchange_arithmetic(spec: JobSpec, params: list, optimizer: Any, world: int) -> Any:
    """A function doing one exchange's local work (not its all-reduce) on `params`, as the
    algorithm's strategy does it (`local_update` in spec.py); None for algorithms without one."""
    if spec.algorithm.local_update is None:
        return None
    module, _, attr = spec.algorithm.local_update.partition(":")
    return getattr(importlib.import_module(module), attr)(spec.algorithm, params, optimizer, world)


class _Worker:
    """One profiled worker: the job's model, data and optimizer, stepped and timed."""

    def __init__(self, spec: JobSpec, data_root: Path, world: int, code_dir: Path | None = None):
        import torch

        from alchemist_jobs.runtime.batches import Batches
        from alchemist_jobs.runtime.optim import build_optimizer
        from alchemist_jobs.runtime.tasks import load_task

        torch.set_num_threads(threads_per_worker(spec.resources.cpu, spec.procs_per_node))
        self.task = load_task(spec, data_root, code_dir=code_dir)
        self.model = self.task.model
        self.params = list(self.model.parameters())
        self.optimizer = (
            self.task.optimizer(self.params, spec.hyper)
            if self.task.optimizer
            else build_optimizer(spec.hyper, self.params)
        )
        self.accum = spec.algorithm.micro_batches
        self.tau = spec.algorithm.steps_per_exchange
        self.exchange = _exchange_arithmetic(spec, self.params, self.optimizer, world)
        batches = Batches(
            self.task,
            spec.hyper.batch_size,
            0,
            1,
            spec.hyper.seed,
            torch.device("cpu"),
            spec.data.loader_workers,
        )
        self.feed = (b for epoch in itertools.count() for b in batches.epoch(epoch))
        self.stamps = [0.0] * len(self.params)  # when backward accumulated each gradient
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(
                lambda _p, i=i: self.stamps.__setitem__(i, time.perf_counter())
            )
        self.fwd = self.bwd = self.opt = self.exch = 0.0
        self.exchanges = 0
        self.ready = [0.0] * len(self.params)

    def step(self, n: int, timed: bool) -> float:
        """Optimizer step `n` (1-based), then the exchange's local work every tau steps.
        Returns when the step's own compute ended (before the exchange)."""
        t0 = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        f = b = 0.0
        for _ in range(self.accum):
            ta = time.perf_counter()
            _, x, y = next(self.feed)
            loss = self.task.loss(self.model(x), y) / self.accum
            tb = time.perf_counter()
            loss.backward()
            tc = time.perf_counter()
            f, b = f + tb - ta, b + tc - tb
        t2 = time.perf_counter()
        self.optimizer.step()
        t3 = time.perf_counter()
        if self.exchange is not None and self.tau and n % self.tau == 0:
            self.exchange()
            if timed:
                self.exch += time.perf_counter() - t3
                self.exchanges += 1
        if timed:
            self.fwd, self.bwd, self.opt = self.fwd + t2 - t0 - b, self.bwd + b, self.opt + t3 - t2
            # Ready time of each gradient in the step's backward (earlier micro-batches first).
            before = b - (tc - tb)
            for i, s in enumerate(self.stamps):
                self.ready[i] += (before + s - tb) / b if b > 0 else 1.0
        return t3

    def result(self, steps: int) -> dict[str, Any]:
        return dict(
            forward=self.fwd / steps,
            backward=self.bwd / steps,
            optimizer=self.opt / steps,
            exchange_local=self.exch / self.exchanges if self.exchanges else 0.0,
            ready=[r / steps for r in self.ready],
            grad_bytes=[p.numel() * p.element_size() for p in self.params],
            params=sum(p.numel() for p in self.params),
            element=self.params[0].element_size(),
        )


def lockstep_period(spec: JobSpec) -> int:
    """Steps between the points where every worker waits for all the others: each step for
    sync (the gradient all-reduce), each block of tau steps for bmuf/easgd."""
    return max(1, spec.algorithm.steps_per_exchange)


def _measure(
    spec: JobSpec,
    data_root: Path,
    steps: int,
    warmup: int,
    together: Any = None,
    copies: int = 1,
    code_dir: Path | None = None,
) -> dict[str, Any]:
    """One worker's measurements over whole lockstep periods. With `together` (a barrier
    shared by the copies) every period starts when all copies are there, as after an
    exchange, and its (start, end) times are returned for the slowest-copy figure."""
    worker = _Worker(spec, data_root, max(2, copies), code_dir)
    period = lockstep_period(spec)
    warmup = -(-warmup // period) * period  # whole periods: exchanges fall at period ends
    for n in range(1, warmup + 1):
        worker.step(n, timed=False)
    periods = max(1, steps // period)
    spans, n = [], warmup
    for _ in range(periods):
        if together is not None:
            together.wait()
        t0 = end = time.perf_counter()
        for _ in range(period):
            n += 1
            end = worker.step(n, timed=True)
        spans.append((t0, end))
    return dict(worker.result(periods * period), spans=spans, period=period)


def _child(
    spec_json: dict,
    data_root: str,
    steps: int,
    warmup: int,
    together: Any,
    copies: int,
    results: Any,
    code_dir: str | None,
) -> None:
    spec = JobSpec.model_validate(spec_json)
    try:
        results.put(
            _measure(
                spec, Path(data_root), steps, warmup, together, copies, Path(code_dir) if code_dir else None
            )
        )
    except BaseException as e:  # the parent must not wait for a result that never comes
        results.put(dict(error=f"{type(e).__name__}: {e}"))
        together.abort()
        raise


def _measure_concurrently(
    spec: JobSpec, data_root: Path, steps: int, warmup: int, copies: int, code_dir: Path | None = None
) -> list[dict[str, Any]]:
    from alchemist_jobs.runtime.tasks import load_task

    load_task(spec, data_root, code_dir=code_dir)  # data prepared once, not raced by copies
    ctx = mp.get_context("spawn")
    together, results = ctx.Barrier(copies), ctx.Queue()
    procs = [
        ctx.Process(
            target=_child,
            daemon=True,
            args=(
                spec.model_dump(mode="json"),
                str(data_root),
                steps,
                warmup,
                together,
                copies,
                results,
                str(code_dir) if code_dir else None,
            ),
        )
        for _ in range(copies)
    ]
    for p in procs:
        p.start()
    runs: list[dict[str, Any]] = []
    try:
        while len(runs) < copies:
            try:
                runs.append(results.get(timeout=5))
            except queue.Empty:
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if dead:  # died without a word (killed, out of memory)
                    raise RuntimeError(f"profile copy exited with {dead[0]}") from None
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        raise RuntimeError(f"profile copy failed: {errors[0]}")
    return runs


def given_profile(
    spec: JobSpec, step_ms: float, model_mb: float, backward_fraction: float = 2 / 3
) -> Profile:
    """A profile from figures the user measured elsewhere (a script task, a GPU step)."""
    if step_ms <= 0 or model_mb <= 0:
        raise UserError(f"--step-ms {step_ms} / --model-mb {model_mb}: expected positive numbers")
    step = step_ms / 1000.0
    nbytes = int(model_mb * 1e6)
    return Profile(
        forward_s=step * (1 - backward_fraction),
        backward_s=step * backward_fraction,
        exchange_bytes=nbytes,
        batch_per_worker=spec.hyper.batch_size,
        buckets=uniform_buckets(nbytes, bucket_cap_bytes(spec)),
        source=f"given: {step_ms:g} ms per step, {model_mb:g} MB exchanged "
        f"(backward taken as {backward_fraction:.0%} of the step, its "
        f"gradients ready at an even rate)",
    )
