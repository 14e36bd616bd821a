"""What every cluster component hands the rest of the program: node labels, registry, network and cluster facts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

from infra.config import StackConfig

# The GPU nodes the program makes carry this label and taint on every provider, so a job's node
# selector and tolerations (stack output `gpu`) and Kueue's GPU flavor are the same there; an
# `existing` cluster's GPU nodes are selected by their own labels (ClusterFacts.gpu_node_labels).
GPU_NODE_LABELS = {"alchemist.io/pool": "gpu"}
SYSTEM_NODE_LABELS = {"alchemist.io/pool": "system"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
GPU_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"  # extended resource of the EFA device plugin
# The cluster autoscaler's AWS template node (what it believes a node of a group at zero will
# have) advertises only cpu, memory, nvidia.com/gpu and pods, plus a resource per tag
# `<this prefix><resource>: <quantity>` on the ASG or, for EKS managed node groups, on the node
# group itself (kubernetes/autoscaler cluster-autoscaler/cloudprovider/aws/aws_manager.go,
# buildNodeFromTemplate, tag cluster-autoscaler-1.35.0).
AUTOSCALER_RESOURCE_TAG = "k8s.io/cluster-autoscaler/node-template/resources/"
# Where every kind node mounts the host's shared directory; the hostPath PV points here.
KIND_SHARED_PATH = "/var/alchemist/shared"


@dataclass
class Registry:
    """Where images are pushed: `prefix` + `/train`; credentials when the registry needs them."""

    prefix: pulumi.Input[str]
    host: pulumi.Input[str]
    user: pulumi.Input[str] | None = None
    password: pulumi.Input[str] | None = None  # a secret Output
    ecr_repositories: bool = False  # Images creates one ECR repository per image
    ready: list[Any] = field(default_factory=list)  # what must exist before the first push


@dataclass
class AwsNetwork:
    """What the AWS shared file system needs from the cluster layer."""

    aws_provider: Any
    region: str
    vpc_id: pulumi.Input[str]
    vpc_cidr: str
    private_subnet_ids: list[pulumi.Input[str]]
    oidc_provider_arn: pulumi.Input[str]
    oidc_provider_url: pulumi.Input[str]
    node_security_group_id: pulumi.Input[str]


@dataclass
class AwsCloud:
    """ClusterFacts.cloud of an EKS cluster."""

    network: AwsNetwork
    eks: EksFacts


@dataclass
class ClusterArgs:
    """What every cluster component takes: the stack's name and its validated config."""

    stack: str
    cfg: StackConfig


@dataclass
class EksFacts:
    """How jobs reach an EKS cluster: the fields of the contract's `EksAccess`, as Pulumi inputs."""

    cluster_name: str
    region: str
    endpoint: pulumi.Input[str] | None = None
    certificate_authority: pulumi.Input[str] | None = None

    def output(self) -> dict[str, pulumi.Input[str]]:
        """The stack output's `eks` (alchemist_jobs.contract.EksAccess)."""
        fields = ("cluster_name", "region", "endpoint", "certificate_authority")
        return {f: getattr(self, f) for f in fields if getattr(self, f) is not None}


@dataclass
class ClusterFacts:
    """The facts jobs and the platform need about a cluster, whatever made it."""

    provider: Any  # kubernetes.Provider
    kubeconfig: pulumi.Output[str] | None  # secret; None where jobs reach the cluster otherwise
    gpus_per_node: int
    # The GPU Operator installs what the nodes lack: the driver unless the AMI/host has it,
    # the container toolkit unless cluster creation already configured the runtime.
    gpu_driver_by_operator: bool
    toolkit_by_operator: bool
    registry: Registry
    cloud: Any = None  # the provider's own facts, read by its module only (AwsCloud on AWS)
    efa_per_node: int = 0  # EFA interfaces of every GPU node; 0 when EFA is off
    efa_rdma_read: bool = (
        False  # every GPU node's EFA devices do RDMA read (infra/providers/aws/instance_types.py)
    )
    # The labels every GPU node carries: the node selector of GPU pods (stack output `gpu`) and
    # the node labels of Kueue's `gpu` flavor. The platform's own GPU nodes get GPU_NODE_LABELS;
    # an `existing` cluster's are whatever its config says (by default the GPU Operator's).
    gpu_node_labels: dict[str, str] = field(default_factory=lambda: dict(GPU_NODE_LABELS))
    # Each team's own kubeconfig (secret), where the cluster gives each team its own credential
    # (k3s: a client certificate per team); `kubeconfig` is then the default team's.
    team_kubeconfigs: dict[str, pulumi.Output[str]] = field(default_factory=dict)
    depends_on: list[Any] = field(default_factory=list)  # what k8s resources must wait for
