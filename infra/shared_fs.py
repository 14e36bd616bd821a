"""One POSIX file system every job pod sees at /shared: EFS or FSx for Lustre on AWS, NFS on-prem, hostPath on kind.

Whatever the backend, it ends the same way: a StorageClass `alchemist-shared` and, in every
team namespace, a ReadWriteMany PVC `alchemist-shared` bound to a static PV on that team's
own subtree `/teams/<team>`, owned by the team's uid:gid (mode 2770; 0770 on EFS), so a team's jobs can
write there and see nothing of another team's. How the subtree gets its owner:

- EFS: an access point per team (rootDirectory /teams/<team> created with creationInfo,
  posixUser = the team's identity, enforced by EFS for every call); volumeHandle `fs::fsap`.
- FSx for Lustre, NFS, hostPath: a one-off Job (`prepare`) mounts the root as root and makes
  each `/teams/<team>` with the team's owner and mode 2770 (or, on an NFS export with
  root_squash, finds it made so by the server's admin, and otherwise names the commands
  for them); the team's PV then mounts only that
  subdirectory (Lustre `dns@tcp:/mountname/teams/<team>`, csi-driver-nfs `subDir`, a
  hostPath below the shared directory). Lustre and NFS do not enforce an identity per mount
  as EFS access points do: ownership and mode keep teams apart, with pods run as the team uid.

The monitoring namespace (TensorBoard) gets the root, read-only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from infra.cluster import KIND_SHARED_PATH, AwsNetwork
from infra.cluster_addons import CloudIdentityAddon, CloudIdentityAddonArgs
from infra.config import EfsFs, FsxLustreFs, HostPathFs, NfsFs
from infra.labels import SHARED_PVC, SHARED_STORAGE_CLASS
from infra.versions import CHARTS, ChartPin

TEAMS_DIR = "teams"  # team subtrees live at /teams/<team> of the file system
TEAM_DIR_MODE = "0770"  # the team's uid and gid only
# What the prepare Job gives a subtree: the same, with the setgid bit, so that the kubelet,
# applying the job pods' fsGroup (the team's gid) with `OnRootMismatch`, finds the root as it
# wants it and leaves the tree alone (kubernetes pkg/volume/volume_linux.go
# requiresPermissionChange); csi-driver-nfs's CSIDriver (fsGroupPolicy File) lets it apply
# fsGroup to every NFS volume, and under root_squash its walk of the tree fails.
PREPARED_DIR_MODE = "2770"
ROOT_PVC = "alchemist-shared-root"  # the prepare Job's view of the whole file system
PREPARE_NAMESPACE = "kube-system"

EFS_DRIVER = "efs.csi.aws.com"
FSX_DRIVER = "fsx.csi.aws.com"
NFS_DRIVER = "nfs.csi.k8s.io"
NOMINAL_CAPACITY = "1Ti"  # EFS and NFS are not sized by the claim; Kubernetes needs a number
FSX_CSI_CHART = CHARTS["aws-fsx-csi-driver"]


@dataclass
class SharedFileSystemArgs:
    fs: EfsFs | FsxLustreFs | NfsFs | HostPathFs
    namespaces: dict[str, Any]  # team name -> Namespace resource: each gets its own subtree
    identities: dict[str, tuple[int, int]]  # team name -> (uid, gid) owning its subtree
    root_namespaces: dict[str, Any] = field(
        default_factory=dict
    )  # namespace -> resource: the root, read-only
    prepare_image: pulumi.Input[str] | None = None  # any image with sh, mkdir, chown, chmod
    # The registry login for prepare_image in PREPARE_NAMESPACE (None: no login needed), and
    # what the Job waits for (that Secret).
    pull_secret: str | None = None
    pull_secret_ready: list[Any] = field(default_factory=list)
    aws: AwsNetwork | None = None
    depends_on: list[Any] = field(default_factory=list)


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


def team_path(team: str) -> str:
    return f"{TEAMS_DIR}/{team}"


def prepare_script(identities: dict[str, tuple[int, int]], root: str = "/fs") -> str:
    """Give each team's subtree its owner and mode, or leave it be where it has them; run again,
    it changes nothing. A subtree it cannot make (an export with root_squash maps this Job's
    root to an anonymous uid) fails the Job with the commands the file server's admin runs."""
    lines = ["set -eu", "fail=0"]
    for team, (uid, gid) in sorted(identities.items()):
        rel, d = team_path(team), f"{root}/{team_path(team)}"
        make = f"mkdir -p {rel} && chown {uid}:{gid} {rel} && chmod {PREPARED_DIR_MODE} {rel}"
        lines.append(
            f'[ "$(stat -c %u:%g:%a {d} 2>/dev/null)" = "{uid}:{gid}:{PREPARED_DIR_MODE}" ]'
            f" || {{ mkdir -p {d} && chown {uid}:{gid} {d} && chmod {PREPARED_DIR_MODE} {d}; }}"
            f" || {{ echo 'alchemist-shared-prepare: cannot give {rel} owner {uid}:{gid} and mode"
            f" {PREPARED_DIR_MODE} (an export with root_squash?); on the file server, in the exported"
            f" directory, run: {make}' >&2; fail=1; }}"
        )
    lines.append('exit "$fail"')
    return "; ".join(lines)


class SharedFileSystem(pulumi.ComponentResource):
    """The backend file system, its CSI driver, a StorageClass and a RWX PVC per namespace."""

    def __init__(self, name: str, args: SharedFileSystemArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:SharedFileSystem", name, None, opts)
        self._name = name
        self.kind = args.fs.kind
        self._identities = dict(args.identities)
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
        pv_opts = pulumi.ResourceOptions(parent=self, depends_on=[self.storage_class])
        if not isinstance(fs, EfsFs):
            # The root, for the prepare Job only (PV name with a dot: no team can have it).
            # Its own volumeHandle: the read-only root of the monitoring namespace has the plain one.
            root = pv_source(None)
            root = {**root, "csi": {**root["csi"], "volumeHandle": pulumi.Output.concat(
                root["csi"]["volumeHandle"], "#prepare")}} if "csi" in root else root  # fmt: skip
            self._claim(name, "_root", f"{SHARED_PVC}.root", PREPARE_NAMESPACE, ROOT_PVC, root,
                        capacity, pv_opts, None)  # fmt: skip
            self.prepare = self._prepare_job(name, args)
            pv_opts = pulumi.ResourceOptions(parent=self, depends_on=[self.storage_class, self.prepare])
        for ns_name, ns_res in args.namespaces.items():
            self.claims[ns_name] = self._claim(name, ns_name, f"{SHARED_PVC}-{ns_name}", ns_name, SHARED_PVC,
                                               pv_source(ns_name), capacity, pv_opts, ns_res)  # fmt: skip
        for ns_name, ns_res in args.root_namespaces.items():
            self.claims[ns_name] = self._claim(name, ns_name, f"{SHARED_PVC}-{ns_name}", ns_name, SHARED_PVC,
                                               _read_only(pv_source(None)), capacity, pv_opts, ns_res)  # fmt: skip
        self.register_outputs({"kind": self.kind, "pvc": SHARED_PVC})

    def _claim(self, name: str, suffix: str, pv_name: str, namespace: str, pvc: str, source: dict[str, Any],
               capacity: str, pv_opts: pulumi.ResourceOptions, ns_res: Any) -> Any:  # fmt: skip
        """A static PV on `source` and the PVC bound to it (claimRef both ways: nobody else takes it)."""
        pv = kubernetes.core.v1.PersistentVolume(
            f"{name}-pv-{suffix}",
            metadata={"name": pv_name, "labels": {"alchemist.io/shared-fs": self.kind}},
            spec={
                "capacity": {"storage": capacity},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": SHARED_STORAGE_CLASS,
                "claimRef": {"namespace": namespace, "name": pvc},
                **source,
            },
            opts=pv_opts,
        )
        return kubernetes.core.v1.PersistentVolumeClaim(
            f"{name}-pvc-{suffix}",
            metadata={"name": pvc, "namespace": namespace},
            spec={
                "accessModes": ["ReadWriteMany"],
                "storageClassName": SHARED_STORAGE_CLASS,
                "volumeName": pv_name,
                "resources": {"requests": {"storage": capacity}},
            },
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[pv, *([ns_res] if ns_res is not None else [])]
            ),
        )

    def _prepare_job(self, name: str, args: SharedFileSystemArgs) -> Any:
        """A Job that mounts the root and gives each team's subtree its owner and mode."""
        if args.prepare_image is None:
            raise ValueError(f"shared file system {self.kind!r} needs an image for its prepare Job")
        return kubernetes.batch.v1.Job(
            f"{name}-prepare",
            metadata={"name": "alchemist-shared-prepare", "namespace": PREPARE_NAMESPACE},
            spec={
                "backoffLimit": 3,
                "template": {
                    "spec": {
                        "restartPolicy": "OnFailure",
                        **({"imagePullSecrets": [{"name": args.pull_secret}]} if args.pull_secret else {}),
                        "containers": [
                            {
                                "name": "prepare",
                                "image": args.prepare_image,
                                "command": ["sh", "-c", prepare_script(args.identities)],
                                # chown needs root; this Job is the only pod that runs as root on the root.
                                # FSETID: chmod keeps the setgid bit on a directory whose group is not root's.
                                "securityContext": {
                                    "runAsUser": 0,
                                    "runAsGroup": 0,
                                    "allowPrivilegeEscalation": False,
                                    "capabilities": {
                                        "drop": ["ALL"],
                                        "add": ["CHOWN", "FOWNER", "DAC_OVERRIDE", "FSETID"],
                                    },
                                },
                                "volumeMounts": [{"name": "fs", "mountPath": "/fs"}],
                            }
                        ],
                        "volumes": [{"name": "fs", "persistentVolumeClaim": {"claimName": ROOT_PVC}}],
                    }
                },
            },  # fmt: skip
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[self.storage_class, *args.pull_secret_ready]
            ),
        )

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
            opts=pulumi.ResourceOptions(parent=self),
        )

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
        # templates/csidriver.yaml of this chart is a Helm hook, which helm.v4.Chart skips
        driver = self._csi_driver(f"{name}-efs-csi", net, "efs-csi-controller-sa", CHARTS["aws-efs-csi-driver"],
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

        def source(team: str | None) -> dict[str, Any]:
            # csi-driver-nfs mounts `server:share/subDir` (pkg/nfs/nodeserver.go, v4.11.0).
            attributes = {"server": fs.server, "share": fs.share}
            if team is not None:
                attributes["subDir"] = team_path(team)
            return {
                "csi": {"driver": NFS_DRIVER, "volumeHandle": f"{fs.server}#{fs.share}#alchemist#{team or '.root'}",
                        "volumeAttributes": attributes},
                "mountOptions": ["nfsvers=4.1"],
            }  # fmt: skip

        return sc, source, NOMINAL_CAPACITY, driver

    def _hostpath(self):
        # kind mounts the same host directory into every node, so a hostPath is shared.
        sc = {"provisioner": "kubernetes.io/no-provisioner"}

        def source(team: str | None) -> dict[str, Any]:
            if team is None:
                return {"hostPath": {"path": KIND_SHARED_PATH, "type": "DirectoryOrCreate"}}
            # made with its owner by the prepare Job before any team pod mounts it
            return {"hostPath": {"path": f"{KIND_SHARED_PATH}/{team_path(team)}", "type": "Directory"}}

        return sc, source, NOMINAL_CAPACITY, None


def _need_aws(args: SharedFileSystemArgs) -> AwsNetwork:
    if args.aws is None:
        raise ValueError(f"shared file system {args.fs.kind!r} needs the AWS cluster's network")
    return args.aws


def _read_only(source: dict[str, Any]) -> dict[str, Any]:
    """The same volume source, read-only where the source has the switch (CSI).

    A hostPath PV has none: on kind (one user's laptop) the reader gets the root as it is.
    """
    if "csi" in source:
        return {**source, "csi": {**source["csi"], "readOnly": True}}
    return source
