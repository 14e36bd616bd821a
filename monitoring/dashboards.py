"""Grafana dashboards as code (grafana-foundation-sdk, Grafana 11.6): training overview, job
drill-down, GPUs, queue. `python -m monitoring.generate` writes them to monitoring/dashboards/.

Every query is built from the metric contract's objects (monitoring/promql.py). Panels read a
`datasource` variable, so the same JSON works on any Grafana with a Prometheus data source.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

from alchemist_jobs.metric_contract import external, metric
from monitoring.promql import by, dcgm_by_pod, per_step, quantile, rate, v

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
UNITS = {
    "seconds": "s",
    "bytes": "bytes",
    "ratio": "percentunit",
    "watts": "watt",
    "percent": "percent",
    "mebibytes": "mbytes",
    "celsius": "celsius",
    "megahertz": "MHz",
}

# The contract's metrics, by short name, for readable queries below.
M = {
    n.removeprefix("alchemist_"): metric(n)
    for n in (
        "alchemist_steps_total",
        "alchemist_samples_total",
        "alchemist_epoch",
        "alchemist_loss",
        "alchemist_test_accuracy_ratio",
        "alchemist_learning_rate",
        "alchemist_script_metric",
        "alchemist_last_step_timestamp_seconds",
        "alchemist_global_batch_size",
        "alchemist_step_seconds",
        "alchemist_compute_seconds_total",
        "alchemist_communication_seconds_total",
        "alchemist_data_seconds_total",
        "alchemist_communication_overlapped_seconds_total",
        "alchemist_communication_sent_bytes_total",
        "alchemist_communication_received_bytes_total",
        "alchemist_sync_rounds_total",
        "alchemist_staleness_steps",
        "alchemist_server_updates_total",
        "alchemist_restarts",
        "alchemist_checkpoint_seconds",
        "alchemist_checkpoint_size_bytes",
        "alchemist_checkpoint_step",
        "alchemist_process_cpu_seconds_total",
        "alchemist_process_memory_bytes",
        "alchemist_gpu_utilization_ratio",
        "alchemist_gpu_memory_used_bytes",
        "alchemist_gpu_power_watts",
    )
}


@dataclass
class Board:
    """Collects rows and panels, numbering panel ids and query refIds itself."""

    title: str
    uid: str
    description: str
    variables: list = field(default_factory=list)
    items: list = field(default_factory=list)
    _next_id: int = 1

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def row(self, title: str) -> None:
        self.items.append(db.Row(title).id(self._id()))

    def series(
        self,
        title: str,
        queries: list[tuple[str, str]],
        unit: str = "short",
        description: str = "",
        stacked: bool = False,
        w: int = 12,
        h: int = 8,
    ) -> None:
        p = (
            timeseries.Panel()
            .id(self._id())
            .title(title)
            .description(description)
            .datasource(DS)
            .unit(unit)
            .span(w)
            .height(h)
            .fill_opacity(10 if not stacked else 40)
            .legend(
                cb.VizLegendOptions()
                .display_mode(cm.LegendDisplayMode.LIST)
                .placement(cm.LegendPlacement.BOTTOM)
                .show_legend(True)
            )
            .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING))
        )
        if stacked:
            p = p.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
        for i, (expr, legend) in enumerate(queries):
            p = p.with_target(
                prometheus.Dataquery().ref_id(chr(ord("A") + i)).expr(expr).legend_format(legend)
            )
        self.items.append(p)

    def stat(
        self,
        title: str,
        expr: str,
        legend: str,
        unit: str = "short",
        description: str = "",
        w: int = 6,
        h: int = 4,
    ) -> None:
        p = (
            stat.Panel()
            .id(self._id())
            .title(title)
            .description(description)
            .datasource(DS)
            .unit(unit)
            .span(w)
            .height(h)
            .graph_mode(cm.BigValueGraphMode.NONE)
            .with_target(prometheus.Dataquery().ref_id("A").expr(expr).legend_format(legend).instant())
        )
        self.items.append(p)

    def build(self) -> dm.Dashboard:
        d = (
            db.Dashboard(self.title)
            .uid(self.uid)
            .description(self.description)
            .tags(["alchemist"])
            .refresh("30s")
            .time("now-1h", "now")
            .timezone("browser")
            .tooltip(dm.DashboardCursorSync.CROSSHAIR)
            .editable()
        )
        d = d.with_variable(db.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        for var in self.variables:
            d = d.with_variable(var)
        for item in self.items:
            d = d.with_row(item) if isinstance(item, db.Row) else d.with_panel(item)
        return d.build()


def _var(name: str, query: str, label: str, multi: bool = True) -> db.QueryVariable:
    """A variable filled from `label_values(...)`; multi-valued ones offer All (regex .*)."""
    var = (
        db.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query(query)
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
    )
    if multi:
        var = var.multi(True).include_all(True).all_value(".*")
    return var


def _step_split(group: str, f: str, legend: str) -> list[tuple[str, str]]:
    """Seconds per step spent computing, exchanging and waiting for data, per `group`."""
    return [
        (per_step(M[f"{part}_seconds_total"], M["steps_total"], group, f), f"{legend} {part}")
        for part in ("compute", "communication", "data")
    ]


# --- training overview -------------------------------------------------------------------------


def training_overview() -> dm.Dashboard:
    f = 'job=~"$job"'
    run = "job, run"
    b = Board(
        "Alchemist / Training overview",
        "alchemist-training-overview",
        "Every running Alchemist job at a glance: loss, throughput, where step time goes, "
        "restarts and checkpoints. Select jobs with the `job` variable.",
        variables=[_var("job", f"label_values({v(M['steps_total'])}, job)", "Job")],
    )
    b.row("Progress")
    b.series(
        "Training loss",
        [(by(run, "avg", v(M["loss"], f=f)), "{{job}} {{run}}")],
        description="Mean over the run's workers of the last step's loss.",
    )
    b.series(
        "Samples/s, total",
        [(by(run, "sum", rate(M["samples_total"], f=f)), "{{job}} {{run}}")],
        unit="short",
        description="Training throughput of the whole run.",
    )
    b.series(
        "Samples/s per worker",
        [(by(run + ", rank", "sum", rate(M["samples_total"], f=f)), "{{run}} rank {{rank}}")],
        description="A worker far below its peers is a straggler.",
    )
    b.series(
        "Test accuracy",
        [(by(run, "max", v(M["test_accuracy_ratio"], f=f)), "{{job}} {{run}}")],
        unit="percentunit",
        w=6,
    )
    b.series("Learning rate", [(by(run, "max", v(M["learning_rate"], f=f)), "{{job}} {{run}}")], w=6)
    b.row("Step time")
    b.series(
        "Step time split: compute, communication, data",
        _step_split(run, f, "{{run}}"),
        unit="s",
        stacked=True,
        description="Seconds per optimizer step, summed over workers' shares: compute, "
        "waiting for gradient/model exchange (exposed communication), waiting "
        "for the next batch.",
    )
    b.series(
        "Step time quantiles",
        [
            (quantile(0.5, M["step_seconds"], run, f), "{{run}} p50"),
            (quantile(0.95, M["step_seconds"], run, f), "{{run}} p95"),
        ],
        unit="s",
    )
    b.series(
        "Communication per step: waited for, hidden behind compute",
        [
            (per_step(M["communication_seconds_total"], M["steps_total"], run, f), "{{run}} waited"),
            (
                per_step(M["communication_overlapped_seconds_total"], M["steps_total"], run, f),
                "{{run}} overlapped",
            ),
        ],
        unit="s",
        description="Exchange the step waited for (the step-time split's "
        "communication), and exchange in flight while the step computed (sync: DDP's "
        "buckets during backward), which costs no step time.",
    )
    b.series(
        "Communication traffic",
        [
            (by(run, "sum", rate(M["communication_sent_bytes_total"], f=f)), "{{run}} sent"),
            (by(run, "sum", rate(M["communication_received_bytes_total"], f=f)), "{{run}} received"),
        ],
        unit="Bps",
        description="Payload bytes per second between processes, all workers.",
    )
    b.series("Synchronisation rounds/s", [(by(run, "sum", rate(M["sync_rounds_total"], f=f)), "{{run}}")])
    b.row("Restarts and checkpoints")
    b.stat(
        "Restarts",
        by(run, "max", v(M["restarts"], f=f)),
        "{{run}}",
        description="Worker-group restarts of the run (torchrun's restart count).",
    )
    b.stat(
        "Seconds since the last step",
        f"time() - {by(run, 'max', v(M['last_step_timestamp_seconds'], f=f))}",
        "{{run}}",
        unit="s",
        description="Grows while a run makes no progress (alert: AlchemistJobStalled).",
    )
    b.stat("Newest checkpoint step", by(run, "max", v(M["checkpoint_step"], f=f)), "{{run}}")
    b.stat(
        "Newest checkpoint size", by(run, "max", v(M["checkpoint_size_bytes"], f=f)), "{{run}}", unit="bytes"
    )
    b.series(
        "Checkpoint write time",
        [
            (
                f"{by(run, 'sum', v(M['checkpoint_seconds'], 'sum', f))} / "
                f"{by(run, 'sum', v(M['checkpoint_seconds'], 'count', f))}",
                "{{run}} mean",
            ),
            (quantile(0.95, M["checkpoint_seconds"], run, f, window=None), "{{run}} p95"),
        ],
        unit="s",
        w=24,
        description="Over the whole run so far (checkpoints are rare).",
    )
    b.row("Resources")
    b.series(
        "CPU per worker (cores)",
        [(by(run + ", rank", "sum", rate(M["process_cpu_seconds_total"], f=f)), "{{run}} rank {{rank}}")],
        w=8,
    )
    b.series(
        "Memory per worker",
        [(by(run + ", rank", "max", v(M["process_memory_bytes"], f=f)), "{{run}} rank {{rank}}")],
        unit="bytes",
        w=8,
    )
    b.series(
        "GPU utilisation per worker (NVML)",
        [(by(run + ", rank", "avg", v(M["gpu_utilization_ratio"], f=f)), "{{run}} rank {{rank}}")],
        unit="percentunit",
        w=8,
        description="Only workers that train on a GPU report it.",
    )
    return b.build()


# --- per-job drill-down ------------------------------------------------------------------------


def job_drilldown() -> dm.Dashboard:
    jf, rf = 'job=~"$job"', 'run=~"$run"'
    f = f'{jf}, {rf}, rank=~"$rank"'
    r = "rank"
    b = Board(
        "Alchemist / Job drill-down",
        "alchemist-job-drilldown",
        "One run, worker by worker: pick the job, the run and the ranks.",
        variables=[
            _var("job", f"label_values({v(M['steps_total'])}, job)", "Job", multi=False),
            _var("run", f"label_values({v(M['steps_total'], f=jf)}, run)", "Run", multi=False),
            _var("rank", f"label_values({v(M['steps_total'], f=f'{jf}, {rf}')}, rank)", "Rank"),
        ],
    )
    b.row("Summary")
    b.stat("Workers", f"count({v(M['steps_total'], f=f)})", "workers")
    b.stat("Steps (max over workers)", f"max({v(M['steps_total'], f=f)})", "steps")
    b.stat("Global batch", f"max({v(M['global_batch_size'], f=f)})", "samples")
    b.stat("Test accuracy", f"max({v(M['test_accuracy_ratio'], f=f)})", "accuracy", unit="percentunit")
    b.row("Progress per worker")
    b.series("Loss", [(by(r, "avg", v(M["loss"], f=f)), "rank {{rank}}")])
    b.series("Samples/s", [(by(r, "sum", rate(M["samples_total"], f=f)), "rank {{rank}}")])
    b.series("Epoch", [(by(r, "max", v(M["epoch"], f=f)), "rank {{rank}}")], w=8)
    b.series("Learning rate", [(by(r, "max", v(M["learning_rate"], f=f)), "rank {{rank}}")], w=8)
    b.series(
        "Seconds since the last step",
        [(f"time() - {by(r, 'max', v(M['last_step_timestamp_seconds'], f=f))}", "rank {{rank}}")],
        unit="s",
        w=8,
    )
    b.row("Where each worker's step time goes")
    b.series("Step time split", _step_split(r, f, "rank {{rank}}"), unit="s", stacked=True)
    b.series("Step time p95", [(quantile(0.95, M["step_seconds"], r, f), "rank {{rank}}")], unit="s")
    b.row("Communication per worker")
    b.series(
        "Bytes sent/s",
        [(by(r, "sum", rate(M["communication_sent_bytes_total"], f=f)), "rank {{rank}}")],
        unit="Bps",
        w=8,
    )
    b.series(
        "Bytes received/s",
        [(by(r, "sum", rate(M["communication_received_bytes_total"], f=f)), "rank {{rank}}")],
        unit="Bps",
        w=8,
    )
    b.series(
        "Synchronisation rounds/s", [(by(r, "sum", rate(M["sync_rounds_total"], f=f)), "rank {{rank}}")], w=8
    )
    b.series(
        "Staleness (parameter server)",
        [
            (quantile(0.5, M["staleness_steps"], r, f), "rank {{rank}} p50"),
            (quantile(0.95, M["staleness_steps"], r, f), "rank {{rank}} p95"),
        ],
        description="Server steps between a worker's read and its update (async runs only).",
    )
    b.series(
        "Parameter-server updates/s",
        [(by(r, "sum", rate(M["server_updates_total"], f=f)), "server {{rank}}")],
    )
    b.row("Restarts and checkpoints")
    b.series("Restarts", [(by(r, "max", v(M["restarts"], f=f)), "rank {{rank}}")], w=8)
    b.series(
        "Checkpoint write time (mean)",
        [
            (
                f"{by(r, 'sum', v(M['checkpoint_seconds'], 'sum', f))} / "
                f"{by(r, 'sum', v(M['checkpoint_seconds'], 'count', f))}",
                "rank {{rank}}",
            )
        ],
        unit="s",
        w=8,
    )
    b.series("Newest checkpoint step", [(by(r, "max", v(M["checkpoint_step"], f=f)), "rank {{rank}}")], w=8)
    b.series(
        "Script metrics (report())",
        [(by(r + ", name", "max", v(M["script_metric"], f=f)), "rank {{rank}} {{name}}")],
        description="Values a script task reported with alchemist_jobs.report.report().",
    )
    b.row("Process and GPU")
    b.series("CPU (cores)", [(by(r, "sum", rate(M["process_cpu_seconds_total"], f=f)), "rank {{rank}}")], w=8)
    b.series(
        "Memory", [(by(r, "max", v(M["process_memory_bytes"], f=f)), "rank {{rank}}")], unit="bytes", w=8
    )
    b.series(
        "GPU utilisation (NVML)",
        [(by(r + ", gpu", "avg", v(M["gpu_utilization_ratio"], f=f)), "rank {{rank}} gpu {{gpu}}")],
        unit="percentunit",
        w=8,
    )
    b.series(
        "GPU memory used (NVML)",
        [(by(r + ", gpu", "max", v(M["gpu_memory_used_bytes"], f=f)), "rank {{rank}} gpu {{gpu}}")],
        unit="bytes",
    )
    b.series(
        "GPU power (NVML)",
        [(by(r + ", gpu", "max", v(M["gpu_power_watts"], f=f)), "rank {{rank}} gpu {{gpu}}")],
        unit="watt",
    )
    return b.build()


# --- GPUs ------------------------------------------------------------------------------------


def gpus() -> dm.Dashboard:
    host = 'Hostname=~"$host"'
    fj = 'job=~"$job"'
    dcgm = {
        n: external(n)
        for n in (
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_MEM_COPY_UTIL",
            "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_SM_CLOCK",
            "DCGM_FI_DEV_XID_ERRORS",
        )
    }
    g = "Hostname, gpu"
    b = Board(
        "Alchemist / GPUs",
        "alchemist-gpus",
        "Every GPU from NVIDIA's DCGM exporter (GPU Operator), and what each Alchemist "
        "worker reads from NVML about its own GPU.",
        variables=[
            _var("host", f"label_values({v(dcgm['DCGM_FI_DEV_GPU_UTIL'])}, Hostname)", "Host"),
            _var("job", f"label_values({v(M['gpu_utilization_ratio'])}, job)", "Job"),
        ],
    )
    b.row("Cluster GPUs (DCGM exporter)")
    b.series(
        "GPU utilisation",
        [(by(g, "avg", v(dcgm["DCGM_FI_DEV_GPU_UTIL"], f=host)), "{{Hostname}} gpu {{gpu}}")],
        unit="percent",
    )
    b.series(
        "Memory bandwidth utilisation",
        [(by(g, "avg", v(dcgm["DCGM_FI_DEV_MEM_COPY_UTIL"], f=host)), "{{Hostname}} gpu {{gpu}}")],
        unit="percent",
    )
    b.series(
        "Frame buffer used",
        [(by(g, "max", v(dcgm["DCGM_FI_DEV_FB_USED"], f=host)), "{{Hostname}} gpu {{gpu}}")],
        unit="mbytes",
        w=8,
    )
    b.series(
        "Frame buffer used share",
        [
            (
                f"{by(g, 'max', v(dcgm['DCGM_FI_DEV_FB_USED'], f=host))} / "
                f"({by(g, 'max', v(dcgm['DCGM_FI_DEV_FB_USED'], f=host))} + "
                f"{by(g, 'max', v(dcgm['DCGM_FI_DEV_FB_FREE'], f=host))})",
                "{{Hostname}} gpu {{gpu}}",
            )
        ],
        unit="percentunit",
        w=8,
    )
    b.series(
        "Power",
        [(by(g, "max", v(dcgm["DCGM_FI_DEV_POWER_USAGE"], f=host)), "{{Hostname}} gpu {{gpu}}")],
        unit="watt",
        w=8,
    )
    b.series(
        "Temperature",
        [(by(g, "max", v(dcgm["DCGM_FI_DEV_GPU_TEMP"], f=host)), "{{Hostname}} gpu {{gpu}}")],
        unit="celsius",
        w=8,
    )
    b.series(
        "SM clock",
        [(by(g, "max", v(dcgm["DCGM_FI_DEV_SM_CLOCK"], f=host)), "{{Hostname}} gpu {{gpu}}")],
        unit="MHz",
        w=8,
    )
    b.series(
        "Last XID error",
        [(by(g, "max", v(dcgm["DCGM_FI_DEV_XID_ERRORS"], f=host)), "{{Hostname}} gpu {{gpu}}")],
        w=8,
        description="Non-zero: the driver reported an XID error on that GPU.",
    )
    b.row("Alchemist jobs' GPUs (DCGM, by pod)")
    pods = (
        f"* on (namespace, pod) group_left (job, run) "
        f"({by('namespace, pod, job, run', 'max', v(M['process_memory_bytes'], f=fj))} > bool 0)"
    )
    b.series(
        "GPU utilisation per job pod",
        [
            (
                f"{by('namespace, pod', 'avg', dcgm_by_pod(dcgm['DCGM_FI_DEV_GPU_UTIL']))} {pods}",
                "{{run}} {{pod}}",
            )
        ],
        unit="percent",
        description="Every GPU a job's pod holds, as DCGM sees it: also for scripts, "
        "parameter servers and processes that never started CUDA.",
    )
    b.series(
        "Frame buffer used per job pod",
        [
            (
                f"{by('namespace, pod', 'sum', dcgm_by_pod(dcgm['DCGM_FI_DEV_FB_USED']))} {pods}",
                "{{run}} {{pod}}",
            )
        ],
        unit="mbytes",
    )
    b.row("Alchemist workers' GPUs (NVML)")
    w = "job, run, rank, gpu"
    b.series(
        "Utilisation per worker",
        [(by(w, "avg", v(M["gpu_utilization_ratio"], f=fj)), "{{run}} rank {{rank}} gpu {{gpu}}")],
        unit="percentunit",
        w=8,
    )
    b.series(
        "Memory used per worker",
        [(by(w, "max", v(M["gpu_memory_used_bytes"], f=fj)), "{{run}} rank {{rank}} gpu {{gpu}}")],
        unit="bytes",
        w=8,
    )
    b.series(
        "Power per worker",
        [(by(w, "max", v(M["gpu_power_watts"], f=fj)), "{{run}} rank {{rank}} gpu {{gpu}}")],
        unit="watt",
        w=8,
    )
    # The worker's `gpu` is its container's NVML index; DCGM's is the host's: join on UUID.
    b.series(
        "Host GPU of each worker (DCGM, joined on UUID)",
        [
            (
                f"{by('UUID, Hostname, gpu', 'avg', v(dcgm['DCGM_FI_DEV_GPU_UTIL']))} "
                f"* on (UUID) group_left (job, run, rank) "
                f"({by('UUID, job, run, rank', 'max', v(M['gpu_utilization_ratio'], f=fj))} > bool -1)",
                "{{run}} rank {{rank}}: {{Hostname}} gpu {{gpu}}",
            )
        ],
        unit="percent",
    )
    return b.build()


# --- queue -----------------------------------------------------------------------------------


def queue() -> dm.Dashboard:
    k = {
        n: external(n)
        for n in (
            "kueue_pending_workloads",
            "kueue_admitted_active_workloads",
            "kueue_admitted_workloads_total",
            "kueue_evicted_workloads_total",
            "kueue_admission_wait_time_seconds",
            "kueue_cluster_queue_status",
        )
    }
    f = 'cluster_queue=~"$cluster_queue"'
    cq = "cluster_queue"
    b = Board(
        "Alchemist / Queue",
        "alchemist-queue",
        "Kueue: jobs waiting for and holding quota, per ClusterQueue (one per team).",
        variables=[
            _var(
                "cluster_queue",
                f"label_values({v(k['kueue_pending_workloads'])}, cluster_queue)",
                "ClusterQueue",
            )
        ],
    )
    b.row("Workloads")
    b.series(
        "Pending workloads",
        [(by(cq + ", status", "sum", v(k["kueue_pending_workloads"], f=f)), "{{cluster_queue}} {{status}}")],
        stacked=True,
        description="active: waiting for quota; inadmissible: cannot be admitted as is.",
    )
    b.series(
        "Admitted, running workloads",
        [(by(cq, "sum", v(k["kueue_admitted_active_workloads"], f=f)), "{{cluster_queue}}")],
        stacked=True,
    )
    b.series(
        "Admissions/s",
        [(by(cq, "sum", rate(k["kueue_admitted_workloads_total"], f=f)), "{{cluster_queue}}")],
        w=8,
    )
    b.series(
        "Admission wait",
        [
            (quantile(0.5, k["kueue_admission_wait_time_seconds"], cq, f), "{{cluster_queue}} p50"),
            (quantile(0.95, k["kueue_admission_wait_time_seconds"], cq, f), "{{cluster_queue}} p95"),
        ],
        unit="s",
        w=8,
    )
    b.series(
        "Evictions/s",
        [
            (
                by(cq + ", reason", "sum", rate(k["kueue_evicted_workloads_total"], f=f)),
                "{{cluster_queue}} {{reason}}",
            )
        ],
        w=8,
    )
    b.series(
        "ClusterQueue status",
        [
            (
                f"{by(cq + ', status', 'max', v(k['kueue_cluster_queue_status'], f=f))} == 1",
                "{{cluster_queue}} {{status}}",
            )
        ],
        w=24,
        description="Which status each queue is in.",
    )
    return b.build()


DASHBOARDS = {
    "training-overview": training_overview,
    "job-drilldown": job_drilldown,
    "gpus": gpus,
    "queue": queue,
}


def render() -> dict[str, str]:
    """File name -> JSON text of every dashboard, stable (sorted keys) so diffs stay small."""
    return {
        f"{name}.json": json.dumps(build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"
        for name, build in DASHBOARDS.items()
    }
