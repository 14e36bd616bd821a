"""A TensorFlow MultiWorkerMirroredStrategy script on the digits data (MLP 64-64-10).

    alchemist run examples/tf_digits.yaml        # 2 workers; Alchemist sets TF_CONFIG
    python examples/tf_digits.py                 # the same model in one process

Nothing here knows about Alchemist but `report()` (a no-op outside a run) and the checkpoint
helper: the strategy reads TF_CONFIG, each worker trains on its own half of every step's
data, and the gradients are summed across workers before the update. `alchemist_jobs.tf_checkpoint`
(tf.train.CheckpointManager) writes a checkpoint every `checkpoint.every_steps` steps into the
run's directory, keeps the newest `checkpoint.keep` (tf_digits.yaml: every 50, 2 kept) and a
restarted group resumes from the newest.
"""

import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from alchemist_jobs import tf_checkpoint
from alchemist_jobs.report import report


def digits():
    """The 80/20 split and the standardisation of Alchemist's built-in digits task."""
    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=360, random_state=0, stratify=y)
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0) + 1e-6
    f = lambda a: ((a - mean) / std).astype(np.float32)  # noqa: E731
    return f(x_tr), y_tr.astype(np.int32), f(x_te), y_te.astype(np.int32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=32, help="per worker")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--checkpoint-dir", default=None,
                    help="outside a run: where to keep checkpoints (none unless given)")
    args = ap.parse_args()
    t0 = time.perf_counter()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    rank, world = task.get("index", 0), strategy.num_replicas_in_sync
    x_tr, y_tr, x_te, y_te = digits()

    with strategy.scope():  # mirrored: every worker holds the same values
        init = tf.keras.initializers.GlorotUniform(seed=0)
        weights = [tf.Variable(init((64, 64))), tf.Variable(tf.zeros(64)),
                   tf.Variable(init((64, 10))), tf.Variable(tf.zeros(10))]
        velocity = [tf.Variable(tf.zeros_like(w)) for w in weights]
        step = tf.Variable(0, dtype=tf.int64)

    def logits(w, x):
        return tf.matmul(tf.nn.relu(tf.matmul(x, w[0]) + w[1]), w[2]) + w[3]

    @tf.function
    def train_step(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits(weights, x)))
            grads = tape.gradient(loss, weights)
            ctx = tf.distribute.get_replica_context()
            # The average gradient of the global batch: one all-reduce across the workers.
            grads = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, grads)
            for w, v, g in zip(weights, velocity, grads):
                v.assign(0.9 * v + g)
                w.assign_sub(args.lr * v)
            step.assign_add(1)
            return ctx.all_reduce(tf.distribute.ReduceOp.MEAN, loss)
        return strategy.run(replica, args=(x, y))

    # Under Alchemist: the run's checkpoints, every checkpoint.every_steps, checkpoint.keep kept;
    # a restarted group restores the chief's newest into these variables (0: a first start).
    checkpoints = tf_checkpoint.manager(
        tf.train.Checkpoint(weights=weights, velocity=velocity, step=step), args.checkpoint_dir)
    checkpoints.restore()

    mine_x, mine_y = x_tr[rank::world], y_tr[rank::world]  # this worker's shard
    rng = np.random.default_rng(rank)
    while int(step.numpy()) < args.steps:
        idx = rng.integers(0, len(mine_x), args.batch_size)
        loss = float(train_step(tf.constant(mine_x[idx]), tf.constant(mine_y[idx])).numpy())
        s = int(step.numpy())
        checkpoints.save(s)  # every worker; written when the step is due
        if s % 10 == 0 or s == args.steps:
            report(step=s, loss=loss, total_steps=args.steps, samples=10 * args.batch_size)

    accuracy = float(np.mean(np.argmax(logits(weights, x_te).numpy(), axis=1) == y_te))
    report(step=args.steps, test_accuracy=accuracy)
    print(f"workers {world} steps {args.steps} test accuracy {accuracy:.4f} "
          f"wall {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
