"""AWS: a VPC and an EKS cluster (pulumi-eks) with a system and a GPU managed node group, plus the cluster autoscaler."""

from __future__ import annotations

import datetime
import ipaddress
import json
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as kubernetes

from infra.cluster_facts import (
    GPU_NODE_LABELS,
    GPU_TAINT,
    GPU_TOLERATIONS,
    SYSTEM_NODE_LABELS,
    ClusterArgs,
    ClusterFacts,
    Registry,
)
from infra.config import StackConfig
from infra.policies import OPEN_ENDPOINTS_TAG
from infra.providers.aws.cluster_addons import CloudIdentityAddon, CloudIdentityAddonArgs
from infra.providers.aws.config import AwsConfig, GpuPool, NodePool, aws_config
from infra.providers.aws.ecr import EcrRepositories
from infra.providers.aws.fabric import EFA_RESOURCE, IMAGE_BUILD_ARGS
from infra.providers.aws.facts import AUTOSCALER_RESOURCE_TAG, AwsCloud, AwsNetwork, EksFacts
from infra.providers.aws.instance_types import ACCELERATOR_LABEL, gpu_model, group_efa_rdma_read
from infra.providers.aws.versions import EFA_DEVICE_PLUGIN_CHART, autoscaler_chart, eks_support_warning
from infra.versions import KUBERNETES_VERSIONS

SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"
# The root volume of the AL2023 EKS AMIs (pulumi-eks nodes/nodegroup.ts, createMNGCustomLaunchTemplate).
ROOT_DEVICE = "/dev/xvda"
EBS_CSI_DRIVER = "ebs.csi.aws.com"
# The service account the aws-ebs-csi-driver add-on's controller runs as (AWS EKS user guide,
# "Store Kubernetes volumes with Amazon EBS": the IAM role trusts kube-system:ebs-csi-controller-sa).
EBS_CSI_SERVICE_ACCOUNT = "ebs-csi-controller-sa"
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
                "autoscaling:DescribeAutoScalingGroups",
                "autoscaling:DescribeAutoScalingInstances",
                "autoscaling:DescribeLaunchConfigurations",
                "autoscaling:DescribeScalingActivities",
                "autoscaling:DescribeTags",
                "ec2:DescribeImages",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplateVersions",
                "ec2:GetInstanceTypesFromInstanceRequirements",
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


EksClusterArgs = ClusterArgs


class EksCluster(pulumi.ComponentResource):
    """VPC (public + private subnets, one NAT), EKS with IMDSv2 node groups, autoscaler; ends in a Provider."""

    def __init__(self, name: str, args: EksClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:EksCluster", name, None, opts)
        cfg = aws_config(args.cfg)
        cluster_name = f"alchemist-{args.stack}"
        warning = eks_support_warning(
            args.cfg.kubernetes_version, datetime.date.today().isoformat(), KUBERNETES_VERSIONS
        )
        if warning:
            pulumi.log.warn(warning, resource=self)
        self.aws_provider = aws.Provider(
            f"{name}-aws",
            region=cfg.region,
            default_tags={"tags": {"alchemist.io/stack": args.stack, "alchemist.io/managed-by": "pulumi"}},
            opts=pulumi.ResourceOptions(parent=self),
        )
        on_aws = pulumi.ResourceOptions(parent=self, provider=self.aws_provider)
        vpc, private_ids, public_ids = self._network(name, cluster_name, cfg, on_aws)

        node_role, attachments = self._node_role(name, on_aws)
        self.cluster = self._control_plane(name, cluster_name, args, vpc.id, private_ids, public_ids, on_aws)
        gpu = cfg.gpu_nodes
        self._node_groups(name, cluster_name, cfg, vpc.id, private_ids, node_role, attachments, on_aws)
        self.kubeconfig_json = pulumi.Output.secret(self.cluster.kubeconfig_json)
        self.provider = kubernetes.Provider(
            f"{name}-k8s", kubeconfig=self.kubeconfig_json, opts=pulumi.ResourceOptions(parent=self)
        )
        self._access_entries(name, cluster_name, args.cfg, on_aws)
        if gpu.efa_interfaces:
            self._efa_device_plugin(name)
        self._ebs_csi(name, cluster_name, on_aws)
        self._autoscaler(name, cluster_name, args.cfg)

        kubeconfig = self.cluster.kubeconfig_json.apply(json.loads)
        # Neither is secret: the pulumi-eks kubeconfig holds no credential (it runs `aws eks get-token`).
        endpoint = pulumi.Output.unsecret(kubeconfig.apply(lambda k: k["clusters"][0]["cluster"]["server"]))
        ca = pulumi.Output.unsecret(
            kubeconfig.apply(lambda k: k["clusters"][0]["cluster"]["certificate-authority-data"])
        )
        self.facts = ClusterFacts(
            provider=self.provider,
            kubeconfig=None,
            gpus_per_node=gpu.gpus_per_node,
            # The AL2023 NVIDIA AMI brings the driver and runs containerd with `nvidia` as the
            # default runtime (awslabs/amazon-eks-ami nodeadm/internal/containerd/runtime_config_nvidia.go).
            gpu_driver_by_operator=False,
            toolkit_by_operator=False,
            registry=Registry(prefix="", host="", hosted=EcrRepositories(self.aws_provider)),
            fabric_per_node=gpu.efa_interfaces,
            fabric_rdma_read=bool(gpu.efa_interfaces) and group_efa_rdma_read(list(gpu.instance_types)),
            fabric_build_args=dict(IMAGE_BUILD_ARGS) if gpu.efa_interfaces else {},
            cloud=AwsCloud(
                network=AwsNetwork(
                    aws_provider=self.aws_provider,
                    region=cfg.region,
                    vpc_id=vpc.id,
                    vpc_cidr=str(cfg.vpc_cidr),
                    private_subnet_ids=private_ids,
                    oidc_provider_arn=self.cluster.oidc_provider_arn,
                    oidc_provider_url=self.cluster.oidc_provider_url,
                    node_security_group_id=self.cluster.node_security_group_id,
                ),
                eks=EksFacts(
                    cluster_name=cluster_name, region=cfg.region, endpoint=endpoint, certificate_authority=ca
                ),  # fmt: skip
            ),
            depends_on=[self.system_nodes, self.ebs_csi],
        )
        self.register_outputs({"cluster_name": cluster_name, "region": cfg.region, "endpoint": endpoint})

    def _node_role(self, name: str, on_aws: pulumi.ResourceOptions) -> tuple[Any, list[Any]]:
        """The IAM role every node runs as, with the managed policies EKS nodes need."""
        node_role = aws.iam.Role(
            f"{name}-node-role",
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "ec2.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),  # fmt: skip
            opts=on_aws,
        )
        attachments = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-policy-{i}", role=node_role.name, policy_arn=arn, opts=on_aws
            )
            for i, arn in enumerate(NODE_POLICIES)
        ]
        return node_role, attachments

    def _control_plane(self, name: str, cluster_name: str, args: EksClusterArgs, vpc_id: pulumi.Input[str],
                       private_ids: list[Any], public_ids: list[Any], on_aws: pulumi.ResourceOptions) -> Any:  # fmt: skip
        """EKS (pulumi-eks): API-only authentication, KMS-encrypted secrets, the CNI's policy agent on."""
        cfg = aws_config(args.cfg)
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
        return eks.Cluster(
            f"{name}-eks",
            name=cluster_name,
            version=args.cfg.kubernetes_version,
            vpc_id=vpc_id,
            private_subnet_ids=private_ids,
            public_subnet_ids=public_ids,
            node_associate_public_ip_address=False,
            skip_default_node_group=True,
            authentication_mode=eks.AuthenticationMode.API,
            endpoint_private_access=True,
            endpoint_public_access=cfg.endpoint_public_access,
            public_access_cidrs=[str(c) for c in cfg.public_access_cidrs]
            if cfg.endpoint_public_access
            else None,
            create_oidc_provider=True,
            encryption_config_key_arn=secrets_key.arn,
            enabled_cluster_log_types=["api", "audit", "authenticator"],
            # pulumi-eks's own StorageClasses use the in-tree kubernetes.io/aws-ebs provisioner
            # (cluster/storageclass.ts), which needs the EBS CSI driver anyway since 1.23: we
            # install the driver and make gp3 ours (_ebs_csi).
            storage_classes=None,
            # The VPC CNI enforces NetworkPolicies only with its policy agent on (pulumi-eks
            # addons/cni-addon.ts merges this into the vpc-cni add-on's configurationValues).
            vpc_cni_options=eks.VpcCniOptionsArgs(enable_network_policy=True),
            tags=tags,
            opts=with_aws,
        )

    def _node_groups(self, name: str, cluster_name: str, cfg: AwsConfig, vpc_id: pulumi.Input[str],
                     private_ids: list[Any], node_role: Any, attachments: list[Any],
                     on_aws: pulumi.ResourceOptions) -> None:  # fmt: skip
        """The system node group and the GPU node group (tainted, labelled, EFA where the type has it)."""
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
            scaling_config=_scaling(cfg.system_nodes),
            launch_template=self._launch_template(f"{name}-system", 50, on_aws),
            opts=after_cluster,
        )
        gpu = cfg.gpu_nodes
        gpu_labels = dict(GPU_NODE_LABELS)
        model = gpu_model(list(gpu.instance_types))
        if model:
            # The autoscaler's AWS provider knows a GPU node by this label; without it, it sees
            # no GPU while the device plugin starts and scales up again and again.
            gpu_labels[ACCELERATOR_LABEL] = model
        self.gpu_nodes = eks.ManagedNodeGroup(
            f"{name}-gpu-nodes",
            cluster=self.cluster,
            node_role_arn=node_role.arn,
            instance_types=list(gpu.instance_types),
            ami_type=gpu.ami_type,  # the EKS NVIDIA AMI: driver and container toolkit included
            capacity_type=gpu.capacity_type,
            # EFA traffic does not cross availability zones: EFA nodes share one zone and a cluster placement group.
            subnet_ids=private_ids[:1] if gpu.efa_interfaces else private_ids,
            labels=gpu_labels,
            taints=[{"key": GPU_TAINT["key"], "value": GPU_TAINT["value"], "effect": "NO_SCHEDULE"}],
            scaling_config=_scaling(gpu),
            tags=gpu_node_group_tags(gpu.efa_interfaces),
            ignore_scaling_changes=True,  # the cluster autoscaler owns the desired size
            launch_template=self._launch_template(
                f"{name}-gpu",
                gpu.disk_size_gib,
                on_aws,
                require_imdsv2=gpu.require_imdsv2,
                pool="gpu",
                efa=self._efa(name, cluster_name, vpc_id, gpu.efa_interfaces, on_aws),
            ),
            opts=after_cluster,
        )

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
                f"{name}-public-{zone}",
                vpc_id=vpc.id,
                cidr_block=cidr,
                availability_zone=zone,
                map_public_ip_on_launch=False,
                tags={
                    "Name": f"{cluster_name}-public-{zone}",
                    "kubernetes.io/role/elb": "1",
                    cluster_tag: "shared",
                },
                opts=on_aws,
            )  # fmt: skip
            for zone, cidr in zip(cfg.availability_zones, public_cidrs)
        ]
        private = [
            aws.ec2.Subnet(
                f"{name}-private-{zone}",
                vpc_id=vpc.id,
                cidr_block=cidr,
                availability_zone=zone,
                tags={
                    "Name": f"{cluster_name}-private-{zone}",
                    "kubernetes.io/role/internal-elb": "1",
                    cluster_tag: "shared",
                },
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

    def _launch_template(self, name: str, disk_gib: int, on_aws: pulumi.ResourceOptions,
                         require_imdsv2: bool = True, pool: str = "system",
                         efa: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
        """Node launch template: IMDSv2 with hop limit 1, so pods cannot take the node's role.

        pulumi-eks's own template sets hop limit 2 (nodes/nodegroup.ts, `metadataOptions`),
        which lets any pod reach the instance credentials; our add-ons use IRSA instead.
        """
        template = aws.ec2.LaunchTemplate(
            f"{name}-launch-template",
            metadata_options={"http_endpoint": "enabled", "http_tokens": "required" if require_imdsv2 else "optional",
                              "http_put_response_hop_limit": 1},
            block_device_mappings=[{"device_name": ROOT_DEVICE, "ebs": {
                "volume_size": disk_gib, "volume_type": "gp3", "encrypted": "true", "delete_on_termination": "true"}}],
            tags={"alchemist.io/pool": pool},  # policy imdsv2-on-gpu-nodes knows the GPU template by it
            **(efa or {}),
            opts=on_aws,
        )  # fmt: skip
        return {"id": template.id, "version": template.latest_version.apply(str)}

    def _efa(self, name: str, cluster_name: str, vpc_id: pulumi.Input[str], interfaces: int,
             on_aws: pulumi.ResourceOptions) -> dict[str, Any] | None:  # fmt: skip
        """Launch-template fields for EFA nodes (None without EFA).

        The interfaces follow pulumi-eks nodes/instances.ts (getEfaNetworkInterfaces): card 0 an
        `efa` interface at device index 0, every further card `efa-only` at device index 1,
        all in the EKS cluster security group (nodes/nodegroup.ts uses
        `cluster.vpcConfig.clusterSecurityGroupId`) plus one that lets EFA traffic flow
        between the nodes (AWS EC2 guide, "Prepare an EFA-enabled security group").
        """
        if not interfaces:
            return None
        efa_sg = aws.ec2.SecurityGroup(
            f"{name}-efa-sg",
            description="EFA: all traffic between the GPU nodes",
            vpc_id=vpc_id,
            ingress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}],
            egress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}],
            opts=on_aws,
        )
        cluster_sg = aws.eks.get_cluster_output(
            name=cluster_name,
            opts=pulumi.InvokeOutputOptions(provider=self.aws_provider, depends_on=[self.cluster]),
        ).vpc_config.cluster_security_group_id
        placement = aws.ec2.PlacementGroup(f"{name}-gpu-placement", strategy="cluster", opts=on_aws)
        return {
            "network_interfaces": [
                {"device_index": 0 if i == 0 else 1, "network_card_index": i,
                 "interface_type": "efa" if i == 0 else "efa-only", "delete_on_termination": "true",
                 "security_groups": [cluster_sg, efa_sg.id]}
                for i in range(interfaces)
            ],
            "placement": {"group_name": placement.name},
        }  # fmt: skip

    def _efa_device_plugin(self, name: str) -> None:
        """The DaemonSet that advertises `vpc.amazonaws.com/efa` on EFA nodes (tolerating the GPU taint)."""
        kubernetes.helm.v4.Chart(
            f"{name}-efa-device-plugin",
            chart=EFA_DEVICE_PLUGIN_CHART.chart,
            version=EFA_DEVICE_PLUGIN_CHART.version,
            repository_opts={"repo": EFA_DEVICE_PLUGIN_CHART.repo},
            namespace="kube-system",
            values={"tolerations": [dict(t) for t in GPU_TOLERATIONS]},
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=[self.system_nodes]),
        )

    def _access_entries(
        self, name: str, cluster_name: str, cfg: StackConfig, on_aws: pulumi.ResourceOptions
    ) -> None:
        """An access entry per team principal, in the Kubernetes groups the team's RoleBinding binds."""
        opts = pulumi.ResourceOptions.merge(on_aws, pulumi.ResourceOptions(depends_on=[self.cluster]))
        for team in cfg.teams:
            groups = team.groups or [f"alchemist:{team.name}"]  # as the platform's RoleBinding
            for i, arn in enumerate(team.principals):
                aws.eks.AccessEntry(
                    f"{name}-access-{team.name}-{i}",
                    cluster_name=cluster_name,
                    principal_arn=arn,
                    kubernetes_groups=groups,
                    type="STANDARD",
                    opts=opts,
                )

    def _ebs_csi(self, name: str, cluster_name: str, on_aws: pulumi.ResourceOptions) -> None:
        """The EBS CSI driver (EKS add-on, own IAM role) and the default gp3 StorageClass it provisions."""
        self.ebs_csi = CloudIdentityAddon(
            f"{name}-ebs-csi",
            CloudIdentityAddonArgs(
                aws_provider=self.aws_provider,
                oidc_provider_arn=self.cluster.oidc_provider_arn,
                oidc_provider_url=self.cluster.oidc_provider_url,
                service_account=EBS_CSI_SERVICE_ACCOUNT,
                policy_arns=["arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"],
                eks_addon="aws-ebs-csi-driver",
                cluster_name=cluster_name,
                configuration_values={"node": {"tolerateAllTaints": True}},  # volumes on GPU nodes too
                depends_on=[self.system_nodes],
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        kubernetes.storage.v1.StorageClass(
            f"{name}-gp3",
            metadata={"name": "gp3", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            provisioner=EBS_CSI_DRIVER,
            parameters={"type": "gp3", "encrypted": "true"},
            volume_binding_mode="WaitForFirstConsumer",
            reclaim_policy="Delete",
            allow_volume_expansion=True,
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=[self.ebs_csi]),
        )

    def _autoscaler(self, name: str, cluster_name: str, cfg: StackConfig) -> None:
        """Cluster autoscaler of the cluster's minor (IRSA) so the GPU group scales from zero."""
        aws_cfg = aws_config(cfg)
        CloudIdentityAddon(
            f"{name}-autoscaler",
            CloudIdentityAddonArgs(
                aws_provider=self.aws_provider,
                oidc_provider_arn=self.cluster.oidc_provider_arn,
                oidc_provider_url=self.cluster.oidc_provider_url,
                service_account="cluster-autoscaler",
                inline_policy=AUTOSCALER_POLICY,
                chart=autoscaler_chart(cfg.kubernetes_version),
                service_account_path=("rbac", "serviceAccount"),
                values={
                    "autoDiscovery": {"clusterName": cluster_name},
                    "awsRegion": aws_cfg.region,
                    "extraArgs": {
                        "balance-similar-node-groups": True,
                        "expander": "least-waste",
                        "skip-nodes-with-system-pods": False,
                    },
                    "nodeSelector": dict(SYSTEM_NODE_LABELS),
                },  # fmt: skip
                depends_on=[self.system_nodes],
            ),
            opts=pulumi.ResourceOptions(parent=self, providers=[self.provider]),
        )


def gpu_node_group_tags(efa_interfaces: int) -> dict[str, str]:
    """Tags of the GPU managed node group: the resources its nodes advertise beyond what the
    autoscaler's template node knows (cpu, memory, nvidia.com/gpu, pods).

    The group starts at zero, so the autoscaler decides from that template whether a pending
    pod would fit a new node; a pod asking for `vpc.amazonaws.com/efa` fits only if the group
    names it. The autoscaler reads a managed node group's tags with eks:DescribeNodegroup
    (aws_manager.go buildNodeFromTemplate; AUTOSCALER_POLICY grants it), as it reads the
    group's labels and taints, so the pods' node selector and toleration match the template
    too. EKS does not copy these tags to the group's Auto Scaling group or its instances.
    """
    if not efa_interfaces:
        return {}
    return {f"{AUTOSCALER_RESOURCE_TAG}{EFA_RESOURCE}": str(efa_interfaces)}


def _scaling(pool: NodePool | GpuPool) -> dict[str, int]:
    return {"min_size": pool.min_size, "max_size": pool.max_size, "desired_size": pool.desired_size}
