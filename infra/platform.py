"""The platform every stack gives jobs: GPU Operator, Kueue queues, team namespaces and their guard rails.

Same code on every stack: it takes a kubernetes.Provider and two facts about the nodes
(whether the GPU Operator must install the driver and the container toolkit); nothing
else about the provider reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from infra.cluster import GPU_NODE_LABELS, GPU_RESOURCE, GPU_TOLERATIONS
from infra.config import Team
from infra.labels import (
    GPU_OPERATOR_NAMESPACE,
    KUEUE_COHORT,
    KUEUE_NAMESPACE,
    MANAGED_BY,
    METRICS_BASE_PORT,
    METRICS_PORT_SLOTS,
    MONITORING_NAMESPACE,
    PRIORITY_CLASSES,
    PROMETHEUS_SELECTOR,
)
from infra.versions import CHARTS

KUEUE_API = "kueue.x-k8s.io/v1beta1"
PSA = "pod-security.kubernetes.io"


@dataclass
class PlatformArgs:
    teams: list[Team]
    pod_security: str  # restricted | baseline | privileged (policy forbids the last)
    gpu_driver_by_operator: bool
    toolkit_by_operator: bool
    depends_on: list[Any] = field(default_factory=list)


def psa_labels(level: str) -> dict[str, str]:
    """Pod Security Admission: enforce `level`, and warn/audit at restricted so drift shows."""
    return {
        f"{PSA}/enforce": level,
        f"{PSA}/enforce-version": "latest",
        f"{PSA}/warn": "restricted",
        f"{PSA}/audit": "restricted",
    }


def gpu_operator_values(driver: bool, toolkit: bool) -> dict[str, Any]:
    """GPU Operator values: only `driver.enabled` and `toolkit.enabled` vary between stacks."""
    return {
        "driver": {"enabled": driver},
        "toolkit": {"enabled": toolkit},
        "daemonsets": {"tolerations": GPU_TOLERATIONS},
        "dcgmExporter": {
            "enabled": True,
            "serviceMonitor": {
                "enabled": True,
                "interval": "15s",
                "honorLabels": False,
                # kube-prometheus-stack's Prometheus selects ServiceMonitors by this label.
                "additionalLabels": dict(PROMETHEUS_SELECTOR),
            },
        },
    }


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
                    "flavors": [{"name": "default", "resources": [
                        {"name": "cpu", "nominalQuota": q.cpu},
                        {"name": "memory", "nominalQuota": q.memory},
                    ]}],  # fmt: skip
                },
                {
                    "coveredResources": [GPU_RESOURCE],
                    "flavors": [{"name": "gpu", "resources": [{"name": GPU_RESOURCE, "nominalQuota": q.gpu}]}],
                },
            ],
        },
    }


def job_network_policy(namespace: str) -> dict[str, Any]:
    """Job pods talk to each other and DNS; Prometheus (monitoring namespace) scrapes `metrics`."""
    same_ns_jobs = {"podSelector": {"matchLabels": dict(MANAGED_BY)}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "alchemist-jobs", "namespace": namespace},
        "spec": {
            "podSelector": {"matchLabels": dict(MANAGED_BY)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {"from": [same_ns_jobs]},
                {
                    "from": [{"namespaceSelector": {"matchLabels": {
                        "kubernetes.io/metadata.name": MONITORING_NAMESPACE}}}],  # fmt: skip
                    "ports": [{"protocol": "TCP", "port": METRICS_BASE_PORT,
                               "endPort": METRICS_BASE_PORT + METRICS_PORT_SLOTS - 1}],
                },
            ],
            "egress": [
                {"to": [same_ns_jobs]},
                {
                    "to": [{
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                    }],  # fmt: skip
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                },
            ],
        },
    }


def submitter_role(namespace: str) -> dict[str, Any]:
    """What the `alchemist` CLI needs to submit, watch and cancel jobs in a team namespace."""
    read = ["get", "list", "watch"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "alchemist-job-submitter", "namespace": namespace},
        "rules": [
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": [*read, "create", "delete", "patch"]},
            # A job's Service and ConfigMap are patched to make the Job their owner.
            {"apiGroups": [""], "resources": ["services", "configmaps"], "verbs": [*read, "create", "delete", "patch"]},
            # Interactive sessions are bare pods; progress is read through the pod proxy.
            {"apiGroups": [""], "resources": ["pods"], "verbs": [*read, "create", "delete"]},
            {"apiGroups": [""], "resources": ["pods/log", "events", "persistentvolumeclaims"], "verbs": read},
            {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["pods/portforward", "pods/exec"], "verbs": ["create", "get"]},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": read},
        ],
    }


class Platform(pulumi.ComponentResource):
    """GPU Operator, Kueue (flavors, a ClusterQueue per team, a LocalQueue per namespace),
    team namespaces with RBAC, quotas, limits, Pod Security, NetworkPolicies, PriorityClasses."""

    def __init__(self, name: str, args: PlatformArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:Platform", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=args.depends_on)
        k8s = kubernetes

        def ns(key: str, ns_name: str, labels: dict[str, str]) -> k8s.core.v1.Namespace:
            return k8s.core.v1.Namespace(
                f"{name}-ns-{key}", metadata={"name": ns_name, "labels": labels}, opts=child
            )

        # Node agents (GPU Operator, node-exporter) need host access: privileged namespaces.
        self.system_namespaces = {
            GPU_OPERATOR_NAMESPACE: ns("gpu-operator", GPU_OPERATOR_NAMESPACE, psa_labels("privileged")),
            KUEUE_NAMESPACE: ns("kueue", KUEUE_NAMESPACE, psa_labels("baseline")),
            MONITORING_NAMESPACE: ns("monitoring", MONITORING_NAMESPACE, psa_labels("privileged")),
        }
        self.team_namespaces: dict[str, Any] = {}
        for team in args.teams:
            labels = {**psa_labels(args.pod_security), "alchemist.io/team": team.name}
            self.team_namespaces[team.name] = ns(team.name, team.name, labels)

        self.gpu_operator = k8s.helm.v4.Chart(
            f"{name}-gpu-operator",
            chart=CHARTS["gpu-operator"].chart,
            version=CHARTS["gpu-operator"].version,
            repository_opts={"repo": CHARTS["gpu-operator"].repo},
            namespace=GPU_OPERATOR_NAMESPACE,
            values=gpu_operator_values(args.gpu_driver_by_operator, args.toolkit_by_operator),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_namespaces[GPU_OPERATOR_NAMESPACE]]),
        )
        self.kueue = k8s.helm.v4.Chart(
            f"{name}-kueue",
            chart=CHARTS["kueue"].chart,
            version=CHARTS["kueue"].version,
            namespace=KUEUE_NAMESPACE,
            values={"controllerManager": {"replicas": 1}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_namespaces[KUEUE_NAMESPACE]]),
        )
        after_kueue = pulumi.ResourceOptions(parent=self, depends_on=[self.kueue])

        for prio_name, (value, description) in PRIORITY_CLASSES.items():
            k8s.scheduling.v1.PriorityClass(
                f"{name}-priority-{prio_name}",
                metadata={"name": prio_name},
                value=value,
                global_default=False,
                preemption_policy="PreemptLowerPriority",
                description=description,
                opts=child,
            )

        flavors = {
            "default": {},
            "gpu": {"nodeLabels": dict(GPU_NODE_LABELS), "tolerations": GPU_TOLERATIONS},
        }
        for flavor, spec in flavors.items():
            k8s.apiextensions.CustomResource(
                f"{name}-flavor-{flavor}",
                api_version=KUEUE_API,
                kind="ResourceFlavor",
                metadata={"name": flavor},
                spec=spec,
                opts=after_kueue,
            )

        self.cluster_queues: dict[str, Any] = {}
        self.local_queues: dict[str, Any] = {}
        for team in args.teams:
            ns_res = self.team_namespaces[team.name]
            in_ns = pulumi.ResourceOptions(parent=self, depends_on=[ns_res])
            cq = cluster_queue(team)
            self.cluster_queues[team.name] = k8s.apiextensions.CustomResource(
                f"{name}-cq-{team.name}", api_version=cq["apiVersion"], kind=cq["kind"],
                metadata=cq["metadata"], spec=cq["spec"], opts=after_kueue,
            )  # fmt: skip
            self.local_queues[team.name] = k8s.apiextensions.CustomResource(
                f"{name}-lq-{team.name}",
                api_version=KUEUE_API,
                kind="LocalQueue",
                metadata={"name": team.name, "namespace": team.name},
                spec={"clusterQueue": team.name},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.kueue, ns_res]),
            )
            self._guard_rails(name, team, in_ns)

        self.register_outputs({
            "team_namespaces": list(self.team_namespaces),
            "gpu_operator_chart": CHARTS["gpu-operator"].version,
            "kueue_chart": CHARTS["kueue"].version,
        })  # fmt: skip

    def _guard_rails(self, name: str, team: Team, opts: pulumi.ResourceOptions) -> None:
        """RBAC for submitters, ResourceQuota, LimitRange and NetworkPolicies of one namespace."""
        k8s = kubernetes
        ns = team.name
        role = submitter_role(ns)
        k8s.rbac.v1.Role(f"{name}-role-{ns}", metadata=role["metadata"], rules=role["rules"], opts=opts)
        groups = team.groups or [f"alchemist:{ns}"]
        k8s.rbac.v1.RoleBinding(
            f"{name}-rolebinding-{ns}",
            metadata={"name": "alchemist-job-submitters", "namespace": ns},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]},
            subjects=[{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups],
            opts=opts,
        )
        q = team.quota
        k8s.core.v1.ResourceQuota(
            f"{name}-quota-{ns}",
            metadata={"name": "alchemist-team", "namespace": ns},
            spec={"hard": {
                "requests.cpu": str(q.cpu),
                "requests.memory": q.memory,
                f"requests.{GPU_RESOURCE}": str(q.gpu),
                "persistentvolumeclaims": "20",
            }},  # fmt: skip
            opts=opts,
        )
        # Containers that set nothing still count against the quota at a sane size.
        k8s.core.v1.LimitRange(
            f"{name}-limits-{ns}",
            metadata={"name": "alchemist-defaults", "namespace": ns},
            spec={"limits": [{
                "type": "Container",
                "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
                "default": {"memory": "4Gi"},
            }]},  # fmt: skip
            opts=opts,
        )
        k8s.networking.v1.NetworkPolicy(
            f"{name}-netpol-deny-{ns}",
            metadata={"name": "default-deny", "namespace": ns},
            spec={"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
            opts=opts,
        )
        jobs = job_network_policy(ns)
        k8s.networking.v1.NetworkPolicy(
            f"{name}-netpol-jobs-{ns}", metadata=jobs["metadata"], spec=jobs["spec"], opts=opts
        )
