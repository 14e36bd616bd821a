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


# --- control-plane monitors a provider never exposes ---------------------------------------------
# kube-prometheus-stack 75.15.1's ServiceMonitors, Services, Endpoints and alert rules for etcd,
# the scheduler, the controller manager and kube-proxy, each with the `if` that wraps its
# template at that tag (tests/fixtures/monitoring/), evaluated over the chart's defaults and the
# rendered values (tests/unit/infra/chart_data.py). What a provider hides: EKS runs etcd, the
# scheduler and the controller manager in AWS's account (no pod, no port in the cluster); k3s
# runs all four inside its own process (no pods for the chart's Services to select).
HIDDEN = {"aws": {"kubeEtcd", "kubeScheduler", "kubeControllerManager"},
          "onprem": {"kubeEtcd", "kubeScheduler", "kubeControllerManager", "kubeProxy"}}


def control_plane_templates() -> list[dict]:
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "fixtures" / "monitoring" / "kube-prometheus-stack-75.15.1-control-plane.json"
    return json.loads(path.read_text())["templates"]


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_no_monitor_or_alert_for_a_control_plane_the_provider_hides(platforms, stack):
    """Issue 36.7: on EKS and k3s the chart's etcd, scheduler, controller-manager (and on k3s
    kube-proxy) monitors found no target, and their `...Down` alerts fired for ever."""
    from chart_data import chart_data, evaluate, flatten

    platform = platforms[stack]
    chart = prometheus_chart(platform)
    data, ours = chart_data("kube-prometheus-stack", chart["version"]), flatten(chart.get("values") or {})
    hidden = HIDDEN.get(platform.output.provider, set())
    rendered = {(t["component"], t["kind"]) for t in control_plane_templates()
                if evaluate(t["if"], data, ours) is not False}
    assert not {r for r in rendered if r[0] in hidden}, (stack, sorted(rendered))
    # the model is no rubber stamp: under the chart's defaults every monitor and rule renders
    assert all(evaluate(t["if"], data, {}) is not False for t in control_plane_templates()
               if t["kind"] in ("ServiceMonitor", "PrometheusRule"))
    assert {t["component"] for t in control_plane_templates() if t["kind"] == "PrometheusRule"} == \
        {"kubeEtcd", "kubeScheduler", "kubeControllerManager", "kubeProxy"}
