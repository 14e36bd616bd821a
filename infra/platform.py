"""The platform every stack gives jobs: system namespaces, GPU Operator, queueing, team namespaces, admission policies.

Same code on every stack: it takes a kubernetes.Provider, two facts about the nodes
(whether the GPU Operator must install the driver and the container toolkit) and the
object store's addresses (infra/object_store_network.py); nothing else about the provider
reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from infra.admission import all_policies
from infra.config import Team
from infra.gpu_operator import GpuOperator, GpuOperatorArgs
from infra.labels import GPU_OPERATOR_NAMESPACE, JOBSET_NAMESPACE, KUEUE_NAMESPACE, MONITORING_NAMESPACE
from infra.object_store_network import StoreEgress
from infra.queueing import Queueing, QueueingArgs
from infra.team_namespace import TeamNamespace, TeamNamespaceArgs, psa_labels
from infra.versions import CHARTS

# Node agents (GPU Operator, node-exporter) need host access: privileged namespaces.
SYSTEM_NAMESPACES = {
    GPU_OPERATOR_NAMESPACE: "privileged",
    KUEUE_NAMESPACE: "baseline",
    JOBSET_NAMESPACE: "baseline",
    MONITORING_NAMESPACE: "privileged",
}


@dataclass
class PlatformArgs:
    teams: list[Team]
    pod_security: str  # restricted | baseline | privileged (policy forbids the last)
    identities: dict[str, tuple[int, int]]  # team name -> its (uid, gid) (StackConfig.identity)
    gpu_driver_by_operator: bool
    toolkit_by_operator: bool
    depends_on: list[Any] = field(default_factory=list)
    object_store: StoreEgress | None = None  # where job pods reach the object store (none: no store)
    gpu_node_labels: dict[str, str] | None = (
        None  # the GPU nodes' labels (ClusterFacts); None: GPU_NODE_LABELS
    )


class Platform(pulumi.ComponentResource):
    """System namespaces, the GPU Operator, Kueue and JobSet, one TeamNamespace per team, and
    the admission policies that bound what a submitter's pods may be."""

    def __init__(self, name: str, args: PlatformArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:Platform", name, None, opts)
        k8s = kubernetes
        child = pulumi.ResourceOptions(parent=self, depends_on=args.depends_on)
        self.system_namespaces = {
            ns: k8s.core.v1.Namespace(f"{name}-ns-{ns}", metadata={"name": ns, "labels": psa_labels(level)}, opts=child)
            for ns, level in SYSTEM_NAMESPACES.items()
        }  # fmt: skip
        self.gpu_operator = GpuOperator(
            f"{name}-gpu",
            GpuOperatorArgs(args.gpu_driver_by_operator, args.toolkit_by_operator,
                            depends_on=[*args.depends_on, self.system_namespaces[GPU_OPERATOR_NAMESPACE]]),
            opts=pulumi.ResourceOptions(parent=self),
        )  # fmt: skip
        self.queueing = Queueing(
            f"{name}-queueing",
            QueueingArgs(teams=list(args.teams), kueue_namespace=self.system_namespaces[KUEUE_NAMESPACE],
                         jobset_namespace=self.system_namespaces[JOBSET_NAMESPACE], depends_on=args.depends_on,
                         gpu_node_labels=args.gpu_node_labels),
            opts=pulumi.ResourceOptions(parent=self),
        )  # fmt: skip
        self.teams = {
            team.name: TeamNamespace(
                f"{name}-team-{team.name}",
                TeamNamespaceArgs(team=team, pod_security=args.pod_security, identity=args.identities[team.name],
                                  cohort=list(args.teams),
                                  queue_ready=self.queueing.ready, object_store=args.object_store,
                                  depends_on=args.depends_on),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for team in args.teams
        }  # fmt: skip
        self.team_namespaces = {team: t.namespace for team, t in self.teams.items()}
        self.job_service_accounts = {team: t.job_service_account for team, t in self.teams.items()}
        # After the JobSet chart: the JobSet policy's type check needs its CRD.
        after_queueing = pulumi.ResourceOptions(
            parent=self, depends_on=[*args.depends_on, *self.queueing.ready]
        )
        for key, vap, binding in all_policies():
            policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
                f"{name}-admission-{key}", metadata=vap["metadata"], spec=vap["spec"], opts=after_queueing
            )
            k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
                f"{name}-admission-{key}-binding", metadata=binding["metadata"], spec=binding["spec"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]),
            )  # fmt: skip
        self.register_outputs({
            "team_namespaces": list(self.team_namespaces),
            "gpu_operator_chart": CHARTS["gpu-operator"].version,
            "kueue_chart": CHARTS["kueue"].version,
            "jobset_chart": CHARTS["jobset"].version,
        })  # fmt: skip
