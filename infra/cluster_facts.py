"""What every cluster component hands the rest of the program: node labels, registry, network and cluster facts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

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
# Where every kind node mounts the host's shared directory; the hostPath PV points here.
KIND_SHARED_PATH = "/var/alchemist/shared"


@dataclass
class HostedRepositories:
    """The repositories a provider's own registry made for the images, and the push login."""

    urls: dict[str, pulumi.Input[str]]  # image -> repository (what `:tag` and `@digest` follow)
    host: pulumi.Input[str]
    user: pulumi.Input[str]
    password: pulumi.Input[str]  # a secret Output


class HostedRegistry(Protocol):
    """A registry the provider runs itself, one repository per image (`Registry.hosted`).

    Its nodes pull with their own identity, so no pull secret is made for it."""

    def repositories(
        self, name: str, stack: str, images: Sequence[str], parent: pulumi.Resource
    ) -> HostedRepositories:
        """Create the repositories as children of `parent` (named `{name}-...`) and return them."""
        ...


@dataclass
class Registry:
    """Where images are pushed: `prefix` + `/train`; credentials when the registry needs them."""

    prefix: pulumi.Input[str]
    host: pulumi.Input[str]
    user: pulumi.Input[str] | None = None
    password: pulumi.Input[str] | None = None  # a secret Output
    hosted: HostedRegistry | None = None  # the provider's own registry: Images asks it for repositories
    ready: list[Any] = field(default_factory=list)  # what must exist before the first push


@dataclass
class ClusterArgs:
    """What every cluster component takes: the stack's name and its validated config."""

    stack: str
    cfg: StackConfig


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
    cloud: Any = None  # the provider's own facts, read by its package only
    # The GPU nodes' network fabric (a provider's own high-speed interconnect between nodes, which
    # NCCL reaches through a plugin): its devices on every GPU node (0: none), whether they do RDMA
    # read, and the training image's build arguments that add what NCCL needs to use it. The
    # provider describes it to jobs (Provider.network_fabric) and its device plugin advertises it.
    fabric_per_node: int = 0
    fabric_rdma_read: bool = False
    fabric_build_args: dict[str, str] = field(default_factory=dict)
    # The labels every GPU node carries: the node selector of GPU pods (stack output `gpu`) and
    # the node labels of Kueue's `gpu` flavor. The platform's own GPU nodes get GPU_NODE_LABELS;
    # an `existing` cluster's are whatever its config says (by default the GPU Operator's).
    gpu_node_labels: dict[str, str] = field(default_factory=lambda: dict(GPU_NODE_LABELS))
    # Each team's own kubeconfig (secret), where the cluster gives each team its own credential
    # (a client certificate per team, say); `kubeconfig` is then the default team's.
    team_kubeconfigs: dict[str, pulumi.Output[str]] = field(default_factory=dict)
    depends_on: list[Any] = field(default_factory=list)  # what k8s resources must wait for
