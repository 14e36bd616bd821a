"""Learning curves off the training path: rank 0 writes the model it would hand out now
(`curve.every_steps`) with its wall time; they are evaluated afterwards, in another process,
so evaluation never holds up the training ranks. What the run pays is a copy of the
parameters and one file write per snapshot (counted in the result as `curve_snapshot_s`).

    snapshots/step-<S>.pt   {"step", "wall_s", "params": flat fp32 vector}
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from alchemist_jobs.rundir import RunDir


def snapshot_dir(run: RunDir) -> Path:
    return run.path / "snapshots"


def write_snapshot(run: RunDir, step: int, wall_s: float, model: torch.nn.Module) -> None:
    """The model's parameters at `step`, written atomically."""
    d = snapshot_dir(run)
    d.mkdir(exist_ok=True)
    vec = parameters_to_vector(model.parameters()).detach().float().cpu()
    final = d / f"step-{step:08d}.pt"
    tmp = d / f".{final.name}.{os.getpid()}.tmp"
    torch.save({"step": step, "wall_s": wall_s, "params": vec}, tmp)
    os.replace(tmp, final)


def evaluate_snapshots(run: RunDir, shared_root: Path) -> list[dict[str, Any]]:
    """(step, wall_s, loss, accuracy and the task's metrics) of every snapshot of `run`, in
    step order. An entry task is built from the run's own copy of its code."""
    import yaml

    from alchemist_jobs.runtime.batches import evaluate
    from alchemist_jobs.runtime.tasks import load_task
    from alchemist_jobs.spec import JobSpec

    spec = JobSpec.model_validate(yaml.safe_load(run.spec.read_text()))
    code = run.path / "code"  # the run's copy of the spec's directory (where entries live)
    task = load_task(spec, shared_root, code_dir=code if code.is_dir() else None)
    points = []
    for f in sorted(snapshot_dir(run).glob("step-*.pt")):
        snap = torch.load(f, weights_only=True)
        with torch.no_grad():
            vector_to_parameters(snap["params"], task.model.parameters())
        test = evaluate(task.model, task, torch.device("cpu"))
        points.append(
            dict(
                step=snap["step"],
                wall_s=snap["wall_s"],
                loss=test["loss"],
                accuracy=test.get("accuracy"),
                test=test,
            )
        )
    return points


def time_to_target(points: list[dict[str, float]], target: float) -> float | None:
    """Wall seconds at which the curve first reaches `target`, linear between the two
    evaluations around the crossing (None: never reached)."""
    prev = None
    for p in points:
        if p["accuracy"] >= target:
            if prev is None:
                return p["wall_s"]
            frac = (target - prev["accuracy"]) / (p["accuracy"] - prev["accuracy"])
            return prev["wall_s"] + frac * (p["wall_s"] - prev["wall_s"])
        prev = p
    return None
