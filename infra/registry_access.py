"""Pull credentials for a private registry: a dockerconfigjson Secret in every job namespace."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from infra.cluster import Registry

PULL_SECRET = "alchemist-registry"  # exported as images.pull_secret; job pods list it in imagePullSecrets


def docker_config(host: str, user: str, password: str) -> str:
    """The `.dockerconfigjson` of one registry login (the kubernetes.io/dockerconfigjson Secret type)."""
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    return json.dumps({"auths": {host: {"username": user, "password": password, "auth": auth}}})


@dataclass
class RegistryAccessArgs:
    registry: Registry
    namespaces: dict[str, Any]  # name -> Namespace resource


class RegistryAccess(pulumi.ComponentResource):
    """The registry login as a pull Secret in each namespace (nothing when the registry needs none)."""

    def __init__(self, name: str, args: RegistryAccessArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:RegistryAccess", name, None, opts)
        reg = args.registry
        self.pull_secret: str | None = None
        if reg.user is not None and reg.password is not None and not reg.ecr_repositories:
            self.pull_secret = PULL_SECRET
            config = pulumi.Output.secret(
                pulumi.Output.all(reg.host, reg.user, reg.password).apply(lambda a: docker_config(*a))
            )
            for ns, ns_res in args.namespaces.items():
                kubernetes.core.v1.Secret(
                    f"{name}-{ns}",
                    metadata={"name": PULL_SECRET, "namespace": ns},
                    type="kubernetes.io/dockerconfigjson",
                    string_data={".dockerconfigjson": config},
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[ns_res]),
                )
        self.register_outputs({"pull_secret": self.pull_secret})
