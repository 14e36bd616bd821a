"""Queueing, the same on every stack: Kueue (flavors, a ClusterQueue per team), JobSet, and the PriorityClasses jobs name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes
import yaml

from infra import providers
from infra.cluster import GPU_NODE_LABELS, GPU_RESOURCE, GPU_TOLERATIONS
from infra.config import Team
from infra.labels import (
    JOBSET_NAMESPACE,
    KUEUE_COHORT,
    KUEUE_NAMESPACE,
    KUEUE_RELEASE,
    PRIORITY_CLASSES,
    TEAM_LABEL,
)
from infra.versions import CHARTS

KUEUE_API = "kueue.x-k8s.io/v1beta1"
# How long an admitted job may take until every pod is ready (a GPU node scale-up plus a big
# image pull) before Kueue evicts and requeues it; pod 0 may start 15 minutes late.
PODS_READY_TIMEOUT = "20m"


# Resources Kueue leaves out of a workload's requests: a request for a resource no
# ClusterQueue covers is never admitted ("resource ... unavailable in ClusterQueue",
# pkg/scheduler/flavorassigner/flavorassigner.go at v0.13.4). A provider's network-fabric
# devices (ProviderRules.fabric_resource) are a device of the GPU node a pod already holds, not a
# quota to share: the node's capacity guards them (pkg/workload/workload.go dropExcludedResources).
# Every provider's are left out on every stack, so one Kueue configuration fits all.
def excluded_resource_prefixes() -> list[str]:
    """The API groups of every provider's fabric resource, as Kueue's excludeResourcePrefixes."""
    found = (providers.rules(n).fabric_resource for n in providers.names())
    return sorted({r.split("/", 1)[0] + "/" for r in found if r})


def kueue_manager_config() -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta1): the chart's defaults, plus
    JobSet and plain pods as integrations and all-or-nothing start (waitForPodsReady)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        # the chart's defaults (charts/kueue/values.yaml at v0.13.4), which this document replaces
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 5,
                "LocalQueue.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 1,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },  # fmt: skip
        "clientConnection": {"qps": 50, "burst": 100},
        # The manager writes its webhook certificate into this Secret, for this Service: the
        # names the chart gives them under release KUEUE_RELEASE (its pod mounts that Secret).
        # Without a Secret of this name the manager exits (pkg/util/cert/cert.go at v0.13.4).
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": f"{KUEUE_RELEASE}-webhook-service",
            "webhookSecretName": f"{KUEUE_RELEASE}-webhook-server-cert",
        },
        # Only team namespaces hold jobs Kueue manages; system pods are never gated.
        "managedJobsNamespaceSelector": {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]},
        "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset", "pod"]},
        "resources": {"excludeResourcePrefixes": excluded_resource_prefixes()},
        # A job's pods start together or not at all: an admitted workload whose pods are not
        # all ready in time is evicted and requeued, so a half-started group never holds GPUs.
        # blockAdmission stays off: one job waiting for a GPU scale-up must not stall every
        # other team's admissions.
        "waitForPodsReady": {
            "enable": True,
            "timeout": PODS_READY_TIMEOUT,
            "blockAdmission": False,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60},
        },
    }


def kueue_values() -> dict[str, Any]:
    return {
        "controllerManager": {"replicas": 1},
        "managerConfig": {
            "controllerManagerConfigYaml": yaml.safe_dump(kueue_manager_config(), sort_keys=False)
        },
    }


# Kueue's metrics Service (charts/kueue/templates/manager/auth_proxy_service.yaml at v0.13.4):
# labelled `kueue.metricsService.labels`, its port `https` (values.yaml metricsService.ports)
# forwarding to the manager's `metrics.bindAddress`.
KUEUE_METRICS_LABELS = {
    "app.kubernetes.io/name": "kueue",
    "app.kubernetes.io/instance": KUEUE_RELEASE,
    "app.kubernetes.io/component": "metrics",
}


def kueue_service_monitor_spec() -> dict[str, Any]:
    """How the platform's Prometheus scrapes Kueue (the Queue dashboard's data).

    The manager serves metrics over TLS behind controller-runtime's authentication and
    authorization filter (cmd/kueue/main.go at v0.13.4): Prometheus sends its ServiceAccount's
    token, which kube-prometheus-stack's ClusterRole lets GET `/metrics`; the serving
    certificate is self-signed in memory (internal certificates), so it is not verified.
    The chart's own ServiceMonitor (`enablePrometheus`) carries no label our Prometheus selects.
    """
    return {
        "namespaceSelector": {"matchNames": [KUEUE_NAMESPACE]},
        "selector": {"matchLabels": dict(KUEUE_METRICS_LABELS)},
        "endpoints": [
            {
                "port": "https",
                "scheme": "https",
                "path": "/metrics",
                "interval": "30s",
                "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
                "tlsConfig": {"insecureSkipVerify": True},
            }
        ],
    }


def jobset_values() -> dict[str, Any]:
    return {"controller": {"replicas": 1}}


def cluster_queue(team: Team) -> dict[str, Any]:
    """One ClusterQueue per team in a shared cohort, so idle quota can be borrowed."""
    q = team.quota
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": team.name},
        "spec": {
            "cohort": KUEUE_COHORT,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.name}},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "default",
                            "resources": [
                                {"name": "cpu", "nominalQuota": q.cpu},
                                {"name": "memory", "nominalQuota": q.memory},
                            ],
                        }
                    ],  # fmt: skip
                },
                {
                    "coveredResources": [GPU_RESOURCE],
                    "flavors": [
                        {"name": "gpu", "resources": [{"name": GPU_RESOURCE, "nominalQuota": q.gpu}]}
                    ],
                },
            ],
        },
    }


def most_admitted(team: Team, cohort: list[Team]) -> dict[str, str]:
    """The most Kueue admits to `team`'s ClusterQueue at once, per resource: its nominal quota
    plus every other queue's of the cohort. The ClusterQueues set no borrowingLimit or
    lendingLimit, and then "a ClusterQueue can borrow up to the sum of nominal quotas from all
    the ClusterQueues in the cohort" (Kueue v0.13.4 site/content/en/docs/concepts/
    cluster_queue.md, "BorrowingLimit"; pkg/cache/resource_node.go potentialAvailable)."""
    teams = {t.name: t for t in [team, *cohort]}.values()
    mebibytes = {"Mi": 1, "Gi": 1024, "Ti": 1024**2}
    memory = sum(int(t.quota.memory[:-2]) * mebibytes[t.quota.memory[-2:]] for t in teams)
    unit = next(u for u in ("Ti", "Gi", "Mi") if memory % mebibytes[u] == 0)
    return {
        "cpu": str(sum(t.quota.cpu for t in teams)),
        "memory": f"{memory // mebibytes[unit]}{unit}",
        GPU_RESOURCE: str(sum(t.quota.gpu for t in teams)),
    }


def resource_flavors(gpu_node_labels: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Kueue adds a flavor's nodeLabels to the node selector of the pods it admits with it: the
    `gpu` flavor's are the labels the stack's GPU nodes carry."""
    return {
        "default": {},
        "gpu": {"nodeLabels": dict(gpu_node_labels or GPU_NODE_LABELS), "tolerations": GPU_TOLERATIONS},
    }


def local_queue(team: Team) -> dict[str, Any]:
    return {"apiVersion": KUEUE_API, "kind": "LocalQueue",
            "metadata": {"name": team.name, "namespace": team.name}, "spec": {"clusterQueue": team.name}}  # fmt: skip


@dataclass
class QueueingArgs:
    teams: list[Team]
    kueue_namespace: Any  # the Namespace resources the charts go into
    jobset_namespace: Any
    depends_on: list[Any] = field(default_factory=list)
    gpu_node_labels: dict[str, str] | None = None  # the GPU nodes' labels; None: GPU_NODE_LABELS


class Queueing(pulumi.ComponentResource):
    """Kueue and JobSet charts, ResourceFlavors, a ClusterQueue per team, PriorityClasses.

    `ready` is what a namespaced queue object (a team's LocalQueue) must wait for.
    """

    def __init__(self, name: str, args: QueueingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:Queueing", name, None, opts)
        k8s = kubernetes
        child = pulumi.ResourceOptions(parent=self, depends_on=args.depends_on)
        kueue, jobset = CHARTS["kueue"], CHARTS["jobset"]
        # The release name is explicit: helm.v4.Chart would take the resource's name
        # (`platform-queueing-kueue`), and every name the chart derives from it with it.
        self.kueue = k8s.helm.v4.Chart(
            f"{name}-kueue", name=KUEUE_RELEASE, chart=kueue.chart, version=kueue.version,
            namespace=KUEUE_NAMESPACE, values=kueue_values(),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, args.kueue_namespace]),
        )  # fmt: skip
        self.jobset = k8s.helm.v4.Chart(
            f"{name}-jobset", chart=jobset.chart, version=jobset.version, namespace=JOBSET_NAMESPACE,
            values=jobset_values(),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, args.jobset_namespace]),
        )  # fmt: skip
        after_kueue = pulumi.ResourceOptions(parent=self, depends_on=[self.kueue])
        for prio_name, (value, description) in PRIORITY_CLASSES.items():
            k8s.scheduling.v1.PriorityClass(
                f"{name}-priority-{prio_name}", metadata={"name": prio_name}, value=value, global_default=False,
                preemption_policy="PreemptLowerPriority", description=description, opts=child,
            )  # fmt: skip
        for flavor, spec in resource_flavors(args.gpu_node_labels).items():
            k8s.apiextensions.CustomResource(
                f"{name}-flavor-{flavor}", api_version=KUEUE_API, kind="ResourceFlavor",
                metadata={"name": flavor}, spec=spec, opts=after_kueue,
            )  # fmt: skip
        self.cluster_queues: dict[str, Any] = {}
        for team in args.teams:
            cq = cluster_queue(team)
            self.cluster_queues[team.name] = k8s.apiextensions.CustomResource(
                f"{name}-cq-{team.name}", api_version=cq["apiVersion"], kind=cq["kind"],
                metadata=cq["metadata"], spec=cq["spec"], opts=after_kueue,
            )  # fmt: skip
        self.ready = [self.kueue, self.jobset]
        self.register_outputs({"kueue_chart": kueue.version, "jobset_chart": jobset.version})
