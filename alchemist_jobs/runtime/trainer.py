"""The training loop of built-in and entry tasks, readable top to bottom.

Per optimizer step: learning rate from the schedule; forward/backward over the step's
micro-batches; the strategy's hook (gradient exchange); optimizer step; the strategy's
periodic hook (model exchange); metrics and progress; a checkpoint every N steps. The loop
never branches on the algorithm: the strategy does what differs.

`Trainer` holds the worker's state (`TrainState`: step, epoch, sampler position; RNG states
ride in each checkpoint) and has one method per part: `train_step`, `save_checkpoint`,
`restore`, `evaluate_epoch`, `publish`. Fault knobs (slow ranks, stalls, NaN tolerance) live
in runtime/faults.py; the stall watchdog in runtime/watchdog.py.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from alchemist_jobs import environment as E
from alchemist_jobs.contract import PROGRESS_LINE_PREFIX
from alchemist_jobs.rundir import RunDir, read_json, write_json_atomic
from alchemist_jobs.runtime.batches import Batches, batch_len, evaluate
from alchemist_jobs.runtime.curve import write_snapshot
from alchemist_jobs.runtime.event_writer import summary_writer
from alchemist_jobs.runtime.faults import Faults
from alchemist_jobs.runtime.liveness import Liveness
from alchemist_jobs.runtime.metrics import WorkerMetrics
from alchemist_jobs.runtime.optim import build_optimizer
from alchemist_jobs.runtime.precision import Precision
from alchemist_jobs.runtime.schedule import build_schedule
from alchemist_jobs.runtime.series_file import append_series
from alchemist_jobs.runtime.step_metrics import StepMetrics
from alchemist_jobs.runtime.strategies import build_strategy
from alchemist_jobs.runtime.strategies.base import WorkerContext
from alchemist_jobs.runtime.tasks import load_task
from alchemist_jobs.runtime.train_state import TrainState, param_digest
from alchemist_jobs.runtime.watchdog import StallWatchdog
from alchemist_jobs.runtime.worker_checkpoint import WorkerCheckpoints
from alchemist_jobs.spec import JobSpec
from alchemist_jobs.worker_env import restarts

PROGRESS_EVERY_S = 0.5
LOG_EVERY_S = 5.0  # rank 0's human-readable progress line in its log (`alchemist logs RUN`)


@dataclass(frozen=True)
class WorkerPlace:
    """Where this worker stands in the job, from the torchrun environment."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    restarts: int = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkerPlace:
        e = os.environ if environ is None else environ
        # restarts: torchrun's count locally, the JobSet's group restart on a cluster
        return cls(
            rank=int(e.get("RANK", 0)),
            world=int(e.get("WORLD_SIZE", 1)),
            local_rank=int(e.get("LOCAL_RANK", 0)),
            restarts=restarts(e),
        )


class Trainer:
    """One worker of a task (built-in or `task.entry`): builds everything in __init__, then
    `train()`."""

    _logged_at = float("-inf")  # when rank 0 last printed its progress line

    def __init__(
        self,
        spec: JobSpec,
        run: RunDir,
        shared_root: Path,
        place: WorkerPlace,
        device: torch.device | None = None,
    ):
        self.spec, self.run, self.place = spec, run, place
        self.rank, self.world = place.rank, place.world
        self.device = device if device is not None else Precision.device_for(spec, place.local_rank)
        self.precision = Precision(spec, self.device)
        # Peers' watchdogs wait for this worker's start too: its heartbeat (started with the
        # watchdog otherwise) tells them it is starting, not stopped.
        self.liveness = Liveness(run.workers, self.rank, self.world)
        if self.world > 1 and spec.checkpoint.stall_timeout_s is not None:
            self.liveness.start()
        if self.world > 1 and not dist.is_initialized():
            # gloo on CPU, NCCL on GPU; the address comes from torchrun's environment
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
        self.t_start = time.time()
        self.metrics = self._serve_metrics()
        self.step_metrics = StepMetrics(self.metrics)
        self.faults = Faults(self.rank)  # off unless a knob is set (runtime/faults.py)
        self.state = TrainState()

        # Same seed everywhere: identical initial models; sampler shuffles by seed + epoch.
        # An entry file lies in the run's copy of the spec's directory, the workers' cwd.
        self.task = load_task(spec, shared_root, self.rank, self.world, code_dir=Path.cwd())
        self.model = self.task.model.to(self.device)
        self.ctx = WorkerContext(
            spec=spec,
            rank=self.rank,
            world_size=self.world,
            local_rank=place.local_rank,
            device=self.device,
            metrics=self.metrics,
            extra={"run": run},
        )
        self.strategy = build_strategy(self.ctx)
        self.accum = spec.algorithm.micro_batches
        self.batches = Batches(
            self.task,
            spec.hyper.batch_size,
            self.rank,
            self.world,
            spec.hyper.seed,
            self.device,
            spec.data.loader_workers,
        )
        # A step takes `accum` whole micro-batches; an epoch's remainder (< accum) is skipped.
        self.steps_per_epoch = self.batches.per_epoch // self.accum
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"grad_accum={self.accum} exceeds the {self.batches.per_epoch} batches per epoch"
            )
        if spec.hyper.steps:
            self.total_steps = spec.hyper.steps
        else:
            assert spec.hyper.epochs is not None  # Hyper's validator sets it where steps is unset
            self.total_steps = math.ceil(spec.hyper.epochs * self.steps_per_epoch)
        self.global_batch = self.world * spec.hyper.batch_size * self.accum
        self.schedule = build_schedule(spec.hyper, self.global_batch, self.steps_per_epoch, self.total_steps)
        self.metrics["alchemist_global_batch_size"].set(self.global_batch)
        # Workers that do not move in lock-step (async) each keep their own checkpoints.
        self.checkpoints = WorkerCheckpoints(
            run, spec.checkpoint.keep, self.strategy, self.rank, self.world, self.device.type == "cuda"
        )
        loaded = self.checkpoints.newest() if spec.checkpoint.resume else None
        if loaded is not None:  # into the bare model, before the strategy wraps it
            self.checkpoints.restore_model(self.model, loaded)
            self.state.load_position(loaded[1], loaded[0])
        self.train_model = self.strategy.setup(self.model)
        self.optimizer = (
            self.task.optimizer(self.model.parameters(), spec.hyper)
            if self.task.optimizer
            else build_optimizer(spec.hyper, self.model.parameters())
        )
        self.strategy.bind_optimizer(self.optimizer)
        if loaded is not None:
            self.checkpoints.restore_rest(self.model, self.optimizer, loaded)
            s = self.state
            if self.checkpoints.writes:
                print(
                    f"alchemist: resumed from checkpoint at step {s.resumed_from} (epoch "
                    f"{s.epoch}, batch {s.batch_in_epoch}), restart {self.place.restarts}",
                    flush=True,
                )
        self.writer = self._tensorboard() if self.rank == 0 else None
        self.history: list[dict[str, Any]] = []
        self.loss_value = float("nan")
        self._losses: list[tuple[int, torch.Tensor]] = []  # rank 0: steps' losses not yet read
        self.epoch_ends: list[float] = []
        self.watchdog = StallWatchdog.from_spec(spec, self.rank, self.liveness)

    # --- setup pieces ---------------------------------------------------------------------

    def _serve_metrics(self) -> WorkerMetrics:
        node = E.NODE.get() or socket.gethostname()
        labels = dict(
            job=self.spec.name,
            run=self.run.run_id,
            rank=str(self.rank),
            node=node,
            algorithm=self.spec.algorithm.name,
        )
        metrics = WorkerMetrics(labels, enabled=self.spec.metrics)
        port = metrics.serve(self.place.local_rank)
        if self.spec.metrics:
            metrics.add_system_collector()
        self.worker_record = dict(
            rank=self.rank,
            local_rank=self.place.local_rank,
            node=node,
            host=socket.gethostname(),
            pid=os.getpid(),
            metrics_port=port,
            restart=self.place.restarts,
            role="worker",
            started=time.time(),
            device=str(self.device),
        )
        write_json_atomic(self.run.worker_file(self.rank), self.worker_record)
        metrics["alchemist_restarts"].set(self.place.restarts)
        return metrics

    def _tensorboard(self) -> Any:
        return summary_writer(str(self.run.tensorboard))

    # --- the parts of a step ----------------------------------------------------------------

    def train_step(self, micro_batches: Any) -> torch.Tensor:
        """One optimizer step over `accum` micro-batches; returns the mean loss, on device
        (reading it is a host sync: the loop does so only when it publishes)."""
        s, strategy, optimizer = self.state, self.strategy, self.optimizer
        lr = self.ctx.lr = self.schedule(s.step)
        for g in optimizer.param_groups:
            g["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=self.device)
        self._data_s, self._samples = 0.0, 0
        for i in range(self.accum):
            td = time.perf_counter()
            b, x, y = next(micro_batches)
            self._data_s += time.perf_counter() - td
            s.batch_in_epoch = b + 1
            with strategy.accumulate(last=(i == self.accum - 1)):
                with self.precision.autocast():
                    loss = self.task.loss(self.train_model(x), y) / self.accum
                loss.backward()
            loss_sum += loss.detach().float()
            self._samples += batch_len(y)
        strategy.after_backward(s.step)  # gradient exchange (async: PS push/pull)
        optimizer.step()
        s.step += 1
        strategy.after_step(s.step)  # model exchange every tau steps (bmuf, easgd)
        return loss_sum

    def save_checkpoint(self) -> None:
        """Every rank contributes its RNG (and, where replicas differ, its model): one file
        for collective strategies, one per worker otherwise (runtime/worker_checkpoint.py)."""
        t0 = time.perf_counter()
        size = self.checkpoints.save(
            self.state.step,
            self.model,
            self.optimizer,
            dict(config=self.spec.model_dump(mode="json"), **self.state.position()),
        )
        if size is not None:
            self.metrics["alchemist_checkpoint_size_bytes"].set(size)
        self.metrics["alchemist_checkpoint_seconds"].observe(time.perf_counter() - t0)
        self.metrics["alchemist_checkpoint_step"].set(self.state.step)

    def publish(self, final: bool = False) -> None:
        """Rank 0's progress for the console, TensorBoard scalars."""
        assert self.writer is not None  # rank 0, the one rank with a writer
        elapsed = time.perf_counter() - self.t_loop
        rate = self.step_metrics.samples / elapsed if elapsed > 0 else 0.0
        s, lr = self.state, self.optimizer.param_groups[0]["lr"]
        progress = dict(
            step=s.step,
            total_steps=self.total_steps,
            epoch=s.epoch,
            epochs=self.total_steps / self.steps_per_epoch,
            loss=self.loss_value,
            lr=lr,
            samples_per_s=rate * self.world,
            restarts=self.place.restarts,
            time=time.time(),
            final=final,
        )
        write_json_atomic(self.run.progress_file, progress)
        now = time.monotonic()
        if final or now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            print(
                f"step {s.step}/{self.total_steps}  epoch {s.epoch}/"
                f"{progress['epochs']:.3g}  loss {self.loss_value:.4f}  lr {lr:.4g}  "
                f"{rate * self.world:,.0f} samples/s",
                flush=True,
            )
        if E.LOG_TO_CONSOLE.get():
            # On clusters the CLI reads progress from rank 0's pod log through the API
            # server: it works where NetworkPolicies keep the API server off the pods.
            print(PROGRESS_LINE_PREFIX + json.dumps(progress), flush=True)
        self.writer.add_scalar("train/loss", self.loss_value, s.step)
        self.writer.add_scalar("train/lr", lr, s.step)
        self.writer.add_scalar("train/samples_per_s", rate * self.world, s.step)

    def evaluate_epoch(self) -> None:
        """End of an epoch: rank 0 evaluates for the learning curve (cheap for built-ins) on
        the model the strategy would hand out now (bmuf: the global model; easgd: centre)."""
        s = self.state
        s.epoch, s.batch_in_epoch = s.epoch + 1, 0
        self.epoch_ends.append(time.time())  # every rank: its own pace, for throughput studies
        if self.rank != 0 or self.spec.curve.every_steps:  # the curve comes from snapshots
            return
        with self.strategy.evaluation_model() as current:
            test = evaluate(current, self.task, self.device)
        self.history.append(
            dict(
                epoch=s.epoch,
                step=s.step,
                accuracy=test.get("accuracy"),
                loss=self.loss_value,
                wall_s=time.time() - self.t_start,
                test=test,
            )
        )
        self._record_test(test, s.step)
        print(f"epoch {s.epoch} done at step {s.step}: {_shown(test)}", flush=True)

    def _record_test(self, test: dict[str, float], step: int) -> None:
        """Rank 0: an evaluation's figures into TensorBoard (and accuracy into Prometheus)."""
        assert self.writer is not None  # rank 0, the one rank with a writer
        for name, value in test.items():
            self.writer.add_scalar(f"test/{name}", value, step)
        if "accuracy" in test:
            self.metrics["alchemist_test_accuracy_ratio"].set(test["accuracy"])

    def snapshot(self) -> None:
        """Rank 0, every `curve.every_steps`: the model the strategy would hand out now, for a
        curve evaluated off the training path (runtime/curve.py)."""
        t0 = time.perf_counter()
        with self.strategy.evaluation_model() as current:
            write_snapshot(self.run, self.state.step, time.time() - self.t_start, current)
        self.snapshot_s += time.perf_counter() - t0

    def _read_loss(self, loss: torch.Tensor) -> None:
        self.loss_value = float(loss.item())
        self.step_metrics.record_loss(self.loss_value)
        self.faults.check_loss(self.loss_value, self.state.step)
        self._write_series()

    def _write_series(self) -> None:
        """Rank 0: every step's loss since the last read, read from the device together (one
        host sync, when the loop reads its loss anyway) and appended to series.jsonl."""
        if not self._losses:
            return
        steps = [s for s, _ in self._losses]
        losses = torch.stack([v for _, v in self._losses]).float().tolist()
        self._losses.clear()
        elapsed = time.perf_counter() - self.t_loop
        rate = self.step_metrics.samples * self.world / elapsed if elapsed > 0 else 0.0
        comm, now = self.step_metrics.split.communication, time.time()
        append_series(
            self.run.path,
            [
                dict(step=s, loss=v, samples_per_s=rate, communication_s=comm, metrics={}, time=now)
                for s, v in zip(steps, losses)
                if math.isfinite(v)
            ],
        )

    # --- the loop ---------------------------------------------------------------------------

    def train(self) -> dict[str, Any]:
        s, spec = self.state, self.spec
        self.t_loop = self.t_last_step = time.perf_counter()
        self.first_step, self.train_started = s.step, time.time()
        last_progress, loss = 0.0, None
        self.model.train()
        every = spec.curve.every_steps if self.rank == 0 else None
        self.snapshot_s = 0.0
        if every and s.step % every == 0:
            self.snapshot()  # where the curve starts
        self.watchdog.start()
        try:
            while s.step < self.total_steps:
                micro_batches = self.batches.epoch(s.epoch, s.batch_in_epoch)
                while s.step < self.total_steps and s.batch_in_epoch + self.accum <= self.batches.per_epoch:
                    t0 = time.perf_counter()
                    loss = self.train_step(micro_batches)
                    if self.rank == 0:
                        self._losses.append((s.step, loss))  # read later, with the others
                    self.faults.stretch(time.perf_counter() - t0)  # injected: a slower machine
                    self.t_last_step = time.perf_counter()
                    # Every rank reads its loss (a host sync) only every PROGRESS_EVERY_S, at
                    # checkpoints and at the end: for its metrics and the NaN check. On a GPU
                    # the communication events are read then too, never once per step.
                    due = self.t_last_step - last_progress > PROGRESS_EVERY_S
                    checkpoint = spec.checkpoint.every_steps and s.step % spec.checkpoint.every_steps == 0
                    read = bool(due or checkpoint or s.step == self.total_steps)
                    self.step_metrics.record(
                        step_s=self.t_last_step - t0,
                        data_s=self._data_s,
                        samples=self._samples,
                        lr=self.ctx.lr,
                        comm=self.ctx.comm,
                        read=read,
                        epoch=s.epoch + s.batch_in_epoch / self.batches.per_epoch,
                    )
                    self.watchdog.beat(s.step)
                    self.faults.after_step(s.step)
                    if read:
                        self._read_loss(loss)
                    if checkpoint:
                        self.save_checkpoint()
                    if every and s.step % every == 0:
                        self.snapshot()
                    if due:
                        if self.rank == 0:
                            self.publish()
                        last_progress = time.perf_counter()
                if s.batch_in_epoch + self.accum <= self.batches.per_epoch:
                    break  # the step budget ran out mid-epoch: no end-of-epoch point
                if loss is not None:
                    self._read_loss(loss)
                self.evaluate_epoch()
            return self.finish()
        finally:
            self.close()

    def finish(self) -> dict[str, Any]:
        """The strategy's final exchange, the final evaluation, the result and its records."""
        s, spec = self.state, self.spec
        if self.strategy.collective_checkpoint:
            self.watchdog.beat(s.step)  # the last exchange waits only for peers' last steps
        else:
            self.watchdog.stop()  # the parameter server answers `done` once every worker is
        self.strategy.finish()
        # The final exchange (bmuf's last block, the parameter server's final model) counts.
        self.step_metrics.record_final_exchange(self.ctx.comm)
        test = evaluate(self.model, self.task, self.device)
        test_loss, test_acc = test["loss"], test.get("accuracy")
        if test_acc is not None:
            self.metrics["alchemist_test_accuracy_ratio"].set(test_acc)
        elapsed = time.perf_counter() - self.t_loop
        # Every rank records its final parameters' digest next to its metrics endpoint, and
        # this attempt's own pace (up to its last step: finish() may wait for the others).
        wf = self.run.worker_file(self.rank)
        write_json_atomic(
            wf,
            dict(
                read_json(wf) or self.worker_record,
                final_param_sha256=param_digest(self.model),
                train_steps=s.step - self.first_step,
                train_s=self.t_last_step - self.t_loop,
                train_started=self.train_started,
                epoch_ends=self.epoch_ends,
                finished=time.time(),
                final_metrics=self.metrics.totals(),
            ),
        )
        split, comm = self.step_metrics.split, self.ctx.comm
        samples = self.step_metrics.samples
        result = dict(
            run=self.run.run_id,
            steps=s.step,
            epochs=s.step / self.steps_per_epoch,
            final_loss=self.loss_value,
            test_loss=test_loss,
            test_accuracy=test_acc,
            test_metrics=test,
            world_size=self.world,
            global_batch=self.global_batch,
            wall_s=time.time() - self.t_start,
            train_s=elapsed,
            samples_per_s=samples * self.world / elapsed if elapsed else 0.0,
            steps_per_s=(s.step - (s.resumed_from or 0)) / elapsed if elapsed else 0.0,
            restarts=self.place.restarts,
            resumed_from_step=s.resumed_from,
            time_split_s=dict(
                compute=split.compute,
                communication=split.communication,
                data=split.data,
                communication_overlapped=split.overlapped,
            ),
            # seconds: what the steps waited for; overlapped_seconds: in flight behind compute
            communication=dict(
                sent_bytes=comm.sent_bytes,
                received_bytes=comm.received_bytes,
                rounds=comm.rounds,
                seconds=comm.seconds,
                overlapped_seconds=comm.overlapped_seconds,
            ),
            history=self.history,
            algorithm=spec.algorithm.name,
            curve_snapshot_s=self.snapshot_s,
        )
        if self.rank == 0:
            self.publish(final=True)
            print(
                f"finished at step {s.step}: {_shown(test)}, {result['samples_per_s']:,.0f} samples/s",
                flush=True,
            )
            self._hparams(test)
            write_json_atomic(self.run.result_file, result)
        return result

    def _hparams(self, test: dict[str, float]) -> None:
        assert self.writer is not None  # rank 0, the one rank with a writer
        h = self.spec.hyper
        self.writer.add_hparams(
            dict(
                algorithm=self.spec.algorithm.name,
                world_size=self.world,
                batch_size=h.batch_size,
                global_batch=self.global_batch,
                lr=h.lr,
                optimizer=h.optimizer,
                lr_scaling=h.lr_scaling,
                seed=h.seed,
            ),
            {
                **{f"hparam/test_{k}": v for k, v in test.items() if k != "loss"},
                "hparam/final_loss": self.loss_value,
            },
            run_name=".",
        )

    def close(self) -> None:
        self.watchdog.stop()
        self.liveness.stop()
        if self.writer is not None:
            self.writer.close()
        self.strategy.close()
        if self.world > 1 and dist.is_initialized() and sys.exc_info()[0] is None:
            # A barrier, then a prompt exit (see bootstrap): gloo can abort in
            # destroy_process_group across hosts, leaving the launcher hanging.
            dist.barrier()


def _shown(test: dict[str, float]) -> str:
    """'test accuracy 0.9722, test loss 0.0913, test perplexity 4.1' (accuracy first)."""
    order = sorted(test, key=lambda k: (k != "accuracy", k != "loss", k))
    return ", ".join(f"test {k} {test[k]:.4f}" for k in order)


def train(spec: JobSpec, run: RunDir, shared_root: Path) -> dict[str, Any]:
    """Train one worker of `spec`, placed by the torchrun environment."""
    return Trainer(spec, run, shared_root, WorkerPlace.from_env()).train()


def main() -> int:
    """Entry of a built-in task's worker (called by the bootstrap)."""
    run = RunDir(E.RUN_DIR.require())
    shared_root = E.SHARED_ROOT.get(default=run.path.parent.parent)
    import yaml

    spec = JobSpec.model_validate(yaml.safe_load(run.spec.read_text()))
    train(spec, run, shared_root)
    return 0
