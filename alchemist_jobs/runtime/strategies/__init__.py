"""Training paradigms as strategies behind one small interface (see base.py).

The loop calls the same hooks whatever the algorithm; each algorithm's spec class names its
strategy (`strategy` in spec.py), whose module is imported only when chosen.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alchemist_jobs.runtime.strategies.base import Strategy, WorkerContext


def build_strategy(ctx: WorkerContext) -> Strategy:
    module, _, attr = ctx.spec.algorithm.strategy.partition(":")
    return getattr(importlib.import_module(module), attr)(ctx)
