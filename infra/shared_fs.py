"""One POSIX file system every job pod sees at /shared: EFS or FSx for Lustre on AWS, NFS on-prem, hostPath on kind.

Whatever the backend, it ends the same way: a StorageClass `alchemist-shared` and, in every
job namespace (and the monitoring namespace, for TensorBoard), a ReadWriteMany PVC
`alchemist-shared` bound to a static PV on the file system's root, so all of them see the
same files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from infra.cluster import KIND_SHARED_PATH, AwsNetwork
from infra.config import EfsFs, FsxLustreFs, HostPathFs, NfsFs
from infra.labels import SHARED_PVC, SHARED_STORAGE_CLASS
from infra.versions import CHARTS

EFS_DRIVER = "efs.csi.aws.com"
FSX_DRIVER = "fsx.csi.aws.com"
NFS_DRIVER = "nfs.csi.k8s.io"
NOMINAL_CAPACITY = "1Ti"  # EFS and NFS are not sized by the claim; Kubernetes needs a number


@dataclass
class SharedFileSystemArgs:
    fs: EfsFs | FsxLustreFs | NfsFs | HostPathFs
    namespaces: dict[str, Any]  # name -> Namespace resource: every namespace that gets the PVC
    aws: AwsNetwork | None = None
    depends_on: list[Any] = field(default_factory=list)


def irsa_trust_policy(oidc_arn: pulumi.Input[str], oidc_url: pulumi.Input[str],
                      namespace: str, service_account: str) -> pulumi.Output[str]:  # fmt: skip
    """An IAM trust policy letting one Kubernetes service account assume the role (IRSA)."""

    def policy(args: list[str]) -> str:
        arn, url = args
        issuer = url.removeprefix("https://")
        return json.dumps({
            "Version": "2012-10-17",
            "Statement": [{
                "Effect": "Allow",
                "Principal": {"Federated": arn},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {"StringEquals": {
                    f"{issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                    f"{issuer}:aud": "sts.amazonaws.com",
                }},
            }],
        })  # fmt: skip

    return pulumi.Output.all(oidc_arn, oidc_url).apply(policy)


class SharedFileSystem(pulumi.ComponentResource):
    """The backend file system, its CSI driver, a StorageClass and a RWX PVC per namespace."""

    def __init__(self, name: str, args: SharedFileSystemArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:SharedFileSystem", name, None, opts)
        self._name = name
        self.kind = args.fs.kind
        fs = args.fs
        if isinstance(fs, EfsFs):
            sc_spec, pv_source, capacity, driver = self._efs(name, fs, _need_aws(args))
        elif isinstance(fs, FsxLustreFs):
            sc_spec, pv_source, capacity, driver = self._fsx(name, fs, _need_aws(args))
        elif isinstance(fs, NfsFs):
            sc_spec, pv_source, capacity, driver = self._nfs(name, fs)
        else:
            sc_spec, pv_source, capacity, driver = self._hostpath()
        after_driver = [*args.depends_on, *([driver] if driver is not None else [])]

        self.storage_class = kubernetes.storage.v1.StorageClass(
            f"{name}-storageclass",
            metadata={"name": SHARED_STORAGE_CLASS},
            reclaim_policy="Retain",
            volume_binding_mode="Immediate",
            **sc_spec,
            opts=pulumi.ResourceOptions(parent=self, depends_on=after_driver),
        )
        self.claims: dict[str, Any] = {}
        for ns_name, ns_res in args.namespaces.items():
            pv_name = f"{SHARED_PVC}-{ns_name}"
            source = pv_source(ns_name)
            pv = kubernetes.core.v1.PersistentVolume(
                f"{name}-pv-{ns_name}",
                metadata={"name": pv_name, "labels": {"alchemist.io/shared-fs": self.kind}},
                spec={
                    "capacity": {"storage": capacity},
                    "accessModes": ["ReadWriteMany"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": SHARED_STORAGE_CLASS,
                    "claimRef": {"namespace": ns_name, "name": SHARED_PVC},
                    **source,
                },
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.storage_class]),
            )
            self.claims[ns_name] = kubernetes.core.v1.PersistentVolumeClaim(
                f"{name}-pvc-{ns_name}",
                metadata={"name": SHARED_PVC, "namespace": ns_name},
                spec={
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": SHARED_STORAGE_CLASS,
                    "volumeName": pv_name,
                    "resources": {"requests": {"storage": capacity}},
                },
                opts=pulumi.ResourceOptions(parent=self, depends_on=[pv, ns_res]),
            )
        self.register_outputs({"kind": self.kind, "pvc": SHARED_PVC})

    # --- backends: each returns (StorageClass fields, ns -> PV source, capacity, driver) ---

    def _efs(self, name: str, fs: EfsFs, net: AwsNetwork):
        import pulumi_aws as aws

        on_aws = pulumi.ResourceOptions(parent=self, provider=net.aws_provider)
        self.file_system = aws.efs.FileSystem(
            f"{name}-efs",
            encrypted=fs.encrypted,
            performance_mode="generalPurpose",
            throughput_mode=fs.throughput_mode,
            lifecycle_policies=[{"transition_to_ia": "AFTER_30_DAYS"}],
            tags={"Name": f"{name}-efs"},
            opts=on_aws,
        )
        sg = aws.ec2.SecurityGroup(
            f"{name}-efs-sg",
            description="NFS from the cluster VPC to EFS mount targets",
            vpc_id=net.vpc_id,
            ingress=[{"protocol": "tcp", "from_port": 2049, "to_port": 2049, "cidr_blocks": [net.vpc_cidr]}],
            egress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": [net.vpc_cidr]}],
            opts=on_aws,
        )
        self.mount_targets = [
            aws.efs.MountTarget(
                f"{name}-efs-mt-{i}",
                file_system_id=self.file_system.id,
                subnet_id=subnet,
                security_groups=[sg.id],
                opts=on_aws,
            )
            for i, subnet in enumerate(net.private_subnet_ids)
        ]
        sa = "efs-csi-controller-sa"
        role = aws.iam.Role(
            f"{name}-efs-csi-role",
            assume_role_policy=irsa_trust_policy(net.oidc_provider_arn, net.oidc_provider_url, "kube-system", sa),
            opts=on_aws,
        )
        aws.iam.RolePolicyAttachment(
            f"{name}-efs-csi-policy",
            role=role.name,
            policy_arn="arn:aws:iam::aws:policy/service-role/AmazonEFSCSIDriverPolicy",
            opts=on_aws,
        )
        pin = CHARTS["aws-efs-csi-driver"]
        # helm.v3.Release, not v4.Chart: this chart relies on Helm hooks, which v4 skips.
        driver = kubernetes.helm.v3.Release(
            f"{name}-efs-csi",
            chart=pin.chart,
            version=pin.version,
            repository_opts={"repo": pin.repo},
            namespace="kube-system",
            values={
                "controller": {"serviceAccount": {"create": True, "name": sa,
                               "annotations": {"eks.amazonaws.com/role-arn": role.arn}}},
                "node": {"tolerations": [{"operator": "Exists"}]},  # run on tainted GPU nodes too
            },  # fmt: skip
            opts=pulumi.ResourceOptions(parent=self, depends_on=self.mount_targets),
        )
        sc = {
            "provisioner": EFS_DRIVER,
            "parameters": {"provisioningMode": "efs-ap", "fileSystemId": self.file_system.id,
                           "directoryPerms": "700"},
        }  # fmt: skip

        def source(_ns: str) -> dict[str, Any]:
            return {"csi": {"driver": EFS_DRIVER, "volumeHandle": self.file_system.id,
                            "volumeAttributes": {"encryptInTransit": "true"}}}  # fmt: skip

        return sc, source, NOMINAL_CAPACITY, driver

    def _fsx(self, name: str, fs: FsxLustreFs, net: AwsNetwork):
        import pulumi_aws as aws

        on_aws = pulumi.ResourceOptions(parent=self, provider=net.aws_provider)
        sg = aws.ec2.SecurityGroup(
            f"{name}-fsx-sg",
            description="Lustre from the cluster VPC to FSx",
            vpc_id=net.vpc_id,
            ingress=[
                {"protocol": "tcp", "from_port": 988, "to_port": 988, "cidr_blocks": [net.vpc_cidr]},
                {"protocol": "tcp", "from_port": 1018, "to_port": 1023, "cidr_blocks": [net.vpc_cidr]},
            ],
            egress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": [net.vpc_cidr]}],
            opts=on_aws,
        )
        persistent = fs.deployment_type.startswith("PERSISTENT")
        self.file_system = aws.fsx.LustreFileSystem(
            f"{name}-fsx",
            storage_capacity=fs.storage_capacity_gib,
            deployment_type=fs.deployment_type,
            per_unit_storage_throughput=fs.per_unit_storage_throughput if persistent else None,
            subnet_ids=net.private_subnet_ids[0],
            security_group_ids=[sg.id],
            file_system_type_version="2.15",
            tags={"Name": f"{name}-fsx"},
            opts=on_aws,
        )
        sa = "fsx-csi-controller-sa"
        role = aws.iam.Role(
            f"{name}-fsx-csi-role",
            assume_role_policy=irsa_trust_policy(net.oidc_provider_arn, net.oidc_provider_url, "kube-system", sa),
            opts=on_aws,
        )
        aws.iam.RolePolicyAttachment(
            f"{name}-fsx-csi-policy", role=role.name,
            policy_arn="arn:aws:iam::aws:policy/AmazonFSxFullAccess", opts=on_aws,
        )  # fmt: skip
        pin = CHARTS["aws-fsx-csi-driver"]
        driver = kubernetes.helm.v4.Chart(
            f"{name}-fsx-csi",
            chart=pin.chart,
            version=pin.version,
            repository_opts={"repo": pin.repo},
            namespace="kube-system",
            values={
                "controller": {"serviceAccount": {"create": True, "name": sa,
                               "annotations": {"eks.amazonaws.com/role-arn": role.arn}}},
                "node": {"tolerations": [{"operator": "Exists"}]},  # run on tainted GPU nodes too
            },  # fmt: skip
            opts=pulumi.ResourceOptions(parent=self),
        )
        sc = {
            "provisioner": FSX_DRIVER,
            "parameters": {"subnetId": net.private_subnet_ids[0], "securityGroupIds": sg.id,
                           "deploymentType": fs.deployment_type},
        }  # fmt: skip

        def source(_ns: str) -> dict[str, Any]:
            return {
                "csi": {"driver": FSX_DRIVER, "volumeHandle": self.file_system.id,
                        "volumeAttributes": {"dnsname": self.file_system.dns_name,
                                             "mountname": self.file_system.mount_name}},
                "mountOptions": ["flock"],
            }  # fmt: skip

        return sc, source, f"{fs.storage_capacity_gib}Gi", driver

    def _nfs(self, name: str, fs: NfsFs):
        pin = CHARTS["csi-driver-nfs"]
        driver = kubernetes.helm.v4.Chart(
            f"{name}-nfs-csi",
            chart=pin.chart,
            version=pin.version,
            repository_opts={"repo": pin.repo},
            namespace="kube-system",
            values={"node": {"tolerations": [{"operator": "Exists"}]}},
            opts=pulumi.ResourceOptions(parent=self),
        )
        sc = {
            "provisioner": NFS_DRIVER,
            "parameters": {"server": fs.server, "share": fs.share},
            "mount_options": ["nfsvers=4.1"],
        }

        def source(ns: str) -> dict[str, Any]:
            return {
                "csi": {"driver": NFS_DRIVER, "volumeHandle": f"{fs.server}#{fs.share}#alchemist#{ns}",
                        "volumeAttributes": {"server": fs.server, "share": fs.share}},
                "mountOptions": ["nfsvers=4.1"],
            }  # fmt: skip

        return sc, source, NOMINAL_CAPACITY, driver

    def _hostpath(self):
        # kind mounts the same host directory into every node, so a hostPath is shared.
        sc = {"provisioner": "kubernetes.io/no-provisioner"}

        def source(_ns: str) -> dict[str, Any]:
            return {"hostPath": {"path": KIND_SHARED_PATH, "type": "DirectoryOrCreate"}}

        return sc, source, NOMINAL_CAPACITY, None


def _need_aws(args: SharedFileSystemArgs) -> AwsNetwork:
    if args.aws is None:
        raise ValueError(f"shared file system {args.fs.kind!r} needs the AWS cluster's network")
    return args.aws
