"""Provider `aws`: EKS in its own VPC, ECR, EFS or FSx, an S3 bucket reached through IRSA (infra/providers/aws/cluster.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from infra.providers import Provider
from infra.providers.aws import config
from infra.providers.aws.fabric import EFA_RESOURCE, network_fabric
from infra.providers.aws.policies import CHECKS
from infra.providers.registry import DeployTimeValue

if TYPE_CHECKING:
    from infra.cluster_facts import ClusterFacts
    from infra.config import StackConfig
    from infra.object_store import ObjectStoreBackend
    from infra.object_store_network import StoreEgress
    from infra.providers.aws.facts import AwsCloud
    from infra.render_mocks import RenderMocks
    from infra.shared_fs import SharedFsBackend


class AwsProvider(Provider):
    name = "aws"
    shared_fs_kinds = ("efs", "fsx-lustre")
    fabric_resource = EFA_RESOURCE
    section = config.SECTION
    config_model = config.AwsConfig
    shared_fs_models = (config.EfsFs, config.FsxLustreFs)
    principal_pattern = config.IAM_PRINCIPAL
    principals_accepted = config.IAM_PRINCIPAL_ACCEPTED
    own_registry = "ECR repositories"
    iam = True
    # EKS runs etcd, the scheduler and the controller manager out of reach
    hidden_control_plane = ("kubeEtcd", "kubeScheduler", "kubeControllerManager")
    deploy_time = (
        DeployTimeValue(
            "publicAccessCidrs",
            ["100.20.30.40/32"],
            "pulumi config set --path 'alchemist:aws.publicAccessCidrs[0]' <cidr>",
            lambda section: section.get("endpointPublicAccess", True) is not False,
        ),
    )

    def describe(self, config: dict[str, Any]) -> str:
        aws = config.get("alchemist:aws") or {}
        gpu = aws.get("gpuNodes") or {}
        types = ",".join(gpu.get("instanceTypes", []))
        return f"{aws.get('region', '?')}, GPU nodes {types} x0..{gpu.get('maxSize', '?')}"

    def check_config(self, cfg: StackConfig) -> None:
        config.check(cfg)

    def cluster(self, stack: str, cfg: StackConfig) -> ClusterFacts:
        from infra.providers.aws.cluster import EksCluster, EksClusterArgs

        return EksCluster("cluster", EksClusterArgs(stack=stack, cfg=cfg)).facts

    def shared_fs_backend(self, facts: ClusterFacts) -> SharedFsBackend:
        from infra.providers.aws.shared_fs import AwsSharedFs

        return AwsSharedFs(_cloud(facts).network)

    def object_store_backend(self, facts: ClusterFacts) -> ObjectStoreBackend:
        from infra.providers.aws.object_store import S3Bucket

        return S3Bucket(_cloud(facts).network)

    def object_store_network(self, cfg: StackConfig, facts: ClusterFacts) -> StoreEgress:
        """S3's and STS's interface endpoints in a VPC block of their own, which pods may reach."""
        from infra.providers.aws.store_endpoints import (
            StoreEndpoints,
            StoreEndpointsArgs,
            vpc_endpoint_egress,
        )

        section = config.aws_config(cfg)
        net = _cloud(facts).network
        StoreEndpoints("object-store-endpoints", StoreEndpointsArgs(
            aws_provider=net.aws_provider, region=net.region, vpc_id=net.vpc_id,
            vpc_cidr=section.vpc_cidr, zones=list(section.availability_zones)))  # fmt: skip
        return vpc_endpoint_egress(section.vpc_cidr)

    def policy_checks(self) -> dict[str, tuple[Callable[[Any], list[str]], ...]]:
        return CHECKS

    def render_mocks(self) -> RenderMocks:
        from infra.providers.aws.render_mocks import AwsMocks  # only renders under the mocks load it

        return AwsMocks()

    def network_fabric(self, facts: ClusterFacts) -> dict[str, Any] | None:
        """EFA, where the GPU instance type has it (infra/providers/aws/fabric.py)."""
        return network_fabric(facts.fabric_per_node, facts.fabric_rdma_read)

    def jobs_access(
        self, cfg: StackConfig, facts: ClusterFacts, platform: Any, on_cluster: Any
    ) -> dict[str, Any]:
        """The EKS cluster's name and address: jobs sign their own token with boto3."""
        return {"auth": _cloud(facts).eks.output()}


def _cloud(facts: ClusterFacts) -> AwsCloud:
    return facts.cloud


PROVIDER = AwsProvider()
