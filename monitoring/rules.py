"""Prometheus alert rules, built from the metric contract; `python -m monitoring.generate`
writes them to monitoring/rules/alchemist.rules.yaml (a rule file: top-level `groups:`), which
the local Prometheus loads as is and the cluster stacks wrap in a PrometheusRule.

Each expression says what is wrong *now*; its `for:` says for how long before anyone is paged.
Thresholds inside expressions are short on purpose (e.g. "no step in the last 30 s"), so the
durations live in `for:` alone and a test can shorten only those (`with_for`).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from alchemist_jobs.metric_contract import external, metric
from monitoring.promql import by, dcgm_by_pod, quantile, rate, v

FILE_NAME = "alchemist.rules.yaml"
GROUP = "alchemist"

# "Not stepping right now": no optimizer step finished in the last STALL_IDLE_S seconds. Longer
# than any sane step, evaluation or checkpoint; `for:` then asks that it last for minutes.
STALL_IDLE_S = 30
# Parameter-server staleness: p95 above max(8, 2 x workers) server steps. Some staleness is
# the nature of async SGD (about one step per other worker); far beyond it, updates are noise.
STALENESS_FLOOR = 8
# A node is a straggler below half its peers' mean throughput, or above twice their compute
# time per step (sync training keeps throughput equal: the slow node shows in compute time).
STRAGGLER_FACTOR = 2

_RUN = "job, run"


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, "source": "alchemist"},
        "annotations": {"summary": summary, "description": description},
    }


def _gpu_idle_alert() -> dict[str, Any]:
    dcgm_util = external("DCGM_FI_DEV_GPU_UTIL")
    process = metric("alchemist_process_memory_bytes")
    return _alert(
        "AlchemistGPUIdle",
        # DCGM sees every GPU a pod holds, whether or not its process ever started CUDA
        # (scripts, parameter servers, jobs that fell back to CPU); the pods' own process
        # series name the job and run they belong to.
        f"({by('namespace, pod', 'avg', dcgm_by_pod(dcgm_util))} < 5) "
        f"* on (namespace, pod) group_left (job, run) "
        f"({by('namespace, pod, job, run', 'max', v(process))} > bool 0)",
        "15m",
        "warning",
        "GPUs of {{ $labels.job }} run {{ $labels.run }} in pod {{ $labels.pod }} are idle",
        "DCGM reports the GPUs of this job pod under 5% busy: an input bottleneck, a stall, "
        "or a job that asked for GPUs it does not use.",
    )


def alerts() -> list[dict[str, Any]]:
    last_step = metric("alchemist_last_step_timestamp_seconds")
    loss = metric("alchemist_loss")
    restarts = metric("alchemist_restarts")
    staleness = metric("alchemist_staleness_steps")
    steps = metric("alchemist_steps_total")
    samples = metric("alchemist_samples_total")
    compute = metric("alchemist_compute_seconds_total")

    # Per-step losses are noisy: compare 5-minute averages, never single samples.
    smooth_loss = f"avg_over_time({v(loss)}[5m])"
    node = "job, run, node"
    node_rate = by(node, "sum", rate(samples, window="5m"))
    node_compute = (
        f"({by(node, 'sum', rate(compute, window='5m'))} / {by(node, 'sum', rate(steps, window='5m'))})"
    )
    return [
        _alert(
            "AlchemistJobStalled",
            f"time() - {by(_RUN, 'max', v(last_step) + ' > 0')} > {STALL_IDLE_S}",
            "10m",
            "critical",
            "Job {{ $labels.job }} run {{ $labels.run }} makes no progress",
            "No optimizer step has finished on any worker for {{ $value | humanizeDuration }}, "
            "while the workers are still up. Look for a hung collective, a dead data source or "
            "a full shared file system: `alchemist logs {{ $labels.run }} --rank N`.",
        ),
        _alert(
            "AlchemistLossNaN",
            f"{v(loss)} != {v(loss)} or abs({v(loss)}) == +Inf",
            "1m",
            "critical",
            "Loss of {{ $labels.job }} run {{ $labels.run }} rank {{ $labels.rank }} is not finite",
            "The training loss is NaN or infinite: the run diverged. Lower the learning rate, add "
            "warm-up, or resume from an earlier checkpoint.",
        ),
        _alert(
            "AlchemistLossExploding",
            f"{by(_RUN, 'avg', smooth_loss)} > 3 * "
            f"{by(_RUN, 'avg', 'min_over_time(' + smooth_loss + '[1h:1m] offset 5m)')}",
            "5m",
            "warning",
            "Loss of {{ $labels.job }} run {{ $labels.run }} is exploding",
            "The loss averaged over 5 minutes is {{ $value | humanize }}, over three times its "
            "lowest 5-minute average of the hour before: training is diverging.",
        ),
        _gpu_idle_alert(),
        _alert(
            "AlchemistRestartLoop",
            f"{by(_RUN, 'max', 'max_over_time(' + v(restarts) + '[30m])')} - "
            f"{by(_RUN, 'min', 'min_over_time(' + v(restarts) + '[30m])')} >= 3",
            "1m",
            "warning",
            "Workers of {{ $labels.job }} run {{ $labels.run }} restart in a loop",
            "The worker group restarted {{ $value }} times in 30 minutes. A restart resumes from "
            "the newest checkpoint; a crash that repeats needs a look at the worker logs.",
        ),
        _alert(
            "AlchemistStalenessHigh",
            f"{quantile(0.95, staleness, _RUN, window='5m')} > "
            f"clamp_min(2 * count by ({_RUN}) ({v(steps)}), {STALENESS_FLOOR})",
            "10m",
            "warning",
            "Parameter-server staleness of {{ $labels.job }} run {{ $labels.run }} is high",
            "95% of updates were computed on parameters up to {{ $value }} server steps old, "
            f"beyond max({STALENESS_FLOOR}, 2 x workers). Set algorithm.staleness_bound, or look "
            "for a slow worker.",
        ),
        _alert(
            "AlchemistStragglerThroughput",
            f"{node_rate} < on ({_RUN}) group_left {by(_RUN, 'avg', node_rate)} / {STRAGGLER_FACTOR}",
            "15m",
            "warning",
            "Node {{ $labels.node }} of {{ $labels.job }} run {{ $labels.run }} is a straggler",
            "Its workers process under half the samples per second of the run's average node.",
        ),
        _alert(
            "AlchemistStragglerCompute",
            f"{node_compute} > on ({_RUN}) group_left {STRAGGLER_FACTOR} * {by(_RUN, 'avg', node_compute)}",
            "15m",
            "warning",
            "Node {{ $labels.node }} of {{ $labels.job }} run {{ $labels.run }} is a straggler",
            "Its workers spend over twice the run's average compute time per step; in synchronous "
            "training every other worker waits for them.",
        ),
    ]


def document() -> dict[str, Any]:
    return {"groups": [{"name": GROUP, "rules": alerts()}]}


def render(doc: dict[str, Any] | None = None) -> str:
    head = (
        "# Generated by `python -m monitoring.generate` from monitoring/rules.py and the metric\n"
        "# contract (alchemist_jobs/metric_contract.py). Do not edit; change the code.\n"
    )
    return head + yaml.safe_dump(doc or document(), sort_keys=False, width=100)


def with_for(doc: dict[str, Any], duration: str) -> dict[str, Any]:
    """A copy of a rule document whose every `for:` is `duration` and nothing else changed
    (for tests: the shipped durations are minutes)."""
    out = copy.deepcopy(doc)
    for group in out["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = duration
    return out
