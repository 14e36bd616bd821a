"""What the AWS pieces (shared FS, object store, endpoints, ECR) need of the EKS cluster: `ClusterFacts.cloud`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from infra.providers.aws.auth import cluster_auth

# The cluster autoscaler's AWS template node (what it believes a node of a group at zero will
# have) advertises only cpu, memory, nvidia.com/gpu and pods, plus a resource per tag
# `<this prefix><resource>: <quantity>` on the ASG or, for EKS managed node groups, on the node
# group itself (kubernetes/autoscaler cluster-autoscaler/cloudprovider/aws/aws_manager.go,
# buildNodeFromTemplate, tag cluster-autoscaler-1.35.0).
AUTOSCALER_RESOURCE_TAG = "k8s.io/cluster-autoscaler/node-template/resources/"


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
class EksFacts:
    """How jobs reach an EKS cluster: a token each user signs with boto3 for the cluster's name
    (infra/providers/aws/auth.py), its address and CA, as Pulumi inputs."""

    cluster_name: str
    region: str
    endpoint: pulumi.Input[str] | None = None
    certificate_authority: pulumi.Input[str] | None = None

    def output(self) -> dict[str, pulumi.Input[str]]:
        """The stack output's `auth` (alchemist_jobs.contract.ClusterAuth; infra/providers/aws/auth.py)."""
        return cluster_auth(self.cluster_name, self.region, self.endpoint, self.certificate_authority)
