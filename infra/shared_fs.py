"""One POSIX file system every job pod sees at /shared: a provider's own (its `SharedFsBackend`, in its package), NFS, or hostPath on kind.

Whatever the backend, it ends the same way: a StorageClass `alchemist-shared` and, in every
team namespace, a ReadWriteMany PVC `alchemist-shared` bound to a static PV on that team's
own subtree `/teams/<team>`, owned by the team's uid:gid (mode 2770, or what the file system
itself sets), so a team's jobs can write there and see nothing of another team's. How the
subtree gets its owner:

- A file system that confines each team itself (`SharedFsVolumes.per_team_identity`: a
  mount point per team that acts as the team's identity for every call): the backend makes
  one per team; no prepare Job.
- Any other (NFS, hostPath, a provider's own without that): a one-off Job (`prepare`) mounts
  the root as root and makes each `/teams/<team>` with the team's owner and mode 2770 (or, on
  an NFS export with root_squash, finds it made so by the server's admin, and otherwise names
  the commands for them); the team's PV then mounts only that subdirectory (csi-driver-nfs
  `subDir`, a hostPath below the shared directory, the backend's own path). Such a file system
  does not enforce an identity per mount: ownership and mode keep teams apart, with pods run
  as the team uid.

The monitoring namespace (TensorBoard) gets the root, read-only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pulumi
import pulumi_kubernetes as kubernetes

from infra.cluster import KIND_SHARED_PATH
from infra.config import HostPathFs, NfsFs, SharedFsConfig
from infra.labels import SHARED_PVC, SHARED_STORAGE_CLASS
from infra.versions import CHARTS

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

NFS_DRIVER = "nfs.csi.k8s.io"
NOMINAL_CAPACITY = (
    "1Ti"  # NFS (and elastic file systems) are not sized by the claim; Kubernetes needs a number
)


@dataclass
class SharedFsVolumes:
    """What a file system backend gives SharedFileSystem to make its StorageClass and PVs from."""

    storage_class: dict[str, Any]  # the StorageClass's fields (provisioner, parameters, ...)
    source: Callable[[str | None], dict[str, Any]]  # team (None: the root) -> the PV's source
    capacity: str  # the PVs' nominal capacity
    driver: Any  # what the StorageClass waits for (its CSI driver), or None
    # The file system itself confines each team to its subtree as the team's identity (a
    # mount point per team that acts as that identity): no prepare Job and no root PV.
    per_team_identity: bool = False


class SharedFsBackend(Protocol):
    """A provider's own file systems (`Provider.shared_fs_backend`)."""

    kinds: tuple[str, ...]  # the sharedFs kinds it makes

    def volumes(
        self, parent: pulumi.ComponentResource, name: str, fs: Any, identities: dict[str, tuple[int, int]]
    ) -> SharedFsVolumes:
        """Create the file system and its driver as children of `parent`, named `name-...`."""
        ...


@dataclass
class SharedFileSystemArgs:
    fs: SharedFsConfig  # nfs, hostpath, or a kind of the provider's own (its backend makes it)
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
    backend: SharedFsBackend | None = None  # the provider's own file systems, if it has any
    depends_on: list[Any] = field(default_factory=list)


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
        per_team_identity = False
        if args.backend is not None and fs.kind in args.backend.kinds:  # the provider's own, first
            own = args.backend.volumes(self, name, fs, self._identities)
            sc_spec, pv_source, capacity, driver = own.storage_class, own.source, own.capacity, own.driver
            per_team_identity = own.per_team_identity
        elif isinstance(fs, NfsFs):
            sc_spec, pv_source, capacity, driver = self._nfs(name, fs)
        elif isinstance(fs, HostPathFs):
            sc_spec, pv_source, capacity, driver = self._hostpath()
        else:
            raise ValueError(f"shared file system {fs.kind!r} needs its provider's backend")
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
        if not per_team_identity:
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
        # The API's own shapes (the SDK's typed dicts spell keys in snake_case).
        volume: dict[str, Any] = {
            "metadata": {"name": pv_name, "labels": {"alchemist.io/shared-fs": self.kind}},
            "spec": {
                "capacity": {"storage": capacity},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": SHARED_STORAGE_CLASS,
                "claimRef": {"namespace": namespace, "name": pvc},
                **source,
            },
        }
        claim: dict[str, Any] = {
            "metadata": {"name": pvc, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": SHARED_STORAGE_CLASS,
                "volumeName": pv_name,
                "resources": {"requests": {"storage": capacity}},
            },
        }
        pv = kubernetes.core.v1.PersistentVolume(
            f"{name}-pv-{suffix}", metadata=volume["metadata"], spec=volume["spec"], opts=pv_opts
        )
        return kubernetes.core.v1.PersistentVolumeClaim(
            f"{name}-pvc-{suffix}",
            metadata=claim["metadata"],
            spec=claim["spec"],
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[pv, *([ns_res] if ns_res is not None else [])]
            ),
        )

    def _prepare_job(self, name: str, args: SharedFileSystemArgs) -> Any:
        """A Job that mounts the root and gives each team's subtree its owner and mode."""
        if args.prepare_image is None:
            raise ValueError(f"shared file system {self.kind!r} needs an image for its prepare Job")
        job: dict[str, Any] = {  # the API's own shape (the SDK's typed dicts spell keys in snake_case)
            "metadata": {"name": "alchemist-shared-prepare", "namespace": PREPARE_NAMESPACE},
            "spec": {
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
            },
        }  # fmt: skip
        return kubernetes.batch.v1.Job(
            f"{name}-prepare",
            metadata=job["metadata"],
            spec=job["spec"],
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[self.storage_class, *args.pull_secret_ready]
            ),
        )

    # --- backends: each returns (StorageClass fields, ns -> PV source, capacity, driver) ---

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


def _read_only(source: dict[str, Any]) -> dict[str, Any]:
    """The same volume source, read-only where the source has the switch (CSI).

    A hostPath PV has none: on kind (one user's laptop) the reader gets the root as it is.
    """
    if "csi" in source:
        return {**source, "csi": {**source["csi"], "readOnly": True}}
    return source
