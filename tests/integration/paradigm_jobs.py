"""Helpers for the paradigm tests: run a real job on the local stack, scrape a worker's
/metrics, and read a worker's pace from its record."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

from alchemist_jobs.local_backend import LocalScheduler
from alchemist_jobs.rundir import RunDir
from alchemist_jobs.scheduler import RunStatus
from alchemist_jobs.spec import parse_spec

REPO = Path(__file__).resolve().parents[2]


def digits_job(name: str, algorithm: dict[str, Any], **over: Any) -> dict[str, Any]:
    """examples/digits.yaml's job (2 workers, 10 epochs) with another algorithm."""
    job = dict(name=name, task={"builtin": "digits", "digits": {"hidden": [64]}},
               procs_per_node=2, algorithm=algorithm,
               hyper={"batch_size": 32, "lr": 0.05, "momentum": 0.9, "epochs": 10, "seed": 0},
               data={"path": "data/digits"}, checkpoint={"every_steps": 50}, max_restarts=3)
    for key, value in over.items():
        job[key] = {**job[key], **value} if isinstance(value, dict) and key in job else value
    return job


class JobTimeout(Exception):
    pass


def run_job(home: Path, job: dict[str, Any], tick: Callable[[RunDir], None] | None = None,
            timeout: float = 240, scheduler: LocalScheduler | None = None) -> tuple[RunStatus, RunDir]:
    """Launch `job` like `alchemist run` does and wait for it; `tick(run)` is called while it
    runs. A job past `timeout` is stopped (nothing left running) and the test fails."""
    sched = scheduler or LocalScheduler(home)
    spec = parse_spec(job, f"<{job['name']}>", REPO)
    handle = sched.schedule(sched.dryrun(spec, REPO))
    deadline = time.monotonic() + timeout

    def on_tick() -> None:
        if time.monotonic() > deadline:
            raise JobTimeout(f"{handle.run.run_id} still running after {timeout} s")
        if tick is not None:
            tick(handle.run)

    try:
        status = sched.wait(handle, tick=on_tick)
    except BaseException:
        sched.interrupt(handle)
        raise
    return status, handle.run


def scrape(where: int | str, timeout: float = 2.0) -> dict[str, float]:
    """Every sample of a worker's /metrics (a loopback port, or a URL such as the run's
    metrics bridge gives, ui/series.py `metrics_url`), summed by sample name."""
    from prometheus_client.parser import text_string_to_metric_families

    url = where if isinstance(where, str) else f"http://127.0.0.1:{where}/metrics"
    with urllib.request.urlopen(url, timeout=timeout) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def epochs_done_by(record: dict[str, Any], t: float) -> float:
    """How many epochs a worker had finished at wall time t (linear within an epoch)."""
    ends = [record["train_started"]] + list(record["epoch_ends"])
    for k in range(1, len(ends)):
        if t <= ends[k]:
            return k - 1 + (t - ends[k - 1]) / (ends[k] - ends[k - 1])
    return float(len(ends) - 1)
