"""bmuf and easgd in a JAX script's own loop: parameter averaging every `tau` steps, as
`alchemist_jobs.prepare` brings them to a torch loop.

    import jax
    from alchemist_jobs import jax_averaging

    jax.distributed.initialize()
    averaging = jax_averaging.averaging(params)      # every process the same params
    for step in range(1, steps + 1):
        params, opt_state = update(params, opt_state, batch)   # this process's own step
        params, momentum = averaging.step(step, params, momentum)
    params = averaging.finish(params)                # bmuf: the global model; easgd: the centre

Each process trains its own replica (process-local arrays, its own shard of the data); every
`algorithm.tau` steps the replicas meet through one cross-process sum
(`jax.experimental.multihost_utils.process_allgather`, over the collectives
`jax.distributed.initialize()` set up: gloo on CPU) and move by the same formulas as the
torch strategies (alchemist_jobs/runtime/strategies/bmuf.py and easgd.py):

* bmuf: S = W + η·Δ (Nesterov) or W; W̄ = S + Σ(x_i − S)/N; Δ ← η·Δ + ζ·(W̄ − S); W ← W + Δ;
  every replica restarts from W + η·Δ (Nesterov) or W. With `reset_momentum` (the default)
  the `momentum` pytree passed to step() comes back zeroed after each block.
* easgd: x_i ← x_i − α·(x_i − c); c ← c + α·Σ(x_j − c).

The arithmetic is float32 on the host, the parameters flattened in pytree order; step()
gives back a pytree of the same structure, shapes and dtypes. The spec's `algorithm` decides
(`bmuf` or `easgd`; `sync` leaves the params alone: a JAX script averages gradients itself);
`overlap`, `exchange_dtype` and easgd's `async` variant are torch's only and refused for a
JAX script. Outside an Alchemist run, or with one process, step() and finish() change nothing.
The state (bmuf's W and Δ, easgd's centre) is `state()` / `load_state()`: save it with the
checkpoint (alchemist_jobs.jax_checkpoint) so a restart resumes the same block.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import yaml

from alchemist_jobs import environment as E
from alchemist_jobs.rundir import RunDir
from alchemist_jobs.runtime import script_report
from alchemist_jobs.spec import BmufAlgo, EasgdAlgo, JobSpec

P = TypeVar("P")
M = TypeVar("M")


class Averaging:
    """One process's side of the run's bmuf or easgd (made by `averaging`)."""

    def __init__(self, params: Any, algorithm: Any, world: int):
        import jax  # the script's own jax, imported already

        self._jax = jax
        self.algorithm, self.world = algorithm, world
        self.active = world > 1 and isinstance(algorithm, (BmufAlgo, EasgdAlgo))
        self.tau = algorithm.tau if isinstance(algorithm, (BmufAlgo, EasgdAlgo)) else 1
        self.pending = 0  # local steps not yet in any exchange
        start = _flat(params)
        if isinstance(algorithm, BmufAlgo):
            eta = algorithm.block_momentum
            self.eta = 1.0 - 1.0 / world if eta is None else eta  # Chen & Huo's rule of thumb
            self.zeta, self.nesterov = algorithm.block_lr, algorithm.nesterov
            self.w, self.delta = start.copy(), np.zeros_like(start)  # W_{t-1}, Δ_{t-1}
        else:
            self.centre = start.copy()
        if self.active:
            self._same_start(start)
            reporter = script_report.current()
            if reporter is not None:
                reporter.applied = True  # its report(step=...) and the bootstrap's end check

    def step(self, step: int, params: P, momentum: M | None = None) -> tuple[P, M | None]:
        """After the step-th optimizer step (counted from 1, over restarts): at a block's end
        the exchange, else `params` unchanged. `momentum`: bmuf's reset_momentum zeroes it."""
        if not self.active:
            return params, momentum
        self.pending += 1
        if step % self.tau:
            return params, momentum
        x = _flat(params)
        if isinstance(self.algorithm, BmufAlgo):
            new = self._block(x)
            if self.algorithm.reset_momentum and momentum is not None:
                momentum = self._jax.tree.map(self._jax.numpy.zeros_like, momentum)
        else:
            new = self._elastic(x)
        return _unflat(new, params), momentum

    def finish(self, params: P) -> P:
        """The model to keep: bmuf closes a partial last block and gives the global model W,
        easgd the centre; call it once, after the last step (every process)."""
        if not self.active:
            return params
        if isinstance(self.algorithm, BmufAlgo):
            if self.pending:
                self._block(_flat(params))
            return _unflat(self.w, params)
        return _unflat(self.centre, params)

    def state(self) -> dict[str, np.ndarray]:
        """What a checkpoint keeps to resume the same block (numpy arrays)."""
        if isinstance(self.algorithm, BmufAlgo):
            return {"w": self.w, "delta": self.delta}
        return {"centre": self.centre} if isinstance(self.algorithm, EasgdAlgo) else {}

    def load_state(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, np.asarray(v, np.float32).copy())

    def _began(self) -> np.ndarray:
        """S_{t-1}: where the replicas began the block now ending."""
        return self.w + np.float32(self.eta) * self.delta if self.nesterov else self.w.copy()

    def _block(self, x: np.ndarray) -> np.ndarray:
        began = self._began()
        avg = began + self._sum(x - began) / np.float32(self.world)
        self.delta = np.float32(self.eta) * self.delta + np.float32(self.zeta) * (avg - began)
        self.w = self.w + self.delta
        self.pending = 0
        return self._began()  # the point every replica restarts from

    def _elastic(self, x: np.ndarray) -> np.ndarray:
        assert isinstance(self.algorithm, EasgdAlgo)  # _elastic runs for easgd only
        alpha = np.float32(self.algorithm.alpha)
        diff_sum = self._sum(x - self.centre)
        x = x - alpha * (x - self.centre)
        self.centre = self.centre + alpha * diff_sum
        self.pending = 0
        return x

    def _sum(self, v: np.ndarray) -> np.ndarray:
        """Σ over the processes, in process order."""
        from jax.experimental import multihost_utils  # jax's, once a script averages

        every = np.asarray(multihost_utils.process_allgather(v), np.float32)
        total = every[0].copy()
        for row in every[1:]:
            total += row
        return total

    def _same_start(self, x: np.ndarray) -> None:
        from jax.experimental import multihost_utils  # jax's, once a script averages

        every = np.asarray(multihost_utils.process_allgather(x))
        if not all(np.array_equal(every[0], row) for row in every[1:]):
            raise ValueError(
                f"jax_averaging: the processes start from different params; accepted: every "
                f"process the same params (the same seed) for {self.algorithm.name}"
            )


def averaging(params: Any) -> Averaging:
    """The run's bmuf or easgd for this params pytree (its starting point; see the module's
    docstring). Outside an Alchemist run it changes nothing."""
    import jax  # the script's own jax, imported already

    run_dir = E.RUN_DIR.get()
    if run_dir is None:
        return Averaging(params, None, 1)
    spec = JobSpec.model_validate(yaml.safe_load(RunDir(run_dir).spec.read_text()))
    return Averaging(params, spec.algorithm, jax.process_count())


def _flat(tree: Any) -> np.ndarray:
    import jax  # the script's own jax, imported already

    leaves = jax.tree.leaves(tree)
    if not leaves:
        return np.zeros(0, np.float32)
    return np.concatenate([np.ravel(np.asarray(x, np.float32)) for x in leaves])


def _unflat(vector: np.ndarray, like: P) -> P:
    """A pytree shaped, typed and placed as `like`, from its flattened values."""
    import jax  # the script's own jax, imported already

    leaves, treedef = jax.tree.flatten(like)
    out, at = [], 0
    for leaf in leaves:
        n = int(np.size(leaf))
        value = vector[at : at + n].reshape(np.shape(leaf)).astype(leaf.dtype)
        out.append(jax.device_put(value, leaf.sharding) if hasattr(leaf, "sharding") else value)
        at += n
    return jax.tree.unflatten(treedef, out)
