"""Monitoring across the two halves: the platform's Prometheus selects its PodMonitor, the PodMonitor selects every job pod's metrics ports, and the NetworkPolicies let Prometheus in on them.

Prometheus-operator semantics (v0.83, Documentation/api.md, PrometheusSpec and PodMonitorSpec):
a Prometheus picks PodMonitors whose labels match `podMonitorSelector`, in the namespaces
`podMonitorNamespaceSelector` matches (an empty selector: every namespace; none: its own
only); a PodMonitor scrapes the pods its `selector` matches in the namespaces its
`namespaceSelector.matchNames` lists (or `any: true`), on each container port whose *name*
equals an endpoint's `port`. A worker of local rank r serves on ALCHEMIST_METRICS_PORT + r
(alchemist_jobs/runtime/metrics.py). The chart values come from the platform's own Chart
resource (its inputs; the chart itself is opaque under mocks).
"""

from __future__ import annotations

import pytest
from cluster_world import JOB_SHAPES, pods_of
from system_tier import STACK_NAMES

from alchemist_jobs.contract import metrics_port_name
from tests.k8s_admission import selects  # a LabelSelector, as apimachinery reads it


def pod_monitor(platform) -> dict:
    found = [o for o in platform.kube_objects("PodMonitor") if o["metadata"]["name"] == "alchemist-jobs"]
    assert len(found) == 1, found
    return found[0]


def prometheus_chart(platform) -> dict:
    charts = [r["inputs"] for r in platform.resources(":Chart") if r["inputs"].get("chart") == "kube-prometheus-stack"]
    assert len(charts) == 1, [r["name"] for r in platform.resources(":Chart")]
    return charts[0]


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_the_platforms_prometheus_picks_the_job_pod_monitor(platforms, worlds, stack):
    platform = platforms[stack]
    pm, chart = pod_monitor(platform), prometheus_chart(platform)
    spec = chart["values"]["prometheus"]["prometheusSpec"]
    assert selects(spec["podMonitorSelector"], pm["metadata"].get("labels") or {})
    ns_selector = spec.get("podMonitorNamespaceSelector")
    assert ns_selector == {} or pm["metadata"]["namespace"] == chart["namespace"], ns_selector
    # The Prometheus pod the connectivity check places is this chart's: its namespace, and the
    # Prometheus object `<fullnameOverride>-prometheus` the chart names.
    prom = worlds(stack).prometheus
    assert prom.namespace == chart["namespace"]
    assert prom.labels["prometheus"] == f"{chart['values']['fullnameOverride']}-prometheus"


@pytest.mark.parametrize("shape", JOB_SHAPES)
@pytest.mark.parametrize("stack", STACK_NAMES)
def test_the_pod_monitor_scrapes_every_metrics_port_of_every_job_pod_and_policy_lets_it(
        platforms, worlds, jobs, stack, shape):  # fmt: skip
    job = jobs(stack, shape)
    if job is None:
        pytest.skip(f"stack {stack} cannot have shape {shape}")
    pm = pod_monitor(platforms[stack])["spec"]
    endpoint_ports = {e["port"] for e in pm["podMetricsEndpoints"]}
    world = worlds(stack)
    missed = []
    for rjob, template in job.pod_templates():
        labels = template["metadata"]["labels"]
        ns = job.manifests[0]["metadata"]["namespace"]
        assert selects(pm["selector"], labels), (rjob, labels)
        assert pm["namespaceSelector"].get("any") or ns in pm["namespaceSelector"]["matchNames"], (rjob, ns)
        container = template["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container.get("env") or []}
        base = int(env["ALCHEMIST_METRICS_PORT"])
        ports = {p["name"]: p["containerPort"] for p in container.get("ports") or []}
        local_ranks = job.spec.procs_per_node if rjob == "worker" else 1
        for r in range(local_ranks):  # every worker of the pod (a parameter server: one)
            name = metrics_port_name(r)
            if ports.get(name) != base + r:
                missed.append(f"{rjob}: local rank {r} serves on {base + r}, the pod names {name}={ports.get(name)}")
            if name not in endpoint_ports:
                missed.append(f"{rjob}: port {name} is not a PodMonitor endpoint")
    for pod in world.runs[shape]:
        for port in pod.ports:
            if port["name"] in endpoint_ports and not world.conn.allows(
                    world.prometheus.key, pod.key, port.get("protocol", "TCP"), port["containerPort"]):  # fmt: skip
                missed.append(f"Prometheus cannot reach {pod.key}:{port['containerPort']} ({port['name']})")
    assert not missed, f"{stack} {shape}:\n" + "\n".join(missed)
    assert world.runs[shape] and all(p in world.runs[shape] for p in pods_of(job))
