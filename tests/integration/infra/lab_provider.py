"""A provider that lives only in the tests: `lab`, a cluster someone runs for us at a fixed
address, with an NFS share and a registry named in the stack config.

`register()` adds it; nothing under infra/ or alchemist_jobs/ names it. The stack output's
kubeconfig carries a token of this module's own, which the job half uses as is.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes
import yaml

from infra import providers
from infra.cluster_facts import ClusterArgs, ClusterFacts
from infra.providers.onprem.cluster import registry_facts

SERVER = "https://api.lab.test:6443"
TOKEN = "lab-token-not-a-real-one"


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
            registry=registry_facts(args.cfg),
        )
        self.register_outputs({})


class LabProvider(providers.Provider):
    name = "lab"
    shared_fs_kinds = ("nfs",)
    section_required = False

    def cluster(self, stack: str, cfg: Any) -> ClusterFacts:
        return LabCluster("cluster", ClusterArgs(stack=stack, cfg=cfg)).facts


def register() -> None:
    providers.register(LabProvider())
