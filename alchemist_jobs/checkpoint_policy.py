"""Where and how often a TensorFlow or JAX script's checkpoint helpers write: the run's
checkpoint directory and the spec's `checkpoint.every_steps`, `keep` and `resume`.

The helpers (alchemist_jobs/tf_checkpoint.py, alchemist_jobs/jax_checkpoint.py) ask this
module, which imports no framework. Inside an Alchemist run the run's spec decides and the
files go under `<run>/checkpoints/<framework>/`, beside a torch run's `step-<S>.pt`, on the
shared file system every worker (and every restart) sees. Outside a run (plain python) a
script names its directory itself, or writes none, with the spec's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from alchemist_jobs import environment as E
from alchemist_jobs.rundir import RunDir
from alchemist_jobs.spec import CheckpointSpec


@dataclass(frozen=True)
class CheckpointPolicy:
    directory: Path | None  # None: no checkpoints (outside a run, no directory given)
    every_steps: int  # a checkpoint at every step that is a multiple of this
    keep: int  # the newest this many are kept, older ones deleted
    resume: bool  # a (re)started worker restores the newest one

    def due(self, step: int) -> bool:
        """A checkpoint is written at this step (optimizer steps done)."""
        return self.directory is not None and step > 0 and step % self.every_steps == 0


def policy(framework: str, directory: str | Path | None = None) -> CheckpointPolicy:
    """The checkpoint policy of this worker; `directory` (a script's own) wins over the run's."""
    run_dir = E.RUN_DIR.get()
    spec = CheckpointSpec.model_validate({})  # its defaults
    if run_dir is not None:
        raw = yaml.safe_load(RunDir(run_dir).spec.read_text())
        spec = CheckpointSpec.model_validate((raw or {}).get("checkpoint") or {})
    where = Path(directory) if directory is not None else None
    if where is None and run_dir is not None:
        where = RunDir(run_dir).checkpoints / framework
    return CheckpointPolicy(where, spec.every_steps, spec.keep, spec.resume)
