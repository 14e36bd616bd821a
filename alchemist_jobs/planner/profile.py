"""Measure one worker's cost for `alchemist plan`: forward and backward time per step at the
spec's per-worker batch, and the bytes one exchange of the model moves.

The profile runs the job's real model, data and optimizer in this process, for a few hundred
steps on one worker (no process group, no communication), with as many threads as one worker
gets (`resources.cpu` shared by the node's workers, as the launcher sets OMP_NUM_THREADS). The first steps warm up the
allocator and are not timed. Only the built-in tasks can be profiled here: a `script:` task's
cost is given with `--step-ms` and `--model-mb` instead.
"""

from __future__ import annotations

import time
from pathlib import Path

from alchemist_jobs.errors import UserError
from alchemist_jobs.planner.model import Profile
from alchemist_jobs.spec import JobSpec

_BYTES_PER_ELEMENT = {"none": None, "fp16": 2, "bf16": 2}


def exchange_bytes(spec: JobSpec, params: int, element_size: int) -> int:
    """Bytes of one exchange: every parameter, at the precision the algorithm sends it in."""
    compression = getattr(spec.algorithm, "compression", "none")
    if compression not in _BYTES_PER_ELEMENT:
        raise UserError(f"algorithm.compression={compression!r}: the plan models none, fp16 and "
                        "bf16 (PowerSGD's volume depends on the rank and the layer shapes)")
    return params * (_BYTES_PER_ELEMENT[compression] or element_size)


def profile_spec(spec: JobSpec, data_root: Path, steps: int = 200, warmup: int = 20) -> Profile:
    """Time `steps` real training steps of the spec's model on this machine."""
    if spec.task.builtin is None:
        raise UserError(f"task: a script task cannot be profiled by `alchemist plan`; give its "
                        f"cost with --step-ms MS and --model-mb MB (task.script={spec.task.script!r})")
    if steps < 1:
        raise UserError(f"--profile-steps {steps}: expected a whole number of at least 1")
    import torch

    from alchemist_jobs.runtime.optim import build_optimizer
    from alchemist_jobs.runtime.tasks import build_model, load_task_data

    from alchemist_jobs.worker_env import threads_per_worker

    torch.set_num_threads(threads_per_worker(spec.resources.cpu, spec.procs_per_node))
    torch.manual_seed(spec.hyper.seed)
    data = load_task_data(spec, data_root)
    model = build_model(spec, data)
    optimizer = build_optimizer(spec.hyper, model.parameters())
    loss_fn = torch.nn.CrossEntropyLoss()
    batch = spec.hyper.batch_size
    n = data.x_train.shape[0]
    fwd = bwd = 0.0
    for i in range(warmup + steps):
        start = (i * batch) % max(n - batch, 1)
        x, y = data.x_train[start:start + batch], data.y_train[start:start + batch]
        t0 = time.perf_counter()
        loss = loss_fn(model(x), y)
        t1 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        t2 = time.perf_counter()
        if i >= warmup:
            fwd += t1 - t0
            bwd += t2 - t1
    params = sum(p.numel() for p in model.parameters())
    element = next(model.parameters()).element_size()
    return Profile(forward_s=fwd / steps, backward_s=bwd / steps,
                   exchange_bytes=exchange_bytes(spec, params, element),
                   batch_per_worker=batch, source=f"profiled {steps} steps on this machine")


def given_profile(spec: JobSpec, step_ms: float, model_mb: float,
                  backward_fraction: float = 2 / 3) -> Profile:
    """A profile from figures the user measured elsewhere (a script task, a GPU step)."""
    if step_ms <= 0 or model_mb <= 0:
        raise UserError(f"--step-ms {step_ms} / --model-mb {model_mb}: expected positive numbers")
    step = step_ms / 1000.0
    return Profile(forward_s=step * (1 - backward_fraction), backward_s=step * backward_fraction,
                   exchange_bytes=int(model_mb * 1e6), batch_per_worker=spec.hyper.batch_size,
                   source=f"given: {step_ms:g} ms per step, {model_mb:g} MB exchanged "
                          f"(backward taken as {backward_fraction:.0%} of the step)")
