"""The metric contract: every metric Alchemist workers and parameter servers export.

Workers create their metrics from this table (runtime/metrics.py); dashboards and alert
rules in monitoring/ name metrics only through it, so a panel can never query a metric that
nothing exports. Names follow Prometheus conventions: `alchemist_` prefix, base units,
`_total` for counters, `_seconds` and `_bytes` suffixes.

It lives in the package, not in monitoring/, because every worker on every stack imports it
at run time; monitoring/ holds what is generated from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Labels on every series a worker exports: which job, which run, which worker.
BASE_LABELS = ("job", "run", "rank", "node", "algorithm")


@dataclass(frozen=True)
class Metric:
    name: str
    type: Literal["counter", "gauge", "histogram"]
    help: str
    unit: str = ""  # base unit: seconds, bytes, ratio, watts, steps, samples or "" (none)
    extra_labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()  # histograms only
    role: Literal["worker", "server", "both"] = "worker"
    gpu_only: bool = False  # exported only where a GPU exists

    @property
    def labels(self) -> tuple[str, ...]:
        return BASE_LABELS + self.extra_labels

    @property
    def series(self) -> str:
        """The name a query uses for the main series (`_bucket` etc. aside)."""
        return self.name


_STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

METRICS: tuple[Metric, ...] = (
    # --- progress ---------------------------------------------------------------------
    Metric("alchemist_steps_total", "counter", "Optimizer steps completed.", "steps"),
    Metric("alchemist_samples_total", "counter", "Training samples processed.", "samples"),
    Metric("alchemist_epoch", "gauge", "Current epoch (fractional)."),
    Metric("alchemist_loss", "gauge", "Training loss of the last step."),
    Metric("alchemist_test_accuracy_ratio", "gauge", "Test accuracy at the last evaluation.", "ratio"),
    Metric("alchemist_learning_rate", "gauge", "Learning rate of the last step."),
    Metric("alchemist_last_step_timestamp_seconds", "gauge",
           "Unix time at which the last optimizer step finished.", "seconds"),
    Metric("alchemist_global_batch_size", "gauge", "Samples per optimizer step over all workers.",
           "samples"),
    # --- where a step's time goes -----------------------------------------------------------
    Metric("alchemist_step_seconds", "histogram", "Wall time of one optimizer step.", "seconds",
           buckets=_STEP_BUCKETS),
    Metric("alchemist_compute_seconds_total", "counter",
           "Step time not spent waiting on communication or data.", "seconds"),
    Metric("alchemist_communication_seconds_total", "counter",
           "Time during which gradient or model exchange was in flight.", "seconds", role="both"),
    Metric("alchemist_data_seconds_total", "counter", "Time spent waiting for the next batch.",
           "seconds"),
    # --- communication ---------------------------------------------------------------------
    Metric("alchemist_communication_sent_bytes_total", "counter",
           "Payload bytes this process sent to other processes.", "bytes", role="both"),
    Metric("alchemist_communication_received_bytes_total", "counter",
           "Payload bytes this process received from other processes.", "bytes", role="both"),
    Metric("alchemist_sync_rounds_total", "counter",
           "Synchronisation rounds (all-reduces of the model or its gradients, or PS exchanges).",
           role="both"),
    Metric("alchemist_staleness_steps", "histogram",
           "Server steps between a worker's read of the parameters and the update it sent (async).",
           "steps", buckets=(0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64), role="both"),
    Metric("alchemist_server_updates_total", "counter",
           "Updates the parameter server applied.", role="server"),
    # --- resilience ------------------------------------------------------------------------
    Metric("alchemist_restarts", "gauge",
           "Times this worker group has been restarted (TORCHELASTIC_RESTART_COUNT).", role="both"),
    Metric("alchemist_checkpoint_seconds", "histogram", "Time to write one checkpoint.", "seconds",
           buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60), role="both"),
    Metric("alchemist_checkpoint_size_bytes", "gauge", "Size of the newest checkpoint.", "bytes",
           role="both"),
    Metric("alchemist_checkpoint_step", "gauge", "Step of the newest complete checkpoint.",
           role="both"),
    # --- the process and its GPU ---------------------------------------------------------------
    Metric("alchemist_process_cpu_ratio", "gauge",
           "CPU used by this process, in cores (1.0 = one core busy).", "ratio", role="both"),
    Metric("alchemist_process_memory_bytes", "gauge", "Resident memory of this process.", "bytes",
           role="both"),
    Metric("alchemist_gpu_utilization_ratio", "gauge", "GPU busy fraction (NVML).", "ratio",
           extra_labels=("gpu",), gpu_only=True),
    Metric("alchemist_gpu_memory_used_bytes", "gauge", "GPU memory in use (NVML).", "bytes",
           extra_labels=("gpu",), gpu_only=True),
    Metric("alchemist_gpu_power_watts", "gauge", "GPU power draw (NVML).", "watts",
           extra_labels=("gpu",), gpu_only=True),
)

BY_NAME = {m.name: m for m in METRICS}


def metric(name: str) -> Metric:
    """Look a metric up by name; a name not in the contract is a programming error."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not in the metric contract (alchemist_jobs/metric_contract.py)")
