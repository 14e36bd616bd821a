"""The metric contract: every metric Alchemist workers and parameter servers export.

Workers create their metrics from this table (runtime/metrics.py, runtime/system_metrics.py);
dashboards and alert rules in monitoring/ name metrics only through it, so a panel can never
query a metric that nothing exports. Names follow Prometheus conventions: `alchemist_` prefix,
base units, `_total` for counters, `_seconds`, `_bytes` and `_ratio` suffixes.

The few metrics the dashboards read from other exporters (NVIDIA's DCGM exporter, Kueue) are
declared here too, as `EXTERNAL_METRICS`, with the names those projects document.

It lives in the package, not in monitoring/, because every worker on every stack imports it
at run time; monitoring/ holds what is generated from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Labels on every series a worker exports: which job, which run, which worker, where, how.
# Scrapes must keep them (Prometheus `honor_labels: true`, PodMonitor `honorLabels: true`):
# `job` is the Alchemist job's name, not the scrape job's.
BASE_LABELS = ("job", "run", "rank", "node", "algorithm")

MetricType = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True)
class Metric:
    name: str
    type: MetricType
    help: str
    unit: str = ""  # base unit: seconds, bytes, ratio, watts, steps, samples or "" (none)
    extra_labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()  # histograms only
    role: Literal["worker", "server", "both"] = "worker"
    # When the series exist: always (every built-in worker), only where the worker trains on a
    # GPU, or only in parameter-server runs (algorithm async, easgd variant async).
    when: Literal["always", "gpu", "parameter_server", "script"] = "always"

    @property
    def labels(self) -> tuple[str, ...]:
        return BASE_LABELS + self.extra_labels

    @property
    def series(self) -> tuple[str, ...]:
        """Every series name this metric produces on the wire."""
        return _series(self.name, self.type)


@dataclass(frozen=True)
class ExternalMetric:
    """A metric another exporter on the cluster stacks provides; dashboards read it."""

    name: str
    type: MetricType
    help: str
    source: Literal["dcgm-exporter", "kueue"]
    labels: tuple[str, ...] = ()
    unit: str = ""

    @property
    def series(self) -> tuple[str, ...]:
        return _series(self.name, self.type)


def _series(name: str, kind: str) -> tuple[str, ...]:
    if kind == "histogram":
        return (f"{name}_bucket", f"{name}_sum", f"{name}_count")
    return (name,)


_STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

METRICS: tuple[Metric, ...] = (
    # --- progress ---------------------------------------------------------------------
    Metric("alchemist_steps_total", "counter", "Optimizer steps completed.", "steps"),
    Metric("alchemist_samples_total", "counter", "Training samples processed.", "samples"),
    Metric("alchemist_epoch", "gauge", "Current epoch (fractional)."),
    Metric("alchemist_loss", "gauge", "Training loss of the last step."),
    Metric("alchemist_test_accuracy_ratio", "gauge", "Test accuracy at the last evaluation.", "ratio"),
    Metric("alchemist_learning_rate", "gauge", "Learning rate of the last step."),
    Metric(
        "alchemist_last_step_timestamp_seconds",
        "gauge",
        "Unix time at which the last optimizer step finished.",
        "seconds",
    ),
    Metric("alchemist_global_batch_size", "gauge", "Samples per optimizer step over all workers.", "samples"),
    # --- where a step's time goes -----------------------------------------------------------
    Metric(
        "alchemist_step_seconds",
        "histogram",
        "Wall time of one optimizer step.",
        "seconds",
        buckets=_STEP_BUCKETS,
    ),
    Metric(
        "alchemist_compute_seconds_total",
        "counter",
        "Step time not spent waiting on communication or data.",
        "seconds",
    ),
    Metric(
        "alchemist_communication_seconds_total",
        "counter",
        "Time the steps waited for gradient or model exchange (exposed communication).",
        "seconds",
        role="both",
    ),
    Metric(
        "alchemist_communication_overlapped_seconds_total",
        "counter",
        "Time exchange was in flight while the step computed (sync: buckets all-reduced "
        "during backward); not part of step time.",
        "seconds",
    ),
    Metric("alchemist_data_seconds_total", "counter", "Time spent waiting for the next batch.", "seconds"),
    # --- communication ---------------------------------------------------------------------
    Metric(
        "alchemist_communication_sent_bytes_total",
        "counter",
        "Payload bytes this process sent to other processes.",
        "bytes",
        role="both",
    ),
    Metric(
        "alchemist_communication_received_bytes_total",
        "counter",
        "Payload bytes this process received from other processes.",
        "bytes",
        role="both",
    ),
    Metric(
        "alchemist_sync_rounds_total",
        "counter",
        "Synchronisation rounds (all-reduces of the model or its gradients, or PS exchanges).",
        role="both",
    ),
    Metric(
        "alchemist_staleness_steps",
        "histogram",
        "Server steps between a worker's read of the parameters and the update it sent (async).",
        "steps",
        buckets=(0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64),
        role="both",
        when="parameter_server",
    ),
    Metric(
        "alchemist_server_updates_total",
        "counter",
        "Updates the parameter server applied.",
        role="server",
        when="parameter_server",
    ),
    # --- resilience ------------------------------------------------------------------------
    Metric(
        "alchemist_restarts",
        "gauge",
        "Times this worker group has been restarted (TORCHELASTIC_RESTART_COUNT).",
        role="both",
    ),
    Metric(
        "alchemist_checkpoint_seconds",
        "histogram",
        "Time to write one checkpoint.",
        "seconds",
        buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        role="both",
    ),
    Metric(
        "alchemist_checkpoint_size_bytes", "gauge", "Size of the newest checkpoint.", "bytes", role="both"
    ),
    Metric("alchemist_checkpoint_step", "gauge", "Step of the newest complete checkpoint.", role="both"),
    # --- the process and its GPU (read when scraped: runtime/system_metrics.py) ---------------
    Metric(
        "alchemist_process_cpu_seconds_total",
        "counter",
        "CPU time (user + system) this process has used.",
        "seconds",
        role="both",
    ),
    Metric(
        "alchemist_process_memory_bytes", "gauge", "Resident memory of this process.", "bytes", role="both"
    ),
    Metric(
        "alchemist_script_metric",
        "gauge",
        "A value a script reported with alchemist_jobs.report.report(NAME=value).",
        extra_labels=("name",),
        when="script",
    ),
    Metric(
        "alchemist_gpu_utilization_ratio",
        "gauge",
        "Fraction of the last sample period the worker's GPU was busy (NVML).",
        "ratio",
        extra_labels=("gpu", "UUID"),
        when="gpu",
    ),
    Metric(
        "alchemist_gpu_memory_used_bytes",
        "gauge",
        "Memory in use on the worker's GPU (NVML).",
        "bytes",
        extra_labels=("gpu", "UUID"),
        when="gpu",
    ),
    Metric(
        "alchemist_gpu_power_watts",
        "gauge",
        "Power draw of the worker's GPU (NVML).",
        "watts",
        extra_labels=("gpu", "UUID"),
        when="gpu",
    ),
)

# Created and updated on scrape by the system collector rather than by the training loop.
SYSTEM_METRICS = frozenset(
    {
        "alchemist_process_cpu_seconds_total",
        "alchemist_process_memory_bytes",
        "alchemist_gpu_utilization_ratio",
        "alchemist_gpu_memory_used_bytes",
        "alchemist_gpu_power_watts",
    }
)

_DCGM = ("gpu", "UUID", "device", "modelName", "Hostname")
_CQ = ("cluster_queue",)

# Names as NVIDIA's dcgm-exporter (default counters) and Kueue (docs: reference/metrics) export
# them; on the cluster stacks the GPU Operator and Kueue's own ServiceMonitor provide them.
EXTERNAL_METRICS: tuple[ExternalMetric, ...] = (
    ExternalMetric(
        "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilisation (percent).", "dcgm-exporter", _DCGM, "percent"
    ),
    ExternalMetric(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "gauge",
        "GPU memory bandwidth utilisation (percent).",
        "dcgm-exporter",
        _DCGM,
        "percent",
    ),
    ExternalMetric(
        "DCGM_FI_DEV_FB_USED", "gauge", "Frame buffer memory used (MiB).", "dcgm-exporter", _DCGM, "mebibytes"
    ),
    ExternalMetric(
        "DCGM_FI_DEV_FB_FREE", "gauge", "Frame buffer memory free (MiB).", "dcgm-exporter", _DCGM, "mebibytes"
    ),
    ExternalMetric("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (W).", "dcgm-exporter", _DCGM, "watts"),
    ExternalMetric(
        "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (C).", "dcgm-exporter", _DCGM, "celsius"
    ),
    ExternalMetric(
        "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (MHz).", "dcgm-exporter", _DCGM, "megahertz"
    ),
    ExternalMetric("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error.", "dcgm-exporter", _DCGM),
    ExternalMetric(
        "kueue_pending_workloads",
        "gauge",
        "Pending workloads per cluster_queue and status (active, inadmissible).",
        "kueue",
        _CQ + ("status",),
    ),
    ExternalMetric(
        "kueue_admitted_active_workloads",
        "gauge",
        "Admitted workloads that are active (unsuspended, not finished).",
        "kueue",
        _CQ,
    ),
    ExternalMetric("kueue_admitted_workloads_total", "counter", "Workloads admitted.", "kueue", _CQ),
    ExternalMetric(
        "kueue_evicted_workloads_total",
        "counter",
        "Workloads evicted, per cluster_queue and reason.",
        "kueue",
        _CQ + ("reason",),
    ),
    ExternalMetric(
        "kueue_admission_wait_time_seconds",
        "histogram",
        "Time from a workload's creation to its admission.",
        "kueue",
        _CQ,
        "seconds",
    ),
    ExternalMetric(
        "kueue_cluster_queue_status",
        "gauge",
        "1 for the cluster_queue's current status (pending, active, terminated).",
        "kueue",
        _CQ + ("status",),
    ),
)

BY_NAME = {m.name: m for m in METRICS}
EXTERNAL_BY_NAME = {m.name: m for m in EXTERNAL_METRICS}


def metric(name: str) -> Metric:
    """Look a metric up by name; a name not in the contract is a programming error."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not in the metric contract (alchemist_jobs/metric_contract.py)") from None


def external(name: str) -> ExternalMetric:
    try:
        return EXTERNAL_BY_NAME[name]
    except KeyError:
        raise KeyError(
            f"{name} is not among the contract's external metrics (alchemist_jobs/metric_contract.py)"
        ) from None


def known_series() -> frozenset[str]:
    """Every series name a dashboard or rule may query: ours and the declared external ones."""
    ours = frozenset(s for m in METRICS for s in m.series)
    return ours | frozenset(s for m in EXTERNAL_METRICS for s in m.series)
