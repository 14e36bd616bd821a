"""Alchemist job library: job specs, backends (local, Kubernetes) and the worker runtime.

What a user's own code calls (docs/bring-your-model.md), imported on first use so that
`import alchemist_jobs` stays cheap:

- `prepare(model, optimizer)`, `finish()`, `evaluation_model()`: the job's algorithm in
  your own loop (own_loop.py); `checkpoint.save()` / `checkpoint.resume()` beside them.
- `tf_checkpoint.manager(ckpt)`, `jax_checkpoint.manager()`: a TensorFlow or JAX script's
  checkpoints at the run's place, every `checkpoint.every_steps`, `checkpoint.keep` kept.
- `Task`, `TaskContext`: what a `task.entry` function returns and receives (task.py).
- `report(step=..., loss=..., **metrics)`: progress and metrics of a script (report.py).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "prepare": "alchemist_jobs.own_loop",
    "finish": "alchemist_jobs.own_loop",
    "evaluation_model": "alchemist_jobs.own_loop",
    "Task": "alchemist_jobs.task",
    "TaskContext": "alchemist_jobs.task",
    "report": "alchemist_jobs.report",
}


# Modules a script reaches as attributes (alchemist_jobs.checkpoint.save()).
_SUBMODULES = ("checkpoint", "tf_checkpoint", "jax_checkpoint")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"alchemist_jobs.{name}")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'alchemist_jobs' has no attribute {name!r}")


__all__ = [
    "prepare",
    "finish",
    "evaluation_model",
    "checkpoint",
    "tf_checkpoint",
    "jax_checkpoint",
    "Task",
    "TaskContext",
    "report",
]
