"""Checkpoints for a TensorFlow script: `tf.train.CheckpointManager` at the run's place, every
`checkpoint.every_steps` steps, the newest `checkpoint.keep` kept, the newest restored when
the run restarts.

    from alchemist_jobs import tf_checkpoint

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        ...                                            # model, optimizer, variables
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)
    checkpoints = tf_checkpoint.manager(ckpt)
    start = checkpoints.restore()                      # 0 on a fresh start
    for step in range(start + 1, steps + 1):
        train_step(...)
        checkpoints.save(step)                         # writes only when the step is due

Every worker calls `save` at the same step: under MultiWorkerMirroredStrategy saving may run
collectives, so the other workers write too, into a directory of their own that is deleted
at once (TensorFlow's multi-worker guide, "Save and restore"); the chief's (worker 0's)
directory holds the run's checkpoints, which every worker restores from. Outside an
Alchemist run, `manager(ckpt, directory=...)` writes there with the spec's defaults (every
100 steps, 3 kept); with no directory it writes nothing and restores nothing.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from alchemist_jobs.checkpoint_policy import CheckpointPolicy, policy

# The chief's CheckpointManager names its files ckpt-<step>.index / .data-*.
PREFIX = "ckpt"


class TfCheckpoints:
    """One worker's view of the run's TensorFlow checkpoints (made by `manager`)."""

    def __init__(self, checkpoint: Any, directory: str | Path | None = None):
        import tensorflow as tf

        self.checkpoint = checkpoint
        self.policy: CheckpointPolicy = policy("tensorflow", directory)
        self.chief, self.index = _role()
        self.manager: Any = None
        self._write_dir: Path | None = None
        if self.policy.directory is not None:
            where = self.policy.directory
            if not self.chief:  # not the chief: its own copy, deleted after each save
                where = where.parent / f".tensorflow-worker-{self.index}"
            self._write_dir = where
            self.manager = tf.train.CheckpointManager(
                checkpoint, str(where), max_to_keep=self.policy.keep, checkpoint_name=PREFIX
            )

    def restore(self) -> int:
        """Restore the run's newest checkpoint into the tf.train.Checkpoint; returns its step
        (0: none, `checkpoint.resume: false`, or no directory)."""
        import tensorflow as tf

        if self.policy.directory is None or not self.policy.resume:
            return 0
        latest = tf.train.latest_checkpoint(str(self.policy.directory))
        if latest is None:
            return 0
        self.checkpoint.restore(latest).assert_existing_objects_matched()
        step = int(latest.rsplit("-", 1)[1])
        print(f"alchemist: resumed from checkpoint {Path(latest).name} at step {step}", flush=True)
        return step

    def save(self, step: int, force: bool = False) -> bool:
        """Write a checkpoint for `step` if it is due (every `checkpoint.every_steps`) or
        `force`; older ones past `checkpoint.keep` are deleted. Every worker calls it."""
        if self.manager is None or not (force or self.policy.due(step)):
            return False
        self.manager.save(checkpoint_number=step)
        if not self.chief and self._write_dir is not None:
            shutil.rmtree(self._write_dir, ignore_errors=True)
        return True


def manager(checkpoint: Any, directory: str | Path | None = None) -> TfCheckpoints:
    """The run's checkpoints for this `tf.train.Checkpoint` (see the module's docstring)."""
    return TfCheckpoints(checkpoint, directory)


def _role() -> tuple[bool, int]:
    """(the chief, this task's index) from TF_CONFIG: the chief is its `chief` task, else
    worker 0 (as MultiWorkerMirroredStrategy decides); no TF_CONFIG: one process, the chief."""
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    except ValueError:
        config = {}
    task = config.get("task") or {}
    kind, index = task.get("type", "worker"), int(task.get("index", 0))
    if kind == "chief" or not task:
        return True, index
    return kind == "worker" and index == 0 and "chief" not in (config.get("cluster") or {}), index
