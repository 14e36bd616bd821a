"""A provider that lives only in the tests: `lab`, a cluster someone runs for us at a fixed
address, with a registry, an object store and a file server of its own.

`register()` adds it (one line); nothing under infra/ or alchemist_jobs/ names it. Its pieces
are the neutral components' typed interfaces: a `HostedRegistry` (one repository per image
and a push login), an `ObjectStoreBackend` (a bucket and each team's own key pair) with its
store's address for the pods' egress, and a `SharedFsBackend` (an export on its own file
server, for the `nfs` kind). The stack output's kubeconfig carries a token of this module's
own, which the job half uses as is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes
import yaml

from alchemist_jobs.contract import OBJECT_STORE_SECRET
from infra import providers
from infra.cluster_facts import ClusterArgs, ClusterFacts, HostedRepositories, Registry
from infra.labels import MANAGED_BY
from infra.object_store import ObjectStore, ObjectStoreArgs, team_prefix
from infra.object_store_network import StoreEgress
from infra.shared_fs import NOMINAL_CAPACITY, SharedFsVolumes, team_path

SERVER = "https://api.lab.test:6443"
TOKEN = "lab-token-not-a-real-one"
REGISTRY = "registry.lab.test:5000"
REGISTRY_PASSWORD = "lab-registry-password-never-in-clear"
STORE = "https://store.lab.test"
STORE_ADDRESS = "10.77.0.9/32"
FILER = "filer.lab.test"


def kubeconfig(namespace: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": SERVER, "insecure-skip-tls-verify": True}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "jobs", "namespace": namespace}}],
        "users": [{"name": "jobs", "user": {"token": TOKEN}}],
    })  # fmt: skip


class LabCluster(pulumi.ComponentResource):
    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:test:LabCluster", name, None, opts)
        self.kubeconfig = pulumi.Output.secret(kubeconfig(args.cfg.default_team.name))
        self.provider = kubernetes.Provider(
            f"{name}-k8s", kubeconfig=self.kubeconfig, opts=pulumi.ResourceOptions(parent=self)
        )
        self.facts = ClusterFacts(
            provider=self.provider,
            kubeconfig=self.kubeconfig,
            gpus_per_node=4,
            gpu_driver_by_operator=True,
            toolkit_by_operator=True,
            registry=Registry(prefix="", host=REGISTRY, hosted=LabRegistry()),
        )
        self.register_outputs({})


class LabRegistry:
    """The lab's registry: one repository per image, pushed to with the lab's CI login."""

    def repositories(
        self, name: str, stack: str, images: Sequence[str], parent: pulumi.Resource
    ) -> HostedRepositories:
        urls = {}
        for image in images:
            repo = pulumi.CustomResource("lab:registry:Repository", f"{name}-{image}-repo",
                                         {"path": f"lab/{stack}/{image}"}, opts=pulumi.ResourceOptions(parent=parent))  # fmt: skip
            urls[image] = repo.id.apply(lambda _, s=stack, i=image: f"{REGISTRY}/lab/{s}/{i}")
        return HostedRepositories(
            urls=urls, host=REGISTRY, user="ci", password=pulumi.Output.secret(REGISTRY_PASSWORD)
        )


class LabStore:
    """The lab's object store: a bucket, and each team its own key pair in its namespace."""

    def create(self, store: ObjectStore, name: str, args: ObjectStoreArgs) -> dict[str, Any]:
        bucket = pulumi.CustomResource("lab:storage:Bucket", f"{name}-bucket", {"name": f"alchemist-{args.stack}"},
                                       opts=pulumi.ResourceOptions(parent=store))  # fmt: skip
        for team, namespace in args.namespaces.items():
            key = pulumi.CustomResource("lab:storage:AccessKey", f"{name}-{team}-key",
                                        {"bucket": f"alchemist-{args.stack}", "prefix": team_prefix(team)},
                                        opts=pulumi.ResourceOptions(parent=store, depends_on=[bucket]))  # fmt: skip
            kubernetes.core.v1.Secret(
                f"{name}-{team}-keys",
                metadata={"name": OBJECT_STORE_SECRET, "namespace": team, "labels": MANAGED_BY},
                type="Opaque",
                string_data={
                    "AWS_ACCESS_KEY_ID": key.id,
                    "AWS_SECRET_ACCESS_KEY": pulumi.Output.secret(key.id),
                },
                opts=pulumi.ResourceOptions(parent=store, depends_on=[namespace, *args.depends_on]),
            )
        return {"endpoint": STORE, "bucket": f"alchemist-{args.stack}", "region": "lab",
                "prefix": team_prefix(args.default_team)}  # fmt: skip


class LabFiler:
    """The lab's file server: an export per stack, mounted with csi-driver-nfs."""

    kinds = ("nfs",)

    def volumes(
        self, parent: pulumi.ComponentResource, name: str, fs: Any, identities: dict[str, tuple[int, int]]
    ) -> SharedFsVolumes:
        export = pulumi.CustomResource("lab:storage:Export", f"{name}-export", {"server": FILER, "path": "/lab"},
                                       opts=pulumi.ResourceOptions(parent=parent))  # fmt: skip

        def source(team: str | None) -> dict[str, Any]:
            attributes = {"server": FILER, "share": "/lab", **({"subDir": team_path(team)} if team else {})}
            return {"csi": {"driver": "nfs.csi.k8s.io", "volumeHandle": f"{FILER}#lab#{team or '.root'}",
                            "volumeAttributes": attributes}}  # fmt: skip

        storage_class = {"provisioner": "nfs.csi.k8s.io", "parameters": {"server": FILER, "share": "/lab"}}
        return SharedFsVolumes(
            storage_class=storage_class, source=source, capacity=NOMINAL_CAPACITY, driver=export
        )


class LabProvider(providers.Provider):
    name = "lab"
    shared_fs_kinds = ("nfs",)
    section_required = False
    own_registry = "the lab's registry"

    def cluster(self, stack: str, cfg: Any) -> ClusterFacts:
        return LabCluster("cluster", ClusterArgs(stack=stack, cfg=cfg)).facts

    def shared_fs_backend(self, facts: ClusterFacts) -> LabFiler:
        return LabFiler()

    def object_store_backend(self, facts: ClusterFacts) -> LabStore:
        return LabStore()

    def object_store_network(self, cfg: Any, facts: ClusterFacts) -> StoreEgress:
        return StoreEgress(cidrs=(STORE_ADDRESS,), port=443)


def register() -> None:
    providers.register(LabProvider())
