"""A multi-process JAX script on the digits data (MLP 64-64-10), data-parallel over processes.

    alchemist run examples/jax_digits.yaml       # 2 workers, JAX_* set by Alchemist
    python examples/jax_digits.py                # the same model in one process

`jax.distributed.initialize()` with no arguments finds the job's coordinator, process count
and id (docs/frameworks.md); then every process holds one device of a global mesh, feeds its
own half of each step's batch, and XLA all-reduces the gradient of the global mean loss
(gloo between processes on CPU). `alchemist_jobs.jax_checkpoint` (orbax) writes a checkpoint
every `checkpoint.every_steps` steps into the run's directory, keeps the newest
`checkpoint.keep` (jax_digits.yaml: every 50, 2 kept) and a restarted group resumes from the
newest.
"""

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from alchemist_jobs import jax_checkpoint
from alchemist_jobs.report import report


def digits():
    """The 80/20 split and the standardisation of Alchemist's built-in digits task."""
    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=360, random_state=0, stratify=y)
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0) + 1e-6
    f = lambda a: ((a - mean) / std).astype(np.float32)  # noqa: E731
    return f(x_tr), y_tr.astype(np.int32), f(x_te), y_te.astype(np.int32)


def init_params(key):
    k1, k2 = jax.random.split(key)
    glorot = jax.nn.initializers.glorot_uniform()
    return [glorot(k1, (64, 64)), jnp.zeros(64), glorot(k2, (64, 10)), jnp.zeros(10)]


def logits(w, x):
    return jax.nn.relu(x @ w[0] + w[1]) @ w[2] + w[3]


def loss_fn(w, x, y):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits(w, x)), y[:, None], axis=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=32, help="per worker")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--checkpoint-dir", default=None,
                    help="outside a run: where to keep checkpoints (none unless given)")
    args = ap.parse_args()
    t0 = time.perf_counter()

    if "JAX_COORDINATOR_ADDRESS" in os.environ:  # under a launcher; alone, one process
        jax.distributed.initialize()
    rank, world = jax.process_index(), jax.process_count()
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    batch = NamedSharding(mesh, P("data"))  # the global batch, split over the processes
    replicated = NamedSharding(mesh, P())
    x_tr, y_tr, x_te, y_te = digits()

    @jax.jit
    def train_step(w, v, x, y):
        # The mean loss of the global batch: its gradient is the all-reduced average.
        loss, grads = jax.value_and_grad(loss_fn)(w, x, y)
        v = [0.9 * vi + gi for vi, gi in zip(v, grads)]
        return [wi - args.lr * vi for wi, vi in zip(w, v)], v, loss

    w = init_params(jax.random.key(0))
    w, v = jax.device_put((w, [jnp.zeros_like(p) for p in w]), replicated)
    # Under Alchemist: the run's checkpoints, every checkpoint.every_steps, checkpoint.keep kept;
    # a restarted group gets back the newest (0 and the fresh model on a first start).
    checkpoints = jax_checkpoint.manager(args.checkpoint_dir)
    start, (w, v) = checkpoints.restore((w, v))

    mine_x, mine_y = x_tr[rank::world], y_tr[rank::world]  # this process's shard
    rng = np.random.default_rng(rank)
    for s in range(start + 1, args.steps + 1):
        idx = rng.integers(0, len(mine_x), args.batch_size)
        x = jax.make_array_from_process_local_data(batch, mine_x[idx])
        y = jax.make_array_from_process_local_data(batch, mine_y[idx])
        w, v, loss = train_step(w, v, x, y)
        checkpoints.save(s, (w, v))  # every process; written when the step is due
        if s % 10 == 0 or s == args.steps:
            report(step=s, loss=float(loss), total_steps=args.steps, samples=10 * args.batch_size)

    checkpoints.close()  # the last write committed
    accuracy = float(np.mean(np.argmax(np.asarray(logits([np.asarray(a) for a in w], x_te)),
                                       axis=1) == y_te))
    report(step=args.steps, test_accuracy=accuracy)
    print(f"workers {world} steps {args.steps} test accuracy {accuracy:.4f} "
          f"wall {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
