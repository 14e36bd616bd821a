"""Checkpoints for a JAX script: orbax's `CheckpointManager` at the run's place, every
`checkpoint.every_steps` steps, the newest `checkpoint.keep` kept, the newest restored when
the run restarts.

    import jax
    from alchemist_jobs import jax_checkpoint

    jax.distributed.initialize()                       # first: orbax's barriers use it
    state = {"params": params, "opt": opt_state}       # any pytree of arrays
    checkpoints = jax_checkpoint.manager()
    start, state = checkpoints.restore(state)          # (0, state) on a fresh start
    for step in range(start + 1, steps + 1):
        state = train_step(state, ...)
        checkpoints.save(step, state)                  # writes only when the step is due
    checkpoints.close()                                # waits for the last write

Every process calls `save` and `restore` at the same step (orbax writes each process's
shards and process 0 the metadata, between barriers). `restore(like)` gives arrays with
the shardings of `like`'s, so a restarted group gets back the layout it trains with. Writes
are orbax's asynchronous ones, committed by a rename: a worker killed mid-write leaves the
previous checkpoint the newest. Outside an Alchemist run, `manager(directory=...)` writes
there with the spec's defaults (every 100 steps, 3 kept); with no directory it writes and
restores nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from alchemist_jobs.checkpoint_policy import CheckpointPolicy, policy

T = TypeVar("T")


class JaxCheckpoints:
    """One process's view of the run's JAX checkpoints (made by `manager`)."""

    def __init__(self, directory: str | Path | None = None):
        self.policy: CheckpointPolicy = policy("jax", directory)
        self.manager: Any = None
        import orbax.checkpoint as ocp  # orbax and tensorstore: only when a script makes one

        self._ocp = ocp
        if self.policy.directory is not None:
            self.manager = ocp.CheckpointManager(
                self.policy.directory.absolute(),
                options=ocp.CheckpointManagerOptions(max_to_keep=self.policy.keep, create=True),
            )

    def restore(self, like: T) -> tuple[int, T]:
        """(step, state) of the run's newest checkpoint, its arrays laid out as `like`'s;
        (0, like) when there is none, `checkpoint.resume` is false, or no directory."""
        if self.manager is None or not self.policy.resume:
            return 0, like
        step = self.manager.latest_step()
        if step is None:
            return 0, like
        state = self.manager.restore(step, args=self._ocp.args.StandardRestore(like))
        print(f"alchemist: resumed from checkpoint at step {step}", flush=True)
        return int(step), state

    def save(self, step: int, state: Any, force: bool = False) -> bool:
        """Write `state` (a pytree of arrays) for `step` if it is due (every
        `checkpoint.every_steps`) or `force`; older ones past `checkpoint.keep` are deleted."""
        if self.manager is None or not (force or self.policy.due(step)):
            return False
        # Our interval, not orbax's own policy (which also saves the first step it sees).
        return bool(self.manager.save(step, args=self._ocp.args.StandardSave(state), force=True))

    def wait(self) -> None:
        """Block until the writes in flight are committed (a later restart sees them)."""
        if self.manager is not None:
            self.manager.wait_until_finished()

    def close(self) -> None:
        """Wait for the last write to be committed; call before the script ends."""
        if self.manager is not None:
            self.manager.wait_until_finished()
            self.manager.close()


def manager(directory: str | Path | None = None) -> JaxCheckpoints:
    """The run's JAX checkpoints (see the module's docstring)."""
    return JaxCheckpoints(directory)
