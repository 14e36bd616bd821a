"""AWS: a VPC and an EKS cluster (pulumi-eks) with a system and a GPU managed node group, plus the cluster autoscaler."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as kubernetes

from infra.cluster import GPU_NODE_LABELS, GPU_TAINT, SYSTEM_NODE_LABELS, AwsNetwork, ClusterFacts, Registry
from infra.config import AwsConfig, StackConfig
from infra.policies import OPEN_ENDPOINTS_TAG
from infra.shared_fs import irsa_trust_policy
from infra.versions import CHARTS

SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"
NODE_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
    "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
)
AUTOSCALER_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": [
                "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
                "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities",
                "autoscaling:DescribeTags", "ec2:DescribeImages", "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplateVersions", "ec2:GetInstanceTypesFromInstanceRequirements",
                "eks:DescribeNodegroup",
            ],  # fmt: skip
            "Resource": "*",
        },
        {
            "Effect": "Allow",
            "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
            "Resource": "*",
        },
    ],
}


def subnet_cidrs(vpc_cidr: ipaddress.IPv4Network, zones: int) -> tuple[list[str], list[str]]:
    """Split the VPC into sixteen blocks: private subnets from the first, public from the ninth."""
    blocks = list(vpc_cidr.subnets(new_prefix=vpc_cidr.prefixlen + 4))
    return [str(b) for b in blocks[:zones]], [str(b) for b in blocks[8 : 8 + zones]]


@dataclass
class EksClusterArgs:
    stack: str
    cfg: StackConfig


class EksCluster(pulumi.ComponentResource):
    """VPC (public + private subnets, one NAT), EKS with IMDSv2 node groups, autoscaler; ends in a Provider."""

    def __init__(self, name: str, args: EksClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:EksCluster", name, None, opts)
        cfg: AwsConfig = args.cfg.aws  # type: ignore[assignment]
        cluster_name = f"alchemist-{args.stack}"
        self.aws_provider = aws.Provider(
            f"{name}-aws",
            region=cfg.region,
            default_tags={"tags": {"alchemist.io/stack": args.stack, "alchemist.io/managed-by": "pulumi"}},
            opts=pulumi.ResourceOptions(parent=self),
        )
        on_aws = pulumi.ResourceOptions(parent=self, provider=self.aws_provider)
        vpc, private_ids, public_ids = self._network(name, cluster_name, cfg, on_aws)

        node_role = aws.iam.Role(
            f"{name}-node-role",
            assume_role_policy=json.dumps({
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                               "Action": "sts:AssumeRole"}],
            }),  # fmt: skip
            opts=on_aws,
        )
        attachments = [
            aws.iam.RolePolicyAttachment(f"{name}-node-policy-{i}", role=node_role.name, policy_arn=arn, opts=on_aws)
            for i, arn in enumerate(NODE_POLICIES)
        ]
        secrets_key = aws.kms.Key(
            f"{name}-secrets-key",
            description=f"{cluster_name}: envelope encryption of Kubernetes secrets",
            enable_key_rotation=True,
            opts=on_aws,
        )
        tags = {"alchemist.io/stack": args.stack}
        # The open-endpoints policy reads this tag, so the pack and the tests judge the same resource.
        if args.cfg.allow_open_endpoints:
            tags[OPEN_ENDPOINTS_TAG] = "allowed-by-stack-config"
        with_aws = pulumi.ResourceOptions(parent=self, providers={"aws": self.aws_provider})
        self.cluster = eks.Cluster(
            f"{name}-eks",
            name=cluster_name,
            version=args.cfg.kubernetes_version,
            vpc_id=vpc.id,
            private_subnet_ids=private_ids,
            public_subnet_ids=public_ids,
            node_associate_public_ip_address=False,
            skip_default_node_group=True,
            authentication_mode=eks.AuthenticationMode.API,
            endpoint_private_access=True,
            endpoint_public_access=cfg.endpoint_public_access,
            public_access_cidrs=[str(c) for c in cfg.public_access_cidrs] if cfg.endpoint_public_access else None,
            create_oidc_provider=True,
            encryption_config_key_arn=secrets_key.arn,
            enabled_cluster_log_types=["api", "audit", "authenticator"],
            storage_classes={"gp3": eks.StorageClassArgs(type="gp3", default=True, encrypted=True)},
            tags=tags,
            opts=with_aws,
        )
        after_cluster = pulumi.ResourceOptions(
            parent=self, providers={"aws": self.aws_provider}, depends_on=attachments
        )
        self.system_nodes = eks.ManagedNodeGroup(
            f"{name}-system-nodes",
            cluster=self.cluster,
            node_role_arn=node_role.arn,
            instance_types=[cfg.system_nodes.instance_type],
            ami_type=SYSTEM_AMI_TYPE,
            subnet_ids=private_ids,
            labels=dict(SYSTEM_NODE_LABELS),
            scaling_config={"min_size": cfg.system_nodes.min_size, "max_size": cfg.system_nodes.max_size,
                            "desired_size": cfg.system_nodes.desired_size},  # fmt: skip
            disk_size=50,
            enable_imd_sv2=True,
            opts=after_cluster,
        )
        gpu = cfg.gpu_nodes
        self.gpu_nodes = eks.ManagedNodeGroup(
            f"{name}-gpu-nodes",
            cluster=self.cluster,
            node_role_arn=node_role.arn,
            instance_types=list(gpu.instance_types),
            ami_type=gpu.ami_type,  # the EKS NVIDIA AMI: driver and container toolkit included
            capacity_type=gpu.capacity_type,
            subnet_ids=private_ids,
            labels=dict(GPU_NODE_LABELS),
            taints=[{"key": GPU_TAINT["key"], "value": GPU_TAINT["value"], "effect": "NO_SCHEDULE"}],
            scaling_config={"min_size": gpu.min_size, "max_size": gpu.max_size, "desired_size": gpu.desired_size},
            ignore_scaling_changes=True,  # the cluster autoscaler owns the desired size
            disk_size=gpu.disk_size_gib,
            enable_imd_sv2=gpu.require_imdsv2,
            opts=after_cluster,
        )
        self.kubeconfig_json = pulumi.Output.secret(self.cluster.kubeconfig_json)
        self.provider = kubernetes.Provider(
            f"{name}-k8s", kubeconfig=self.kubeconfig_json, opts=pulumi.ResourceOptions(parent=self)
        )
        self._autoscaler(name, cluster_name, cfg, on_aws)

        kubeconfig = self.cluster.kubeconfig_json.apply(json.loads)
        # Neither is secret: the pulumi-eks kubeconfig holds no credential (it runs `aws eks get-token`).
        endpoint = pulumi.Output.unsecret(kubeconfig.apply(lambda k: k["clusters"][0]["cluster"]["server"]))
        ca = pulumi.Output.unsecret(
            kubeconfig.apply(lambda k: k["clusters"][0]["cluster"]["certificate-authority-data"])
        )
        self.facts = ClusterFacts(
            provider=self.provider,
            kubeconfig=None,
            eks={"cluster_name": cluster_name, "region": cfg.region, "endpoint": endpoint,
                 "certificate_authority": ca},  # fmt: skip
            gpus_per_node=gpu.gpus_per_node,
            gpu_driver_by_operator=False,
            toolkit_by_operator=False,
            registry=Registry(prefix="", host="", ecr_repositories=True),
            aws=AwsNetwork(
                aws_provider=self.aws_provider,
                region=cfg.region,
                vpc_id=vpc.id,
                vpc_cidr=str(cfg.vpc_cidr),
                private_subnet_ids=private_ids,
                oidc_provider_arn=self.cluster.oidc_provider_arn,
                oidc_provider_url=self.cluster.oidc_provider_url,
                node_security_group_id=self.cluster.node_security_group_id,
            ),
            depends_on=[self.system_nodes],
        )
        self.register_outputs({"cluster_name": cluster_name, "region": cfg.region, "endpoint": endpoint})

    def _network(self, name: str, cluster_name: str, cfg: AwsConfig, on_aws: pulumi.ResourceOptions):
        """A VPC with a private and a public subnet per zone; nodes stay private behind one NAT."""
        vpc = aws.ec2.Vpc(
            f"{name}-vpc", cidr_block=str(cfg.vpc_cidr), enable_dns_hostnames=True, enable_dns_support=True,
            tags={"Name": cluster_name}, opts=on_aws,
        )  # fmt: skip
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags={"Name": cluster_name}, opts=on_aws)
        private_cidrs, public_cidrs = subnet_cidrs(cfg.vpc_cidr, len(cfg.availability_zones))
        cluster_tag = f"kubernetes.io/cluster/{cluster_name}"
        public = [
            aws.ec2.Subnet(
                f"{name}-public-{zone}", vpc_id=vpc.id, cidr_block=cidr, availability_zone=zone,
                map_public_ip_on_launch=False,
                tags={"Name": f"{cluster_name}-public-{zone}", "kubernetes.io/role/elb": "1", cluster_tag: "shared"},
                opts=on_aws,
            )  # fmt: skip
            for zone, cidr in zip(cfg.availability_zones, public_cidrs)
        ]
        private = [
            aws.ec2.Subnet(
                f"{name}-private-{zone}", vpc_id=vpc.id, cidr_block=cidr, availability_zone=zone,
                tags={"Name": f"{cluster_name}-private-{zone}", "kubernetes.io/role/internal-elb": "1",
                      cluster_tag: "shared"},
                opts=on_aws,
            )  # fmt: skip
            for zone, cidr in zip(cfg.availability_zones, private_cidrs)
        ]
        eip = aws.ec2.Eip(f"{name}-nat-ip", domain="vpc", opts=on_aws)
        nat = aws.ec2.NatGateway(
            f"{name}-nat", allocation_id=eip.id, subnet_id=public[0].id, tags={"Name": cluster_name},
            opts=pulumi.ResourceOptions(parent=self, provider=self.aws_provider, depends_on=[igw]),
        )  # fmt: skip
        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt", vpc_id=vpc.id, routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}],
            opts=on_aws,
        )  # fmt: skip
        private_rt = aws.ec2.RouteTable(
            f"{name}-private-rt", vpc_id=vpc.id, routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
            opts=on_aws,
        )  # fmt: skip
        for kind, subnets, rt in (("public", public, public_rt), ("private", private, private_rt)):
            for i, subnet in enumerate(subnets):
                aws.ec2.RouteTableAssociation(
                    f"{name}-{kind}-rta-{i}", subnet_id=subnet.id, route_table_id=rt.id, opts=on_aws
                )
        return vpc, [s.id for s in private], [s.id for s in public]

    def _autoscaler(self, name: str, cluster_name: str, cfg: AwsConfig, on_aws: pulumi.ResourceOptions) -> None:
        """Cluster autoscaler (IRSA) so the GPU group scales from zero when GPU jobs are admitted."""
        sa = "cluster-autoscaler"
        role = aws.iam.Role(
            f"{name}-autoscaler-role",
            assume_role_policy=irsa_trust_policy(
                self.cluster.oidc_provider_arn, self.cluster.oidc_provider_url, "kube-system", sa
            ),
            opts=on_aws,
        )
        aws.iam.RolePolicy(f"{name}-autoscaler-policy", role=role.id, policy=json.dumps(AUTOSCALER_POLICY), opts=on_aws)
        pin = CHARTS["cluster-autoscaler"]
        kubernetes.helm.v4.Chart(
            f"{name}-cluster-autoscaler",
            chart=pin.chart,
            version=pin.version,
            repository_opts={"repo": pin.repo},
            namespace="kube-system",
            values={
                "autoDiscovery": {"clusterName": cluster_name},
                "awsRegion": cfg.region,
                "rbac": {"serviceAccount": {"create": True, "name": sa,
                                            "annotations": {"eks.amazonaws.com/role-arn": role.arn}}},
                "extraArgs": {"balance-similar-node-groups": True, "expander": "least-waste",
                              "skip-nodes-with-system-pods": False},
                "nodeSelector": dict(SYSTEM_NODE_LABELS),
            },  # fmt: skip
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=[self.system_nodes]),
        )
