"""The Queue dashboard's data: the platform's Prometheus scrapes Kueue's metrics on every stack (issue 36.6).

Kueue v0.13.4 serves its metrics on the manager's `metrics.bindAddress` over TLS, behind
controller-runtime's authentication and authorization filter (cmd/kueue/main.go:
`SecureServing: true`, `FilterProvider: filters.WithAuthenticationAndAuthorization`): a scrape
needs a bearer token the API server's TokenReview accepts, whose subject may `get` the
non-resource URL `/metrics` (SubjectAccessReview), and, with the manager's own certificates
(`internalCertManagement`), a self-signed serving certificate. The chart's metrics Service is
`<fullname>-controller-manager-metrics-service` with the `kueue.metricsService.labels` labels
and `metricsService.ports` (charts/kueue/templates/manager/auth_proxy_service.yaml). Its own
ServiceMonitor (`enablePrometheus`) carries only the chart's labels, which no Prometheus of
kube-prometheus-stack selects. Prometheus-operator semantics as in test_monitoring.py (v0.83,
Documentation/api.md: ServiceMonitorSpec, Endpoint: `port` names a Service port, `scheme`,
`bearerTokenFile` read inside the Prometheus pod unless `arbitraryFSAccessThroughSMs.deny`).
kube-prometheus-stack 75.15.1 binds its Prometheus ServiceAccount to a ClusterRole with the
non-resource rules vendored in tests/fixtures/chart_names/.
"""

from __future__ import annotations

import pytest
from chart_data import chart_data, evaluate, flatten
from helm_names import names_data, releases
from kueue_model import manager_config
from system_tier import STACK_NAMES
from test_monitoring import prometheus_chart

from tests.k8s_admission import selects

KUEUE = names_data("kueue-0.13.4.json")
PROMETHEUS_RBAC = names_data("kube-prometheus-stack-75.15.1.json")["cluster_role"]
SA_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"  # where the kubelet mounts it


def metrics_service(release) -> tuple[str, dict[str, str], list[dict]]:
    """(name, labels, ports) of the chart's metrics Service under this release."""
    (obj,) = [o for o in KUEUE["objects"] if o["template"] == "templates/manager/auth_proxy_service.yaml"]
    return release.fill(obj["name"]), release.labels(KUEUE, "kueue.metricsService.labels"), \
        release.value("metricsService.ports")


def prometheus_may_get_metrics(chart: dict) -> bool:
    """kube-prometheus-stack's Prometheus ClusterRole renders and lets its ServiceAccount GET /metrics."""
    data = chart_data("kube-prometheus-stack", chart["version"])
    if evaluate(PROMETHEUS_RBAC["if"], data, flatten(chart["values"])) is False:
        return False
    return any("/metrics" in r["nonResourceURLs"] and "get" in r["verbs"] for r in PROMETHEUS_RBAC["non_resource_rules"])


def endpoint_problems(endpoint: dict, ports: list[dict], bind_port: int, spec: dict) -> list[str]:
    bad = []
    port = next((p for p in ports if p.get("name") == endpoint.get("port")), None)
    if port is None or int(port.get("targetPort", port["port"])) != bind_port:
        bad.append(f"port {endpoint.get('port')} is not the Service port to the manager's {bind_port}: {ports}")
    if KUEUE["manager"]["metrics"]["secure_serving"] and endpoint.get("scheme") != "https":
        bad.append(f"scheme {endpoint.get('scheme')}: the manager serves TLS only")
    tls = endpoint.get("tlsConfig") or {}
    if not (tls.get("insecureSkipVerify") or tls.get("ca")):
        bad.append("no CA nor insecureSkipVerify for the manager's self-signed certificate")
    if KUEUE["manager"]["metrics"]["authn_authz"]:
        if endpoint.get("bearerTokenFile") != SA_TOKEN and not endpoint.get("authorization"):
            bad.append("no bearer token: the manager answers 401 without one")
        if endpoint.get("bearerTokenFile"):
            if (spec.get("arbitraryFSAccessThroughSMs") or {}).get("deny"):
                bad.append("bearerTokenFile, but the Prometheus denies ServiceMonitors file access")
            if spec.get("automountServiceAccountToken") is False:
                bad.append("bearerTokenFile, but the Prometheus pod mounts no token")
    return bad


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_the_platforms_prometheus_scrapes_kueue(platforms, stack):
    platform = platforms[stack]
    (release,) = releases(platform.render, "kueue")
    service, labels, ports = metrics_service(release)
    bind_port = int(manager_config(release.values)["metrics"]["bindAddress"].rsplit(":", 1)[1])
    chart = prometheus_chart(platform)
    spec = chart["values"]["prometheus"]["prometheusSpec"]
    picked = []
    for sm in platform.kube_objects("ServiceMonitor"):
        meta, sm_spec = sm["metadata"], sm["spec"]
        ns_ok = spec.get("serviceMonitorNamespaceSelector") == {} or meta["namespace"] == chart["namespace"]
        names = (sm_spec.get("namespaceSelector") or {}).get("matchNames") or [meta["namespace"]]
        covers = (sm_spec.get("namespaceSelector") or {}).get("any") or release.namespace in names
        if ns_ok and selects(spec["serviceMonitorSelector"], meta.get("labels") or {}) and covers \
                and selects(sm_spec["selector"], labels):
            picked.append(sm)
    assert picked, f"{stack}: no ServiceMonitor the Prometheus picks selects Service {service} {labels}"
    for sm in picked:
        bad = [f"{sm['metadata']['name']}: {p}" for e in sm["spec"]["endpoints"]
               for p in endpoint_problems(e, ports, bind_port, spec)]
        assert not bad, f"{stack}:\n" + "\n".join(bad)
    assert prometheus_may_get_metrics(chart), f"{stack}: the Prometheus ServiceAccount may not GET /metrics"
    policies = [o for o in platform.kube_objects("NetworkPolicy") if o["metadata"].get("namespace") == release.namespace]
    assert not policies, f"{stack}: NetworkPolicies in {release.namespace}: judge Prometheus's way in"


def test_the_check_refuses_a_plain_http_unauthenticated_endpoint():
    ports = [{"name": "https", "port": 8443, "targetPort": 8443}]
    bad = endpoint_problems({"port": "https", "scheme": "http"}, ports, 8443, {})
    assert len(bad) == 3, bad
    assert endpoint_problems({"port": "metrics", "scheme": "https", "bearerTokenFile": SA_TOKEN,
                              "tlsConfig": {"insecureSkipVerify": True}}, ports, 8443,
                             {"arbitraryFSAccessThroughSMs": {"deny": True}}) == [
        f"port metrics is not the Service port to the manager's 8443: {ports}",
        "bearerTokenFile, but the Prometheus denies ServiceMonitors file access"]
