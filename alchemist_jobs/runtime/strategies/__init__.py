"""Training paradigms as strategies behind one small interface (see base.py).

The loop calls the same hooks whatever the algorithm; only `build_strategy` looks at
`spec.algorithm.name`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alchemist_jobs.runtime.strategies.base import Strategy, WorkerContext

# algorithm name -> "module:Class"; modules are imported only when chosen.
REGISTRY = {
    "sync": "alchemist_jobs.runtime.strategies.sync:SyncStrategy",
    "async": "alchemist_jobs.runtime.strategies.async_ps:AsyncStrategy",
    "bmuf": "alchemist_jobs.runtime.strategies.bmuf:BmufStrategy",
    "easgd": "alchemist_jobs.runtime.strategies.easgd:easgd_strategy",  # sync or async variant
}


def build_strategy(ctx: "WorkerContext") -> "Strategy":
    name = ctx.spec.algorithm.name
    try:
        target = REGISTRY[name]
    except KeyError:
        raise NotImplementedError(f"algorithm {name!r} is not available in this build") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)(ctx)
