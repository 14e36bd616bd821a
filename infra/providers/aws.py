"""Provider `aws`: EKS in its own VPC, ECR, EFS or FSx, an S3 bucket reached through IRSA (infra/cluster_aws.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infra.providers import Provider

if TYPE_CHECKING:
    from infra.cluster_facts import AwsCloud, ClusterFacts
    from infra.config import StackConfig
    from infra.object_store_network import StoreEgress


class AwsProvider(Provider):
    name = "aws"
    shared_fs_kinds = ("efs", "fsx-lustre")
    own_registry = "ECR repositories"
    iam = True

    def cluster(self, stack: str, cfg: StackConfig) -> ClusterFacts:
        from infra.cluster_aws import EksCluster, EksClusterArgs

        return EksCluster("cluster", EksClusterArgs(stack=stack, cfg=cfg)).facts

    def images_args(self, facts: ClusterFacts) -> dict[str, Any]:
        return {"aws_provider": _cloud(facts).network.aws_provider}

    def shared_fs_args(self, facts: ClusterFacts) -> dict[str, Any]:
        return {"aws": _cloud(facts).network}

    def object_store_args(self, facts: ClusterFacts) -> dict[str, Any]:
        return {"aws": _cloud(facts).network}

    def object_store_network(self, cfg: StackConfig, facts: ClusterFacts) -> StoreEgress:
        """S3's and STS's interface endpoints in a VPC block of their own, which pods may reach."""
        from infra.object_store_network import StoreEndpoints, StoreEndpointsArgs, vpc_endpoint_egress

        assert cfg.aws is not None  # checked by config.parse
        net = _cloud(facts).network
        StoreEndpoints("object-store-endpoints", StoreEndpointsArgs(
            aws_provider=net.aws_provider, region=net.region, vpc_id=net.vpc_id,
            vpc_cidr=cfg.aws.vpc_cidr, zones=list(cfg.aws.availability_zones)))  # fmt: skip
        return vpc_endpoint_egress(cfg.aws.vpc_cidr)

    def jobs_access(
        self, cfg: StackConfig, facts: ClusterFacts, platform: Any, on_cluster: Any
    ) -> dict[str, Any]:
        """The EKS cluster's name and address: jobs sign their own token with boto3."""
        return {"eks": _cloud(facts).eks.output()}


def _cloud(facts: ClusterFacts) -> AwsCloud:
    return facts.cloud


PROVIDER = AwsProvider()
