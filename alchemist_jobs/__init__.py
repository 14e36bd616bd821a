"""Alchemist job library: job specs, backends (local, Kubernetes) and the worker runtime.

What a user's own code calls (docs/bring-your-model.md), imported on first use so that
`import alchemist_jobs` stays cheap:

- `prepare(model, optimizer)`, `finish()`, `evaluation_model()`: the job's algorithm in
  your own loop (own_loop.py); `checkpoint.save()` / `checkpoint.resume()` beside them.
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


def __getattr__(name: str) -> Any:
    if name == "checkpoint":
        return importlib.import_module("alchemist_jobs.checkpoint")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'alchemist_jobs' has no attribute {name!r}")


__all__ = ["prepare", "finish", "evaluation_model", "checkpoint", "Task", "TaskContext", "report"]
