"""Progress and metrics of `script:` and `module:` tasks: what the bootstrap serves for every
such worker, and what a script may report through `alchemist_jobs.report.report()`.

Every worker of a script serves the contract's process (and, once it uses CUDA, GPU) metrics
on its own port, recorded in the run directory like a built-in worker's. A script that calls
`report(step=..., loss=..., **values)` also gets the step and loss metrics, its own values as
`alchemist_script_metric{name=...}`, progress for `run`/`list`/`status` with the latest
value of each (rank 0), the series of every step in the run directory's series.jsonl (rank
0; the dashboard's charts, during and after the run) and TensorBoard scalars (rank 0). Outside an Alchemist run `report()` does nothing, so a script
stays runnable with plain `python` or `torchrun`.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from alchemist_jobs.metric_contract import metric
from alchemist_jobs.rundir import RunDir, read_json, write_json_atomic
from alchemist_jobs.runtime.config_error import fail
from alchemist_jobs.runtime.event_writer import summary_writer
from alchemist_jobs.runtime.metrics import WorkerMetrics
from alchemist_jobs.runtime.series_file import append_series

PROGRESS_EVERY_S = 0.5
_current: ScriptReporter | None = None


class _ValuesCollector:
    """`alchemist_script_metric{name=...}`: one series per name the script reported."""

    def __init__(self, labels: dict[str, str]):
        self.keys, self.base = list(labels) + ["name"], list(labels.values())
        self.values: dict[str, float] = {}

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        m = metric("alchemist_script_metric")
        fam = GaugeMetricFamily(m.name, m.help, labels=self.keys)
        for name, value in sorted(self.values.items()):
            fam.add_metric(self.base + [name], value)
        yield fam


class ScriptReporter:
    """One per script worker; `report()` is safe to call from any thread."""

    def __init__(self, run: RunDir, rank: int, world: int, metrics: WorkerMetrics, restarts: int = 0):
        self.run, self.rank, self.world, self.metrics = run, rank, world, metrics
        self.restarts = restarts
        self.step, self.loss = 0, float("nan")
        self.total_steps: int | None = None
        self.samples, self.t0 = 0, time.perf_counter()
        self._lock = threading.Lock()
        self._last_progress = 0.0
        self._writer: Any = None
        self._timer: threading.Timer | None = None
        self.applied = False  # the script handed its loop to alchemist_jobs.prepare
        self.reported: dict[str, float] = {}  # the latest value of each name (rank 0)
        self._point: dict[str, Any] | None = None  # the current step's values (rank 0)
        self._points: list[dict[str, Any]] = []  # steps done, not yet in the series file
        self._values = _ValuesCollector(metrics.labels)
        if metrics.registry is not None:
            metrics.registry.register(self._values)

    def report(
        self,
        step: int | None = None,
        loss: float | None = None,
        total_steps: int | None = None,
        samples: int | None = None,
        **values: float,
    ) -> None:
        if step is not None:
            self._check_applied()
        with self._lock:
            m = self.metrics
            if step is not None and step > self.step:
                m["alchemist_steps_total"].inc(step - self.step)
                m["alchemist_last_step_timestamp_seconds"].set(time.time())
                self.step = int(step)
            if loss is not None:
                self.loss = float(loss)
                m["alchemist_loss"].set(self.loss)
            if total_steps is not None:
                self.total_steps = int(total_steps)
            if samples is not None:
                self.samples += int(samples)
                m["alchemist_samples_total"].inc(int(samples))
            for name, value in values.items():
                self._values.values[name] = float(value)
            if self.rank == 0:
                self.reported.update((k, float(v)) for k, v in values.items() if _finite(v))
                self._record_point(values)
                self._publish(values, final=False)

    def loop_step(self, step: int) -> None:
        """A step of a loop under `alchemist_jobs.prepare`, whose step metrics are recorded
        already (own_loop.py): progress only, and `report(step=...)` with the same count
        adds nothing."""
        with self._lock:
            self.step = max(self.step, int(step))
            if self.rank == 0:
                self._record_point({})
                self._publish({}, final=False)

    def _check_applied(self) -> None:
        """A script that reports a step under a non-sync algorithm without `prepare` would
        train as independent copies: stop it here, with one line and no restart."""
        algorithm = self.metrics.labels.get("algorithm", "sync")
        if algorithm == "sync" or self.applied:
            return
        code = fail(not_applied_message(algorithm, sys.argv[0] or "the script"))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def _publish(self, values: dict[str, float], final: bool) -> None:
        """Rank 0: progress for the console (throttled), every value into TensorBoard."""
        writer = self._tensorboard()
        if not math.isnan(self.loss):
            writer.add_scalar("train/loss", self.loss, self.step)
        for name, value in values.items():
            writer.add_scalar(f"script/{name}", float(value), self.step)
        now = time.perf_counter()
        if not final and now - self._last_progress < PROGRESS_EVERY_S:
            self._write_later()
            return
        self._write_progress(final)

    def _write_later(self) -> None:
        """Throttled: the newest state is written once the interval is over, even when the
        script reports nothing more until then (a long evaluation, a slow last step)."""
        if self._timer is None:
            self._timer = threading.Timer(PROGRESS_EVERY_S, self._flush)
            self._timer.daemon = True
            self._timer.start()

    def _flush(self) -> None:
        with self._lock:
            self._timer = None
            self._write_progress(final=False)

    def _rate(self) -> float:
        elapsed = time.perf_counter() - self.t0
        return self.samples * self.world / elapsed if elapsed > 0 else 0.0

    def _record_point(self, values: dict[str, float]) -> None:
        """The series at step resolution: one point per step, with the step's last loss,
        rate, communication seconds (a loop under `prepare`) and every value reported."""
        if not self.step:
            return
        if self._point is not None and self._point["step"] != self.step:
            self._points.append(self._point)
            self._point = None
        if self._point is None:
            self._point = dict(step=self.step, metrics={})
        p = self._point
        if not math.isnan(self.loss):
            p["loss"] = self.loss
        p["samples_per_s"] = self._rate()
        comm = _counter_value(self.metrics["alchemist_communication_seconds_total"])
        if comm:
            p["communication_s"] = comm
        p["metrics"].update((k, float(v)) for k, v in values.items() if _finite(v))
        p["time"] = time.time()

    def _write_series(self, final: bool) -> None:
        """Append the steps done (and at the end the last one) to series.jsonl."""
        points, self._points = self._points, []
        if final and self._point is not None:
            points.append(self._point)
            self._point = None
        append_series(self.run.path, points)

    def _write_progress(self, final: bool) -> None:
        now = time.perf_counter()
        self._last_progress = now
        self._write_series(final)
        write_json_atomic(
            self.run.progress_file,
            dict(
                step=self.step,
                total_steps=self.total_steps,
                epoch=0,
                epochs=1,
                loss=self.loss,
                lr=None,
                samples_per_s=self._rate(),
                metrics=dict(self.reported),
                restarts=self.restarts,
                time=time.time(),
                final=final,
                source="script",
            ),
        )

    def _tensorboard(self) -> Any:
        if self._writer is None:
            self._writer = summary_writer(str(self.run.tensorboard))
        return self._writer

    def close(self) -> None:
        """At the script's end: the last progress, flushed scalars."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self.rank == 0 and (self.step or self._writer is not None):
                self._publish({}, final=True)
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            if self.step:  # the step this worker reached: a failure's place (local_backend)
                record = self.run.worker_file(self.rank)
                try:
                    write_json_atomic(record, dict(read_json(record) or {}, step=self.step))
                except OSError:
                    pass


def _counter_value(counter: Any) -> float:
    """A prometheus counter child's value (0 for metrics that are off)."""
    try:
        return float(counter._value.get())
    except (AttributeError, TypeError, ValueError):
        return 0.0


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def not_applied_message(algorithm: str, target: str) -> str:
    return (
        f"algorithm {algorithm} was never applied: {target} did not call "
        f"alchemist_jobs.prepare(model, optimizer), so its workers would train as "
        f"independent copies; add `model, optimizer = alchemist_jobs.prepare(model, "
        f"optimizer)` after building them (docs/bring-your-model.md), or use "
        f"algorithm: sync with your own DDP"
    )


def install(
    run_dir: Path,
    rank: int,
    world: int,
    local_rank: int,
    restarts: int,
    labels: dict[str, str],
    enabled: bool,
) -> tuple[ScriptReporter, int | None]:
    """Serve this script worker's metrics and make `report()` reach them; returns the
    reporter and the metrics port (None with metrics off)."""
    global _current
    metrics = WorkerMetrics(labels, enabled=enabled)
    port = metrics.serve(local_rank)
    if enabled:
        metrics.add_system_collector()
    metrics["alchemist_restarts"].set(restarts)
    _current = ScriptReporter(RunDir(run_dir), rank, world, metrics, restarts)
    return _current, port


def current() -> ScriptReporter | None:
    return _current
