"""One team's namespace and its guard rails: RBAC, quota, defaults, NetworkPolicies, its job ServiceAccount and LocalQueue."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from infra.admission import DEBUG_GRANT
from infra.cluster import GPU_RESOURCE
from infra.config import Team
from infra.labels import (
    JOB_SERVICE_ACCOUNT,
    MANAGED_BY,
    METRICS_BASE_PORT,
    METRICS_PORT_SLOTS,
    MONITORING_NAMESPACE,
    SESSION_LABEL,
    TEAM_GID_LABEL,
    TEAM_LABEL,
    TEAM_UID_LABEL,
)
from infra.object_store_network import STORE_POLICY, StoreEgress
from infra.queueing import local_queue, most_admitted

PSA = "pod-security.kubernetes.io"
RBAC = "rbac.authorization.k8s.io"
SUBMITTER_ROLE = "alchemist-job-submitter"
DEBUG_ROLE = "alchemist-debug"


def psa_labels(level: str) -> dict[str, str]:
    """Pod Security Admission: enforce `level`, and warn/audit at restricted so drift shows."""
    return {
        f"{PSA}/enforce": level,
        f"{PSA}/enforce-version": "latest",
        f"{PSA}/warn": "restricted",
        f"{PSA}/audit": "restricted",
    }


def job_network_policy(namespace: str) -> dict[str, Any]:
    """Job pods: reachable only by Prometheus (monitoring namespace) on the metrics ports; DNS out.

    Pods of one run reach each other through that run's own NetworkPolicy (the job library
    creates it with the run, selecting the run label), never through this one: a job pod is
    not reachable from another run's pods or from an interactive session.
    """
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "alchemist-jobs", "namespace": namespace},
        "spec": {
            "podSelector": {"matchLabels": dict(MANAGED_BY)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": MONITORING_NAMESPACE}
                            }
                        }
                    ],  # fmt: skip
                    "ports": [
                        {
                            "protocol": "TCP",
                            "port": METRICS_BASE_PORT,
                            "endPort": METRICS_BASE_PORT + METRICS_PORT_SLOTS - 1,
                        }
                    ],
                }
            ],  # fmt: skip
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                            },
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        }
                    ],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                }
            ],  # fmt: skip
        },
    }


def session_network_policy(namespace: str) -> dict[str, Any]:
    """Interactive sessions: out to kube-dns only (a notebook resolves names; `default-deny`
    isolates their egress). Nothing reaches them but `kubectl port-forward` and `exec`, which
    go through the kubelet, not the pod network."""
    dns = job_network_policy(namespace)["spec"]["egress"]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "alchemist-sessions", "namespace": namespace},
        "spec": {
            "podSelector": {"matchExpressions": [{"key": SESSION_LABEL, "operator": "Exists"}]},
            "policyTypes": ["Egress"],
            "egress": dns,
        },
    }


def object_store_network_policy(namespace: str, egress: StoreEgress) -> dict[str, Any]:
    """Job pods: out to the object store's addresses on its port (infra/object_store_network.py),
    where staging fetches `data.source`. Addresses only the store answers on: no other run's
    or team's pod, and never the cloud's metadata address."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": STORE_POLICY, "namespace": namespace},
        "spec": {
            "podSelector": {"matchLabels": dict(MANAGED_BY)},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [{"ipBlock": {"cidr": cidr}} for cidr in egress.cidrs],
                    "ports": [{"protocol": "TCP", "port": egress.port}],
                }
            ],
        },
    }


def submitter_role(namespace: str) -> dict[str, Any]:
    """What the `alchemist` CLI needs to submit, watch and cancel jobs in a team namespace.

    No Secrets; exec and port-forward reach the team's interactive sessions and port-forward
    TensorBoard only (infra/admission.py `connect_policy`): into any pod (a teammate's job
    included) they are the separate opt-in role `alchemist-debug`.
    """
    read = ["get", "list", "watch"]
    manage = [*read, "create", "delete", "patch"]
    # docs/kubernetes.md lists each grant and who uses it; tests/system checks both ways.
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "Role",
        "metadata": {"name": SUBMITTER_ROLE, "namespace": namespace},
        "rules": [
            # A run is a JobSet; its child Jobs are the JobSet controller's, read for status.
            # (no patch: a member who could unsuspend a JobSet would start it around Kueue)
            {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": [*read, "create", "delete"]},
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": read},
            # A run's ConfigMap is patched to make the JobSet its owner; JobSet makes the Service.
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": manage},
            {"apiGroups": [""], "resources": ["services"], "verbs": read},
            # Interactive sessions are bare pods (the admission policy bounds what they may be).
            {"apiGroups": [""], "resources": ["pods"], "verbs": [*read, "create", "delete"]},
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": read},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": read},
            # `kubectl port-forward` and `kubectl exec` (GET over WebSockets, POST over SPDY):
            # RBAC cannot name a prefix, so the admission policy `alchemist-submitted-connections`
            # lets a member reach only the sessions and port-forward only to TensorBoard.
            {"apiGroups": [""], "resources": ["pods/exec", "pods/portforward"], "verbs": ["get", "create"]},
            # Each run gets its own NetworkPolicy admitting only its own pods.
            # (patched once, to make the run's JobSet its owner; admission keeps it per-run)
            {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
             "verbs": ["get", "create", "delete", "patch"]},
            # An interactive session keeps its token in a Secret it creates; nobody here reads one.
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "delete"]},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": read},
        ],
    }  # fmt: skip


def debug_role(namespace: str) -> dict[str, Any]:
    """Opt-in: exec into and port-forward to any pod of the namespace (a teammate's job included)."""
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "Role",
        "metadata": {"name": DEBUG_ROLE, "namespace": namespace},
        "rules": [
            {"apiGroups": [""], "resources": ["pods/exec", "pods/portforward"], "verbs": ["get", "create"]},
            DEBUG_GRANT,
        ],  # exempts its holders from the admission policy on connections
    }


def quota_spec(team: Team, cohort: list[Team]) -> dict[str, Any]:
    """The namespace's ResourceQuota: what Kueue can at most admit to the team, borrowing
    included, so every pod of an admitted workload is let in (a pod is created only once its
    workload is admitted, and the API server's quota admission refuses the pod that would pass
    `hard`). Pods that bypass Kueue (no queue label) are still bounded by it."""
    most = most_admitted(team, cohort)
    return {"hard": {
        "requests.cpu": most["cpu"],
        "requests.memory": most["memory"],
        f"requests.{GPU_RESOURCE}": most[GPU_RESOURCE],
        "persistentvolumeclaims": "20",
    }}  # fmt: skip


@dataclass
class TeamNamespaceArgs:
    team: Team
    pod_security: str  # restricted | baseline (policy forbids privileged)
    identity: tuple[
        int, int
    ]  # the team's (uid, gid): every pod a member creates runs as it (infra/admission.py)
    cohort: list[Team]  # every team whose ClusterQueue shares the Kueue cohort: what this one may borrow
    queue_ready: list[Any] = field(default_factory=list)  # Kueue installed: the LocalQueue waits for it
    object_store: StoreEgress | None = None  # the store's addresses, where the stack has one
    depends_on: list[Any] = field(default_factory=list)


class TeamNamespace(pulumi.ComponentResource):
    """A team's namespace with its submitter RBAC, quota, LimitRange, NetworkPolicies,
    job ServiceAccount and LocalQueue."""

    def __init__(self, name: str, args: TeamNamespaceArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:TeamNamespace", name, None, opts)
        k8s = kubernetes
        team, ns = args.team, args.team.name
        uid, gid = args.identity
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-ns", metadata={"name": ns, "labels": {**psa_labels(args.pod_security), TEAM_LABEL: ns,
                                                           TEAM_UID_LABEL: str(uid), TEAM_GID_LABEL: str(gid)}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.depends_on),
        )  # fmt: skip
        opts_in = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace])
        self.job_service_account = k8s.core.v1.ServiceAccount(
            f"{name}-job-sa", metadata={"name": JOB_SERVICE_ACCOUNT, "namespace": ns},
            automount_service_account_token=False, opts=opts_in,
        )  # fmt: skip
        groups = team.groups or [f"alchemist:{ns}"]
        for key, role in (("role", submitter_role(ns)), ("debug-role", debug_role(ns))):
            k8s.rbac.v1.Role(f"{name}-{key}", metadata=role["metadata"], rules=role["rules"], opts=opts_in)
        # Only the submitter role is bound; `alchemist-debug` is bound by an admin, per person.
        # The API's own shapes (the SDK's typed dicts spell keys in snake_case).
        objects: dict[str, Any] = {
            "binding": {
                "metadata": {"name": "alchemist-job-submitters", "namespace": ns},
                "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": SUBMITTER_ROLE},
                "subjects": [{"apiGroup": RBAC, "kind": "Group", "name": g} for g in groups],
            },
            "quota": {"metadata": {"name": "alchemist-team", "namespace": ns}, "spec": quota_spec(team, args.cohort)},
            # Containers that set nothing still count against the quota at a sane size.
            "limits": {
                "metadata": {"name": "alchemist-defaults", "namespace": ns},
                "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
                                     "default": {"memory": "4Gi"}}]},
            },
            "deny": {
                "metadata": {"name": "default-deny", "namespace": ns},
                "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
            },
        }  # fmt: skip
        binding = objects["binding"]
        k8s.rbac.v1.RoleBinding(
            f"{name}-rolebinding",
            metadata=binding["metadata"],
            role_ref=binding["roleRef"],
            subjects=binding["subjects"],
            opts=opts_in,
        )
        k8s.core.v1.ResourceQuota(
            f"{name}-quota",
            metadata=objects["quota"]["metadata"],
            spec=objects["quota"]["spec"],
            opts=opts_in,
        )
        k8s.core.v1.LimitRange(
            f"{name}-limits",
            metadata=objects["limits"]["metadata"],
            spec=objects["limits"]["spec"],
            opts=opts_in,
        )
        k8s.networking.v1.NetworkPolicy(
            f"{name}-netpol-deny",
            metadata=objects["deny"]["metadata"],
            spec=objects["deny"]["spec"],
            opts=opts_in,
        )
        jobs = job_network_policy(ns)
        k8s.networking.v1.NetworkPolicy(
            f"{name}-netpol-jobs", metadata=jobs["metadata"], spec=jobs["spec"], opts=opts_in
        )
        sessions = session_network_policy(ns)
        k8s.networking.v1.NetworkPolicy(f"{name}-netpol-sessions", metadata=sessions["metadata"],
                                        spec=sessions["spec"], opts=opts_in)  # fmt: skip
        if args.object_store is not None:
            store = object_store_network_policy(ns, args.object_store)
            k8s.networking.v1.NetworkPolicy(f"{name}-netpol-object-store", metadata=store["metadata"],
                                            spec=store["spec"], opts=opts_in)  # fmt: skip
        lq = local_queue(team)
        self.local_queue = k8s.apiextensions.CustomResource(
            f"{name}-lq", api_version=lq["apiVersion"], kind=lq["kind"], metadata=lq["metadata"], spec=lq["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.queue_ready, self.namespace]),
        )  # fmt: skip
        self.register_outputs({"namespace": ns})
