"""How job pods reach the object store: the addresses a platform NetworkPolicy opens to them, and on AWS the VPC endpoints behind those addresses.

Staging (`data.source: s3://...`) runs in the job pod, and a team namespace denies all egress
but DNS. So each team namespace gets one more platform policy, `alchemist-object-store`
(infra/team_namespace.py), opening TCP to the store's addresses on its port, and nothing
else. A NetworkPolicy matches addresses, never host names, so the store must sit on known
addresses:

- AWS: S3's and STS's public addresses are many and change. The stack instead puts
  interface VPC endpoints for S3 and STS (IRSA's AssumeRoleWithWebIdentity) in subnets of
  their own, carved from a block of the VPC no node, pod or load balancer uses, with private
  DNS on: `s3.<region>.amazonaws.com` and `sts.<region>.amazonaws.com` resolve there inside
  the VPC. The policy opens that block on 443: the pods reach the endpoints, not the world.
- Elsewhere: the S3-compatible service's endpoint, by address (`objectStore.cidrs`, or the
  endpoint itself when it is an IP address), on the endpoint URL's port.

Nothing here names another run or team: the store's access control (IAM, keys) decides
what a team may read there.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pulumi

from infra.config import StackConfig, endpoint_address

HTTPS = 443
STORE_POLICY = "alchemist-object-store"
# Interface endpoints the job pods need on AWS: the bucket, and STS for IRSA's web identity.
AWS_SERVICES = ("s3", "sts")


@dataclass(frozen=True)
class StoreEgress:
    """Where job pods may connect to reach the object store: addresses and one TCP port."""

    cidrs: tuple[str, ...]
    port: int


def endpoint_block(vpc_cidr: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    """The last of the VPC's sixteen blocks: the cluster's subnets use the first and the ninth
    onwards, one per zone (at most six; infra/cluster_aws.py subnet_cidrs), so it is free."""
    return list(vpc_cidr.subnets(new_prefix=vpc_cidr.prefixlen + 4))[-1]


def endpoint_subnets(vpc_cidr: ipaddress.IPv4Network, zones: int) -> list[str]:
    """One endpoint subnet per zone, an eighth of the endpoint block each."""
    block = endpoint_block(vpc_cidr)
    return [str(s) for s in list(block.subnets(new_prefix=block.prefixlen + 3))[:zones]]


def _endpoint_port(endpoint: str) -> int:
    url = urlsplit(endpoint)
    return url.port or (HTTPS if url.scheme == "https" else 80)


def vpc_endpoint_egress(vpc_cidr: ipaddress.IPv4Network) -> StoreEgress:
    """AWS: the block of the VPC its S3 and STS endpoints sit in, on HTTPS."""
    return StoreEgress((str(endpoint_block(vpc_cidr)),), HTTPS)


def store_egress(cfg: StackConfig) -> StoreEgress | None:
    """What job pods may reach of the S3-compatible store the config names; None where it names none."""
    store = cfg.object_store
    if store is None or store.endpoint is None:
        return None
    cidrs = tuple(str(c) for c in store.cidrs) or (endpoint_address(store.endpoint),)
    return StoreEgress(cidrs, _endpoint_port(store.endpoint))  # type: ignore[arg-type]


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
        import pulumi_aws as aws

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
                **({"dns_options": {"private_dns_only_for_inbound_resolver_endpoint": False}}
                   if service == "s3" else {}),
                opts=on_aws,
            )
            for service in AWS_SERVICES
        }  # fmt: skip
        self.register_outputs({"block": str(endpoint_block(args.vpc_cidr))})
