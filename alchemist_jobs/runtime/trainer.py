"""The training loop of built-in tasks, readable top to bottom.

Per optimizer step: learning rate from the schedule; forward/backward over the step's
micro-batches; the strategy's hook (gradient exchange); optimizer step; the strategy's
periodic hook (model exchange); metrics and progress; a checkpoint every N steps. The loop
never branches on the algorithm: the strategy does what differs.

Fault injection for tests and benchmarks: `ALCHEMIST_SLOW_RANKS=1:3` (comma-separated
RANK:FACTOR) stretches each step of rank 1 to 3 times its duration by sleeping, as if that
worker ran on a slower machine.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import socket
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from alchemist_jobs.rundir import RunDir, read_json, write_json_atomic
from alchemist_jobs.contract import PROGRESS_LINE_PREFIX
from alchemist_jobs.runtime.checkpoint import Checkpointer
from alchemist_jobs.runtime.faults import Faults
from alchemist_jobs.runtime.metrics import WorkerMetrics
from alchemist_jobs.runtime.optim import build_optimizer
from alchemist_jobs.runtime.schedule import build_schedule
from alchemist_jobs.runtime.strategies import build_strategy
from alchemist_jobs.runtime.strategies.base import WorkerContext
from alchemist_jobs.runtime.tasks import TaskData, build_model, load_task_data
from alchemist_jobs.spec import JobSpec

PROGRESS_EVERY_S = 0.5


# --- small helpers ----------------------------------------------------------------------------


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """This process's RNG states, as tensors and lists (loadable with weights_only)."""
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (np_state[0], torch.from_numpy(np_state[1].copy()), *np_state[2:]),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, keys.numpy(), *rest))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def slowdown(rank: int, env: str | None = None) -> float:
    """This rank's step-time factor from ALCHEMIST_SLOW_RANKS (`RANK:FACTOR,...`); 1 = none."""
    text = os.environ.get("ALCHEMIST_SLOW_RANKS", "") if env is None else env
    for item in filter(None, (t.strip() for t in text.split(","))):
        try:
            r, f = item.split(":")
            r, f = int(r), float(f)
        except ValueError:
            raise ValueError(f"ALCHEMIST_SLOW_RANKS: {item!r} is not RANK:FACTOR (e.g. 1:3)") from None
        if f < 1:
            raise ValueError(f"ALCHEMIST_SLOW_RANKS: factor {f} of rank {r} is below 1")
        if r == rank:
            return f
    return 1.0


def param_digest(model: torch.nn.Module) -> str:
    """sha256 over every parameter's bytes: equal digests mean identical models."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class Batches:
    """This rank's shard of the training set, batch by batch, resumable mid-epoch.

    The per-epoch index order is exactly DistributedSampler's (shuffled by seed + epoch,
    padded so every rank gets the same count), but batches are sliced from in-memory tensors
    instead of collated sample by sample.
    """

    def __init__(self, data: TaskData, batch: int, rank: int, world: int, seed: int,
                 device: torch.device):
        from torch.utils.data.distributed import DistributedSampler

        self.x, self.y = data.x_train.to(device), data.y_train.to(device)
        self.batch = batch
        self.sampler = DistributedSampler(range(len(self.x)), num_replicas=world, rank=rank,
                                          shuffle=True, seed=seed, drop_last=False)
        self.per_epoch = math.ceil(self.sampler.num_samples / batch)

    def epoch(self, epoch: int, start_batch: int = 0):
        self.sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(self.sampler)), device=self.x.device)
        for b in range(start_batch, self.per_epoch):
            sel = idx[b * self.batch:(b + 1) * self.batch]
            yield b, self.x[sel], self.y[sel]


@torch.no_grad()
def evaluate(model: torch.nn.Module, data: TaskData, device: torch.device) -> tuple[float, float]:
    """(test loss, test accuracy) over the whole test set."""
    was_training = model.training
    model.eval()
    logits = model(data.x_test.to(device))
    y = data.y_test.to(device)
    loss = F.cross_entropy(logits, y).item()
    acc = (logits.argmax(1) == y).float().mean().item()
    model.train(was_training)
    return loss, acc


# --- the loop -------------------------------------------------------------------------------


def train(spec: JobSpec, run: RunDir, shared_root: Path) -> dict[str, Any]:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    use_cuda = torch.cuda.is_available() and spec.resources.gpu > 0
    device = torch.device(f"cuda:{local_rank}") if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if world > 1:  # gloo on CPU, NCCL on GPU; the address comes from torchrun's environment
        dist.init_process_group("nccl" if use_cuda else "gloo")
    t_start = time.time()

    node = os.environ.get("ALCHEMIST_NODE") or socket.gethostname()
    labels = dict(job=spec.name, run=run.run_id, rank=str(rank), node=node,
                  algorithm=spec.algorithm.name)
    metrics = WorkerMetrics(labels, enabled=spec.metrics)
    port = metrics.serve(local_rank)
    if spec.metrics:
        metrics.add_system_collector()
    worker_file = run.worker_file(rank)
    record = dict(rank=rank, local_rank=local_rank, node=node, host=socket.gethostname(),
                  pid=os.getpid(), metrics_port=port, restart=restarts, role="worker",
                  started=time.time())
    write_json_atomic(worker_file, record)
    metrics["alchemist_restarts"].set(restarts)
    faults = Faults(rank)  # off unless an ALCHEMIST_FAULT_* knob is set (runtime/faults.py)

    # Same seed everywhere: identical initial models; sampler shuffles by seed + epoch.
    seed_everything(spec.hyper.seed)
    data = load_task_data(spec, shared_root)
    model = build_model(spec, data).to(device)
    ctx = WorkerContext(spec=spec, rank=rank, world_size=world, local_rank=local_rank,
                        device=device, metrics=metrics, extra={"run": run})
    strategy = build_strategy(ctx)

    accum = getattr(spec.algorithm, "grad_accum", 1)
    batches = Batches(data, spec.hyper.batch_size, rank, world, spec.hyper.seed, device)
    # A step takes `accum` whole micro-batches; an epoch's remainder (< accum) is skipped.
    steps_per_epoch = batches.per_epoch // accum
    if steps_per_epoch == 0:
        raise ValueError(f"grad_accum={accum} exceeds the {batches.per_epoch} batches per epoch")
    total_steps = spec.hyper.steps or math.ceil(spec.hyper.epochs * steps_per_epoch)
    global_batch = world * spec.hyper.batch_size * accum
    schedule = build_schedule(spec.hyper, global_batch, steps_per_epoch, total_steps)
    metrics["alchemist_global_batch_size"].set(global_batch)

    # Resume: the newest complete checkpoint restores model, optimizer, strategy, position
    # and this rank's RNG. Load into the bare model before the strategy wraps it. Workers that
    # do not move in lock-step (async) each keep their own checkpoints (prefix rank<N>).
    prefix = "step" if strategy.collective_checkpoint else f"rank{rank}"
    ckpt = Checkpointer(run.checkpoints, keep=spec.checkpoint.keep, prefix=prefix)
    step, epoch, batch_in_epoch, resumed_from = 0, 0, 0, None
    loaded = ckpt.latest() if spec.checkpoint.resume else None
    if loaded is not None:
        resumed_from, payload = loaded
        mine = _rank_entry(payload, rank)  # this rank's RNG, and its model where replicas differ
        model.load_state_dict(mine.get("model", payload["model"]))
        step, epoch, batch_in_epoch = payload["step"], payload["epoch"], payload["batch_in_epoch"]
    train_model = strategy.setup(model)
    optimizer = build_optimizer(spec.hyper, model.parameters())
    strategy.bind_optimizer(optimizer)
    if loaded is not None:
        optimizer.load_state_dict(mine.get("optimizer", payload["optimizer"]))
        strategy.load_state_dict(payload.get("strategy", {}))
        if "rng" in mine:
            set_rng_state(mine["rng"])
        if rank == 0 or not strategy.collective_checkpoint:
            print(f"alchemist: resumed from checkpoint at step {resumed_from} "
                  f"(epoch {epoch}, batch {batch_in_epoch}), restart {restarts}", flush=True)

    writer = None
    if rank == 0:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(log_dir=str(run.tensorboard))
    history: list[dict[str, Any]] = []
    last_progress, loss_value, samples_done, t_loop = 0.0, float("nan"), 0, time.perf_counter()
    compute_s = comm_s = data_s = 0.0
    first_step, t_last_step, train_started, epoch_ends = step, t_loop, time.time(), []
    slow = slowdown(rank)

    def save_checkpoint() -> None:
        """Every rank contributes its RNG (and, where replicas differ, its model). Collective
        strategies gather them and rank 0 writes one file; the others write one file each."""
        t0 = time.perf_counter()
        mine: dict[str, Any] = {"rng": rng_state()}
        if not strategy.replicas_identical:
            mine["model"], mine["optimizer"] = model.state_dict(), optimizer.state_dict()
        if strategy.collective_checkpoint:
            ranks: Any = _gather_to_all(mine, world)
        else:
            ranks = {rank: mine}
        if rank == 0 or not strategy.collective_checkpoint:
            _, size, _ = ckpt.save(step, dict(
                config=spec.model_dump(mode="json"), step=step, epoch=epoch,
                batch_in_epoch=batch_in_epoch, model=model.state_dict(),
                optimizer=optimizer.state_dict(), strategy=strategy.state_dict(), ranks=ranks))
            metrics["alchemist_checkpoint_size_bytes"].set(size)
        metrics["alchemist_checkpoint_seconds"].observe(time.perf_counter() - t0)
        metrics["alchemist_checkpoint_step"].set(step)

    def publish(final: bool = False) -> None:
        """Rank 0's progress for the console, TensorBoard scalars."""
        elapsed = time.perf_counter() - t_loop
        rate = samples_done / elapsed if elapsed > 0 else 0.0
        run_progress = dict(step=step, total_steps=total_steps, epoch=epoch,
                            epochs=total_steps / steps_per_epoch, loss=loss_value,
                            lr=optimizer.param_groups[0]["lr"], samples_per_s=rate * world,
                            restarts=restarts, time=time.time(), final=final)
        write_json_atomic(run.progress_file, run_progress)
        if os.environ.get("ALCHEMIST_LOG_TO_CONSOLE") == "1":
            # On clusters the CLI reads progress from rank 0's pod log through the API
            # server: it works where NetworkPolicies keep the API server off the pods.
            print(PROGRESS_LINE_PREFIX + json.dumps(run_progress), flush=True)
        writer.add_scalar("train/loss", loss_value, step)
        writer.add_scalar("train/lr", run_progress["lr"], step)
        writer.add_scalar("train/samples_per_s", run_progress["samples_per_s"], step)

    model.train()
    try:
        while step < total_steps:
            epoch_iter = batches.epoch(epoch, batch_in_epoch)
            while step < total_steps:
                if batch_in_epoch + accum > batches.per_epoch:
                    break  # end of the epoch: too few batches left for a whole step
                t0 = time.perf_counter()
                lr = ctx.lr = schedule(step)
                for g in optimizer.param_groups:
                    g["lr"] = lr
                optimizer.zero_grad(set_to_none=True)
                # Forward/backward over the step's micro-batches.
                loss_sum, n_micro, t_data = 0.0, 0, 0.0
                for i in range(accum):
                    td = time.perf_counter()
                    b, x, y = next(epoch_iter)
                    t_data += time.perf_counter() - td
                    batch_in_epoch = b + 1
                    with strategy.accumulate(last=(i == accum - 1)):
                        loss = F.cross_entropy(train_model(x), y) / accum
                        loss.backward()
                    loss_sum += loss.item() * accum
                    n_micro += 1
                    samples_done += len(x)
                strategy.after_backward(step)  # gradient exchange (async: PS push/pull)
                optimizer.step()
                step += 1
                strategy.after_step(step)  # model exchange every tau steps (bmuf, easgd)
                if slow > 1:  # injected fault: this rank behaves like a slower machine
                    time.sleep((slow - 1) * (time.perf_counter() - t0))

                # Time and traffic of this step, from the strategy's counters.
                t_last_step = time.perf_counter()
                t_step = t_last_step - t0
                t_comm = ctx.comm.close_window()
                loss_value = loss_sum / n_micro
                comm_s += t_comm
                data_s += t_data
                compute_s += max(0.0, t_step - t_comm - t_data)
                metrics["alchemist_steps_total"].inc()
                metrics["alchemist_samples_total"].inc(n_micro * spec.hyper.batch_size)
                metrics["alchemist_loss"].set(loss_value)
                metrics["alchemist_learning_rate"].set(lr)
                metrics["alchemist_epoch"].set(epoch + batch_in_epoch / batches.per_epoch)
                metrics["alchemist_step_seconds"].observe(t_step)
                metrics["alchemist_data_seconds_total"].inc(t_data)
                metrics["alchemist_communication_seconds_total"].inc(t_comm)
                metrics["alchemist_compute_seconds_total"].inc(max(0.0, t_step - t_comm - t_data))
                metrics["alchemist_last_step_timestamp_seconds"].set(time.time())
                _export_comm(metrics, ctx)
                faults.after_step(step)

                if spec.checkpoint.every_steps and step % spec.checkpoint.every_steps == 0:
                    save_checkpoint()
                if rank == 0 and time.perf_counter() - last_progress > PROGRESS_EVERY_S:
                    publish()
                    last_progress = time.perf_counter()
                if not math.isfinite(loss_value) and os.environ.get("ALCHEMIST_ALLOW_NAN") != "1":
                    raise FloatingPointError(f"loss is {loss_value} at step {step}; stopping")
            if batch_in_epoch + accum <= batches.per_epoch:
                break  # the step budget ran out mid-epoch: no end-of-epoch point
            # End of an epoch (the last one too): evaluate for the learning curve (rank 0,
            # cheap for built-ins), on the model the strategy would hand out now (bmuf: the
            # global model; easgd: the centre variable).
            epoch, batch_in_epoch = epoch + 1, 0
            epoch_ends.append(time.time())  # every rank: its own pace, for throughput studies
            if rank == 0:
                with strategy.evaluation_model() as current:
                    _, acc = evaluate(current, data, device)
                history.append(dict(epoch=epoch, step=step, accuracy=acc, loss=loss_value,
                                    wall_s=time.time() - t_start))
                writer.add_scalar("test/accuracy", acc, step)
                metrics["alchemist_test_accuracy_ratio"].set(acc)

        strategy.finish()
        # The final exchange (bmuf's last block, the parameter server's final model) counts.
        t_comm = ctx.comm.close_window()
        comm_s += t_comm
        metrics["alchemist_communication_seconds_total"].inc(t_comm)
        _export_comm(metrics, ctx)
        test_loss, test_acc = evaluate(model, data, device)
        metrics["alchemist_test_accuracy_ratio"].set(test_acc)
        elapsed = time.perf_counter() - t_loop
        # Every rank records its final parameters' digest next to its metrics endpoint, and
        # this attempt's own pace (up to its last step: finish() may wait for the others).
        train_s = t_last_step - t_loop
        write_json_atomic(worker_file, dict(read_json(worker_file) or record,
                                            final_param_sha256=param_digest(model),
                                            train_steps=step - first_step, train_s=train_s,
                                            train_started=train_started, epoch_ends=epoch_ends,
                                            finished=time.time()))
        result = dict(
            run=run.run_id, steps=step, epochs=step / steps_per_epoch, final_loss=loss_value,
            test_loss=test_loss, test_accuracy=test_acc, world_size=world,
            global_batch=global_batch, wall_s=time.time() - t_start,
            train_s=elapsed, samples_per_s=samples_done * world / elapsed if elapsed else 0.0,
            steps_per_s=(step - (resumed_from or 0)) / elapsed if elapsed else 0.0,
            restarts=restarts, resumed_from_step=resumed_from,
            time_split_s=dict(compute=compute_s, communication=comm_s, data=data_s),
            communication=dict(sent_bytes=ctx.comm.sent_bytes,
                               received_bytes=ctx.comm.received_bytes,
                               rounds=ctx.comm.rounds, seconds=ctx.comm.seconds),
            history=history, algorithm=spec.algorithm.name)
        if rank == 0:
            publish(final=True)
            writer.add_hparams(
                dict(algorithm=spec.algorithm.name, world_size=world,
                     batch_size=spec.hyper.batch_size, global_batch=global_batch, lr=spec.hyper.lr,
                     optimizer=spec.hyper.optimizer, lr_scaling=spec.hyper.lr_scaling,
                     seed=spec.hyper.seed),
                {"hparam/test_accuracy": test_acc, "hparam/final_loss": loss_value},
                run_name=".")
            write_json_atomic(run.result_file, result)
        return result
    finally:
        if writer is not None:
            writer.close()
        strategy.close()
        if world > 1 and dist.is_initialized():
            # A barrier, then a prompt exit (see bootstrap): gloo can abort in
            # destroy_process_group across hosts, leaving the launcher hanging.
            if sys.exc_info()[0] is None:
                dist.barrier()


def _gather_to_all(obj: dict[str, Any], world: int) -> list[dict[str, Any]]:
    """all_gather_object of a dict holding tensors. Serialised with torch.save first:
    all_gather_object's own pickling of tensors fails to load on torch 2.13
    ("UntypedStorage has no attribute dtype")."""
    import io

    buf = io.BytesIO()
    torch.save(obj, buf)
    if world == 1:
        blobs = [buf.getvalue()]
    else:
        blobs = [None] * world
        dist.all_gather_object(blobs, buf.getvalue())
    return [torch.load(io.BytesIO(b), weights_only=True) for b in blobs]


def _rank_entry(payload: dict[str, Any], rank: int) -> dict[str, Any]:
    """This rank's part of a checkpoint: a list indexed by rank (collective) or {rank: ...}."""
    ranks = payload.get("ranks", [])
    if isinstance(ranks, dict):
        return ranks.get(rank, {})
    return ranks[rank] if rank < len(ranks) else {}


def _export_comm(metrics: WorkerMetrics, ctx: WorkerContext) -> None:
    """Bring the contract's cumulative communication counters up to the strategy's totals."""
    last = ctx.extra.setdefault("_exported", {"sent": 0.0, "recv": 0.0, "rounds": 0})
    c = ctx.comm
    if c.sent_bytes > last["sent"]:
        metrics["alchemist_communication_sent_bytes_total"].inc(c.sent_bytes - last["sent"])
    if c.received_bytes > last["recv"]:
        metrics["alchemist_communication_received_bytes_total"].inc(c.received_bytes - last["recv"])
    if c.rounds > last["rounds"]:
        metrics["alchemist_sync_rounds_total"].inc(c.rounds - last["rounds"])
    last.update(sent=c.sent_bytes, recv=c.received_bytes, rounds=c.rounds)


def main() -> int:
    """Entry of a built-in task's worker (called by the bootstrap)."""
    run = RunDir(Path(os.environ["ALCHEMIST_RUN_DIR"]))
    shared_root = Path(os.environ.get("ALCHEMIST_SHARED_ROOT", run.path.parent.parent))
    import yaml

    spec = JobSpec.model_validate(yaml.safe_load(run.spec.read_text()))
    train(spec, run, shared_root)
    return 0
