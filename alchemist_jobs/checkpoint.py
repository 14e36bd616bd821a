"""Checkpoints for your own loop: the model, optimizer and algorithm state of
`alchemist_jobs.prepare`, written like the built-in trainer's (atomic, SHA-256 checked,
the newest `checkpoint.keep` kept, on the shared file system).

    model, optimizer = alchemist_jobs.prepare(model, optimizer)
    start = alchemist_jobs.checkpoint.resume().get("step", 0)   # 0 on a fresh start
    for step in range(start, steps):
        ...
        optimizer.step()
        if (step + 1) % 50 == 0:
            alchemist_jobs.checkpoint.save(epoch=epoch)        # every rank, same step

`prepare` itself loads the newest checkpoint (model, optimizer, algorithm state, random
generators) when the run restarts; `resume()` tells the loop where it was. With sync,
bmuf and easgd every rank calls `save()` at the same step (it gathers every rank's part);
with async each worker saves on its own. Outside an Alchemist run both do nothing, so the
script still runs with plain torchrun or python.
"""

from __future__ import annotations

from typing import Any

from alchemist_jobs.own_loop import in_run, require


def save(**extra: Any) -> None:
    """Checkpoint the prepared model, optimizer and algorithm at the current optimizer step,
    with `extra` (numbers, strings, tensors: what `resume()` gives back). Outside an
    Alchemist run (plain torchrun or python) it does nothing."""
    if not in_run():
        return
    p = require("checkpoint.save()")
    p.checkpoints.save(
        p.step, p.model, p.optimizer, dict(step=p.step, extra=extra, config=p.spec.model_dump(mode="json"))
    )


def resume() -> dict[str, Any]:
    """What the checkpoint this attempt resumed from holds: {"step": optimizer steps done,
    **what save() was given}; {} on a fresh start or outside an Alchemist run."""
    if not in_run():
        return {}
    return dict(require("checkpoint.resume()").resumed)
