"""Pull credentials for a private registry: a dockerconfigjson Secret in every namespace whose pods pull the stack's images."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from infra.cluster import Registry

PULL_SECRET = "alchemist-registry"  # exported as images.pull_secret; job pods list it in imagePullSecrets


def _docker_config_of(login: list[Any]) -> str:
    host, user, password = login
    return docker_config(host, user, password)


def docker_config(host: str, user: str, password: str) -> str:
    """The `.dockerconfigjson` of one registry login (the kubernetes.io/dockerconfigjson Secret type)."""
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    return json.dumps({"auths": {host: {"username": user, "password": password, "auth": auth}}})


@dataclass
class RegistryAccessArgs:
    registry: Registry
    namespaces: dict[
        str, Any
    ]  # name -> Namespace resource (the team namespaces: jobs, sessions, TensorBoard)
    # Namespaces the cluster already has whose pods run the stack's images too (the shared file
    # system's prepare Job in kube-system).
    existing_namespaces: list[str] = field(default_factory=list)


class RegistryAccess(pulumi.ComponentResource):
    """The registry login as a pull Secret in each namespace (nothing when the registry needs none)."""

    def __init__(self, name: str, args: RegistryAccessArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:RegistryAccess", name, None, opts)
        reg = args.registry
        self.pull_secret: str | None = None
        self.secrets: dict[str, Any] = {}  # namespace -> its pull Secret (what a pod there waits for)
        if reg.user is not None and reg.password is not None and reg.hosted is None:
            self.pull_secret = PULL_SECRET
            config: pulumi.Output[str] = pulumi.Output.secret(
                pulumi.Output.all(reg.host, reg.user, reg.password).apply(_docker_config_of)
            )
            targets = {
                **{ns: [res] for ns, res in args.namespaces.items()},
                **{ns: [] for ns in args.existing_namespaces},
            }
            for ns, after in targets.items():
                self.secrets[ns] = kubernetes.core.v1.Secret(
                    f"{name}-{ns}",
                    metadata={"name": PULL_SECRET, "namespace": ns},
                    type="kubernetes.io/dockerconfigjson",
                    string_data={".dockerconfigjson": config},
                    opts=pulumi.ResourceOptions(parent=self, depends_on=after),
                )
        self.register_outputs({"pull_secret": self.pull_secret})
