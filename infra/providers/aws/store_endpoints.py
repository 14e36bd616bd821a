"""AWS: the object store on known addresses. Interface VPC endpoints for S3 and STS (IRSA's
AssumeRoleWithWebIdentity) in subnets of their own, carved from a block of the VPC no node,
pod or load balancer uses, with private DNS on; the team namespaces' object-store policy
(infra/object_store_network.py) opens that block on 443."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.object_store_network import HTTPS, StoreEgress

# Interface endpoints the job pods need on AWS: the bucket, and STS for IRSA's web identity.
AWS_SERVICES = ("s3", "sts")


def endpoint_block(vpc_cidr: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    """The last of the VPC's sixteen blocks: the cluster's subnets use the first and the ninth
    onwards, one per zone (at most six; infra/providers/aws/cluster.py subnet_cidrs), so it is free."""
    return list(vpc_cidr.subnets(new_prefix=vpc_cidr.prefixlen + 4))[-1]


def endpoint_subnets(vpc_cidr: ipaddress.IPv4Network, zones: int) -> list[str]:
    """One endpoint subnet per zone, an eighth of the endpoint block each."""
    block = endpoint_block(vpc_cidr)
    return [str(s) for s in list(block.subnets(new_prefix=block.prefixlen + 3))[:zones]]


def vpc_endpoint_egress(vpc_cidr: ipaddress.IPv4Network) -> StoreEgress:
    """AWS: the block of the VPC its S3 and STS endpoints sit in, on HTTPS."""
    return StoreEgress((str(endpoint_block(vpc_cidr)),), HTTPS)


@dataclass
class StoreEndpointsArgs:
    aws_provider: Any
    region: str
    vpc_id: pulumi.Input[str]
    vpc_cidr: ipaddress.IPv4Network
    zones: list[str]


class StoreEndpoints(pulumi.ComponentResource):
    """AWS: interface endpoints for S3 and STS, private DNS on, in subnets of their own that
    take HTTPS from the VPC only."""

    def __init__(self, name: str, args: StoreEndpointsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:StoreEndpoints", name, None, opts)
        on_aws = pulumi.ResourceOptions(parent=self, provider=args.aws_provider)
        subnets = [
            aws.ec2.Subnet(f"{name}-{zone}", vpc_id=args.vpc_id, cidr_block=cidr, availability_zone=zone,
                           tags={"Name": f"{name}-{zone}"}, opts=on_aws)
            for zone, cidr in zip(args.zones, endpoint_subnets(args.vpc_cidr, len(args.zones)))
        ]  # fmt: skip
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg", vpc_id=args.vpc_id, description="Object-store endpoints: HTTPS from the VPC",
            ingress=[{"protocol": "tcp", "from_port": HTTPS, "to_port": HTTPS,
                      "cidr_blocks": [str(args.vpc_cidr)]}],
            opts=on_aws,
        )  # fmt: skip
        self.endpoints = {
            service: aws.ec2.VpcEndpoint(
                f"{name}-{service}",
                vpc_id=args.vpc_id,
                service_name=f"com.amazonaws.{args.region}.{service}",
                vpc_endpoint_type="Interface",
                subnet_ids=[s.id for s in subnets],
                security_group_ids=[self.security_group.id],
                private_dns_enabled=True,
                # S3 offers a gateway endpoint too; without one, private DNS answers every
                # resolver of the VPC (the pods' included), not only inbound ones.
                dns_options=(aws.ec2.VpcEndpointDnsOptionsArgs(private_dns_only_for_inbound_resolver_endpoint=False)
                             if service == "s3" else None),
                opts=on_aws,
            )
            for service in AWS_SERVICES
        }  # fmt: skip
        self.register_outputs({"block": str(endpoint_block(args.vpc_cidr))})
