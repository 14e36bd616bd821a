"""The AWS provider's stack config: the `alchemist:aws` section (VPC, EKS node groups), its shared
file systems (`efs`, `fsx-lustre`), its team principals (IAM ARNs) and the checks across them."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import Field

from infra.config import NAMESPACE, ConfigModel, Size, StackConfig, StackConfigError
from infra.providers.aws.instance_types import efa_interfaces, group_efa

SECTION = "aws"
# A team principal (`alchemist:teams[].principals`): an IAM role or user ARN.
IAM_PRINCIPAL = r"^arn:aws(-[a-z]+)*:iam::[0-9]{12}:(role|user)/[\w+=,.@/-]+$"
IAM_PRINCIPAL_ACCEPTED = (
    "IAM role or user ARNs (arn:aws:iam::<account>:role/<name>) that submit for the team (aws only)"
)
# Networks no deployer can come from (RFC 5737 documentation ranges and the like): a public
# API endpoint open only to them is unreachable, and `pulumi up` times out after the cluster.
NOT_A_DEPLOYER_NETWORK = "a public network you deploy from, such as your egress address/32"


class NodePool(ConfigModel):
    """An EKS managed node group's instance type and autoscaling bounds."""

    instance_type: str = Field(min_length=1)
    min_size: Size = 1
    max_size: Annotated[int, Field(ge=1, le=1000)] = 3
    desired_size: Size = 1


class GpuPool(ConfigModel):
    """The GPU managed node group: NVIDIA AMI, tainted for GPU work, scaled by the autoscaler."""

    instance_types: list[Annotated[str, Field(pattern=r"^(g|p)[0-9][a-z0-9-]*\.[0-9a-z]+$")]] = Field(
        min_length=1, description="GPU instance types such as g5.12xlarge or p4d.24xlarge"
    )
    ami_type: str = Field("AL2023_x86_64_NVIDIA", description="AL2023_x86_64_NVIDIA")
    gpus_per_node: Annotated[int, Field(ge=1, le=16)] = Field(description="GPUs per node, 1 to 16")
    min_size: Size = 0
    max_size: Annotated[int, Field(ge=1, le=1000)] = 2
    desired_size: Size = 0
    disk_size_gib: Annotated[int, Field(ge=50, le=16384)] = Field(200, alias="diskSizeGiB")
    capacity_type: Literal["ON_DEMAND", "SPOT"] = "ON_DEMAND"
    require_imdsv2: bool = Field(True, description="true (policy imdsv2-on-gpu-nodes requires it)")
    efa: bool | None = Field(
        None,
        description="true, false, or unset: on when every instance type has EFA (infra/providers/aws/instance_types.py)",
    )

    @property
    def efa_interfaces(self) -> int:
        """EFA interfaces each GPU node gets: 0 when EFA is off or a type lacks it."""
        return 0 if self.efa is False else group_efa(list(self.instance_types))


class AwsConfig(ConfigModel):
    """VPC + EKS (pulumi-eks) with a system and a GPU managed node group."""

    region: str = Field(
        pattern=r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", description="an AWS region such as us-west-2"
    )
    availability_zones: list[str] = Field(
        min_length=2, max_length=6, description="2 to 6 zones of the region"
    )
    vpc_cidr: ipaddress.IPv4Network = Field(description="an IPv4 /16 to /20 such as 10.40.0.0/16")
    endpoint_public_access: bool = True
    public_access_cidrs: list[ipaddress.IPv4Network] = Field(
        default_factory=list, description="networks allowed to reach the public API endpoint"
    )
    system_nodes: NodePool = NodePool(instance_type="m6i.large", min_size=2, max_size=4, desired_size=2)
    gpu_nodes: GpuPool = Field(description="{instanceTypes, gpusPerNode, minSize, maxSize, ...}")


class EfsFs(ConfigModel):
    kind: Literal["efs"]
    encrypted: bool = Field(True, description="true (policy storage-encrypted requires it)")
    throughput_mode: Literal["elastic", "bursting"] = "elastic"


class FsxLustreFs(ConfigModel):
    kind: Literal["fsx-lustre"]
    storage_capacity_gib: Annotated[int, Field(ge=1200, le=100800, multiple_of=1200)] = Field(
        1200, alias="storageCapacityGiB"
    )
    deployment_type: Literal["SCRATCH_2", "PERSISTENT_2"] = "SCRATCH_2"
    per_unit_storage_throughput: Literal[125, 250, 500, 1000] = 250


def aws_config(cfg: StackConfig) -> AwsConfig:
    """The stack's `alchemist:aws` section (config.parse has refused a stack of this provider without one)."""
    section = cfg.section
    assert isinstance(section, AwsConfig), "provider aws without an aws section"
    return section


def check(cfg: StackConfig) -> None:
    """The rules across the section's keys that its model alone cannot state."""
    if not isinstance(cfg.section, AwsConfig):
        return
    aws = cfg.section
    key = f"{NAMESPACE}:{SECTION}"
    for i, zone in enumerate(aws.availability_zones):
        if not (zone.startswith(aws.region) and len(zone) == len(aws.region) + 1):
            raise StackConfigError(f"{key}.availabilityZones[{i}]", zone,
                                   f"a zone of {aws.region}, such as {aws.region}a")  # fmt: skip
    if not 16 <= aws.vpc_cidr.prefixlen <= 20:
        raise StackConfigError(f"{key}.vpcCidr", str(aws.vpc_cidr), "a /16 to /20 network")
    if aws.endpoint_public_access and not aws.public_access_cidrs:
        raise StackConfigError(f"{key}.publicAccessCidrs", None,
                               f"{NOT_A_DEPLOYER_NETWORK}, set by the deployer with `pulumi config set --path "
                               f"'{key}.publicAccessCidrs[0]' <cidr>` (or endpointPublicAccess: false)",
                               missing=True)  # fmt: skip
    for i, cidr in enumerate(aws.public_access_cidrs):
        if cidr.prefixlen and not cidr.is_global:  # 0.0.0.0/0 is judged by policy no-open-endpoints
            raise StackConfigError(f"{key}.publicAccessCidrs[{i}]", str(cidr),
                                   f"{NOT_A_DEPLOYER_NETWORK} ({cidr} is private or reserved for "
                                   "documentation: nobody can reach the API from it)")  # fmt: skip
    _check_gpu_pool(aws)
    for pool_key, pool in (("systemNodes", aws.system_nodes), ("gpuNodes", aws.gpu_nodes)):
        if not pool.min_size <= pool.desired_size <= pool.max_size:
            raise StackConfigError(f"{key}.{pool_key}",
                                   {"minSize": pool.min_size, "desiredSize": pool.desired_size,
                                    "maxSize": pool.max_size},
                                   "minSize <= desiredSize <= maxSize")  # fmt: skip


def _check_gpu_pool(aws: AwsConfig) -> None:
    key = f"{NAMESPACE}:{SECTION}.gpuNodes"
    gpu = aws.gpu_nodes
    if gpu.ami_type != "AL2023_x86_64_NVIDIA":
        # Bottlerocket's NVIDIA variant runs its own device plugin and toolkit; the GPU Operator
        # would run a second set on the same nodes.
        raise StackConfigError(f"{key}.amiType", gpu.ami_type,
                               "AL2023_x86_64_NVIDIA (the GPU Operator manages the device plugin, "
                               "DCGM and feature discovery; Bottlerocket's NVIDIA AMI runs its own)")  # fmt: skip
    if gpu.efa:
        for i, t in enumerate(gpu.instance_types):
            if not efa_interfaces(t):
                raise StackConfigError(
                    f"{key}.instanceTypes[{i}]",
                    t,
                    "an EFA instance type with efa: true (see infra/providers/aws/instance_types.py)",
                )
