"""AWS's shared file systems: EFS (an access point per team) or FSx for Lustre, each with its
CSI driver acting as its own IAM role; `infra/shared_fs.py` makes the rest (StorageClass, PVs,
PVCs, the prepare Job) from what `AwsSharedFs.volumes` returns.

- EFS: an access point per team (rootDirectory /teams/<team> created with creationInfo, mode
  0770, posixUser = the team's identity, enforced by EFS for every call); volumeHandle
  `fs::fsap`; no prepare Job.
- FSx for Lustre: the prepare Job makes each team's subtree; the team's PV mounts only
  `dns@tcp:/mountname/teams/<team>`. Lustre does not enforce an identity per mount: ownership
  and mode keep teams apart, with pods run as the team uid."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.providers.aws.cluster_addons import CloudIdentityAddon, CloudIdentityAddonArgs
from infra.providers.aws.config import EfsFs, FsxLustreFs
from infra.providers.aws.facts import AwsNetwork
from infra.providers.aws.versions import EFS_CSI_CHART, FSX_CSI_CHART
from infra.shared_fs import NOMINAL_CAPACITY, TEAM_DIR_MODE, SharedFsVolumes, team_path
from infra.versions import ChartPin

EFS_DRIVER = "efs.csi.aws.com"
FSX_DRIVER = "fsx.csi.aws.com"


def efs_policy(file_system_arn: str, access_point_arns: list[str]) -> str:
    """The EFS file-system policy: deny every request without TLS; allow mount and write only
    through the teams' access points (condition key elasticfilesystem:AccessPointArn, EFS User
    Guide "Using IAM to control file system data access"); nothing else is allowed, so a mount
    of the root, or as root, is refused (once a file system has a policy, EFS grants only what
    it allows)."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "DenyWithoutTls", "Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "*",
             "Resource": file_system_arn, "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
            {"Sid": "TeamsThroughTheirAccessPoints", "Effect": "Allow", "Principal": {"AWS": "*"},
             "Action": ["elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"],
             "Resource": file_system_arn,
             "Condition": {"StringEquals": {"elasticfilesystem:AccessPointArn": sorted(access_point_arns)},
                           "Bool": {"elasticfilesystem:AccessedViaMountTarget": "true"}}},
        ],
    })  # fmt: skip


class AwsSharedFs:
    """EFS or FSx for Lustre in the EKS cluster's VPC (a `SharedFsBackend`)."""

    kinds: tuple[str, ...] = ("efs", "fsx-lustre")

    def __init__(self, net: AwsNetwork):
        self.net = net
        self._parent: pulumi.ComponentResource | None = None
        self._identities: dict[str, tuple[int, int]] = {}
        self.file_system: Any = None  # aws.efs.FileSystem or aws.fsx.LustreFileSystem
        self.mount_targets: list[Any] = []
        self.access_points: dict[str, Any] = {}

    def volumes(
        self,
        parent: pulumi.ComponentResource,
        name: str,
        fs: Any,
        identities: dict[str, tuple[int, int]],
    ) -> SharedFsVolumes:
        """Create the file system and its driver as children of `parent` (the
        SharedFileSystem): the same resource names as when it made them itself."""
        self._parent = parent
        self._identities = dict(identities)
        if isinstance(fs, EfsFs):
            sc, source, capacity, driver = self._efs(name, fs, self.net)
            return SharedFsVolumes(sc, source, capacity, driver, per_team_identity=True)
        assert isinstance(fs, FsxLustreFs), fs.kind
        sc, source, capacity, driver = self._fsx(name, fs, self.net)
        return SharedFsVolumes(sc, source, capacity, driver)

    def _csi_driver(self, name: str, net: AwsNetwork, service_account: str, chart: ChartPin, policy_arn: str,
                    helm_hooks: bool = False, depends_on: list[Any] | None = None) -> CloudIdentityAddon:  # fmt: skip
        """An AWS CSI driver chart whose controller acts as its own IAM role; its node pods on every node."""
        return CloudIdentityAddon(
            name,
            CloudIdentityAddonArgs(
                aws_provider=net.aws_provider,
                oidc_provider_arn=net.oidc_provider_arn,
                oidc_provider_url=net.oidc_provider_url,
                service_account=service_account,
                policy_arns=[policy_arn],
                chart=chart,
                helm_hooks=helm_hooks,
                values={"node": {"tolerations": [{"operator": "Exists"}]}},  # run on tainted GPU nodes too
                depends_on=depends_on or [],
            ),
            opts=pulumi.ResourceOptions(parent=self._parent),
        )

    def _efs(self, name: str, fs: EfsFs, net: AwsNetwork) -> tuple[dict[str, Any], Any, str, Any]:
        on_aws = pulumi.ResourceOptions(parent=self._parent, provider=net.aws_provider)
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
        # templates/csidriver.yaml of this chart is a Helm hook, which helm.v4.Chart skips
        driver = self._csi_driver(f"{name}-efs-csi", net, "efs-csi-controller-sa", EFS_CSI_CHART,
                                  "arn:aws:iam::aws:policy/service-role/AmazonEFSCSIDriverPolicy",
                                  helm_hooks=True, depends_on=list(self.mount_targets))  # fmt: skip
        # One access point per team: EFS makes /teams/<team> owned by the team's uid:gid on
        # first use (creationInfo) and performs every call through it as that identity
        # (posixUser), whatever uid the pod runs as.
        self.access_points = {
            team: aws.efs.AccessPoint(
                f"{name}-ap-{team}",
                file_system_id=self.file_system.id,
                posix_user={"uid": uid, "gid": gid},
                root_directory={
                    "path": f"/{team_path(team)}",
                    "creation_info": {"owner_uid": uid, "owner_gid": gid, "permissions": TEAM_DIR_MODE},
                },
                tags={"Name": f"{name}-{team}", "alchemist.io/team": team},
                opts=on_aws,
            )  # fmt: skip
            for team, (uid, gid) in self._identities.items()
        }
        # Without a file-system policy EFS lets any client that reaches a mount target mount the
        # root as any uid it claims. With this one, a mount must use TLS and one of the teams'
        # access points (each confined to its team's subtree, as its team's uid:gid); root
        # access is never granted, and nothing mounts the root itself.
        aws.efs.FileSystemPolicy(
            f"{name}-efs-policy",
            file_system_id=self.file_system.id,
            policy=pulumi.Output.all(self.file_system.arn, *(ap.arn for ap in self.access_points.values())).apply(
                lambda arns: efs_policy(arns[0], arns[1:])),
            opts=pulumi.ResourceOptions.merge(on_aws, pulumi.ResourceOptions(depends_on=list(self.access_points.values()))),
        )  # fmt: skip
        sc = {
            "provisioner": EFS_DRIVER,
            "parameters": {"provisioningMode": "efs-ap", "fileSystemId": self.file_system.id,
                           "directoryPerms": "700"},
        }  # fmt: skip

        def source(team: str | None) -> dict[str, Any]:
            # `fs-id::fsap-id` (aws-efs-csi-driver pkg/driver/node.go parseVolumeId); the root without one.
            handle = (self.file_system.id if team is None else
                      pulumi.Output.concat(self.file_system.id, "::", self.access_points[team].id))  # fmt: skip
            return {"csi": {"driver": EFS_DRIVER, "volumeHandle": handle,
                            "volumeAttributes": {"encryptInTransit": "true"}}}  # fmt: skip

        return sc, source, NOMINAL_CAPACITY, driver

    def _fsx(self, name: str, fs: FsxLustreFs, net: AwsNetwork) -> tuple[dict[str, Any], Any, str, Any]:
        on_aws = pulumi.ResourceOptions(parent=self._parent, provider=net.aws_provider)
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
        driver = self._csi_driver(f"{name}-fsx-csi", net, "fsx-csi-controller-sa", FSX_CSI_CHART,
                                  "arn:aws:iam::aws:policy/AmazonFSxFullAccess")  # fmt: skip
        sc = {
            "provisioner": FSX_DRIVER,
            "parameters": {"subnetId": net.private_subnet_ids[0], "securityGroupIds": sg.id,
                           "deploymentType": fs.deployment_type},
        }  # fmt: skip

        def source(team: str | None) -> dict[str, Any]:
            # The driver mounts `<dnsname>@tcp:/<mountname>` (aws-fsx-csi-driver pkg/driver/node.go,
            # chart 1.17.0): a mountname with a path is a Lustre subdirectory mount.
            mount = self.file_system.mount_name
            handle: Any = self.file_system.id
            if team is not None:
                mount = pulumi.Output.concat(mount, f"/{team_path(team)}")
                handle = pulumi.Output.concat(self.file_system.id, f"#{team}")
            return {
                "csi": {"driver": FSX_DRIVER, "volumeHandle": handle,
                        "volumeAttributes": {"dnsname": self.file_system.dns_name, "mountname": mount}},
                "mountOptions": ["flock"],
            }  # fmt: skip

        return sc, source, f"{fs.storage_capacity_gib}Gi", driver
