"""A team's own API credential on a cluster the deployer brings (`existing`): a ServiceAccount bound to the submitter Role, and a kubeconfig with its token.

The deployer's kubeconfig is for `pulumi up` only. Jobs and users get this one: the cluster
entry of the deployer's current context (server, CA) and the token of a ServiceAccount that
holds nothing but the team's `alchemist-job-submitter` Role. The token is the one the API
server's token controller writes into a `kubernetes.io/service-account-token` Secret
(Kubernetes docs, "Manually create a long-lived API token for a ServiceAccount");
pulumi-kubernetes waits until the controller has filled it in
(provider/pkg/await/awaiters.go, untilCoreV1SecretInitialized). Delete the Secret and run
`pulumi up` again to rotate it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes
import yaml

from infra.config import cluster_entry
from infra.labels import MANAGED_BY
from infra.team_namespace import RBAC, SUBMITTER_ROLE

SUBMITTER_ACCOUNT = "alchemist-submitter"
TOKEN_SECRET = "alchemist-submitter-token"  # not alchemist-job-*: no pod may mount it


def credential_name(team: str, first: bool) -> str:
    """The component's name: the default team's keeps the name it had when it was the only one."""
    return "team-credential" if first else f"team-credential-{team}"


def token_kubeconfig(deployer_kubeconfig: str, secret_data: dict[str, str], team: str) -> str:
    """The deployer's cluster with the ServiceAccount's token as the only user, in the team namespace."""
    cluster = cluster_entry(deployer_kubeconfig)
    if not cluster.get("certificate-authority-data") and "ca.crt" in secret_data:
        cluster.pop("certificate-authority", None)  # a file on the deployer's machine: use the cluster's CA
        cluster["certificate-authority-data"] = secret_data["ca.crt"]
    user = f"{SUBMITTER_ACCOUNT}-{team}"
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": user,
        "clusters": [{"name": "alchemist", "cluster": cluster}],
        "contexts": [{"name": user, "context": {"cluster": "alchemist", "user": user, "namespace": team}}],
        "users": [{"name": user, "user": {"token": base64.b64decode(secret_data["token"]).decode()}}],
    }, sort_keys=False)  # fmt: skip


@dataclass
class TeamCredentialArgs:
    team: str
    deployer_kubeconfig: pulumi.Input[str]  # secret
    depends_on: list[Any] = field(default_factory=list)  # the team's namespace and Role


class TeamCredential(pulumi.ComponentResource):
    """The submitter ServiceAccount, its RoleBinding and token; `kubeconfig` (secret) uses it."""

    def __init__(self, name: str, args: TeamCredentialArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:TeamCredential", name, None, opts)
        k8s, ns = kubernetes, args.team
        child = pulumi.ResourceOptions(parent=self, depends_on=args.depends_on)
        account = k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata={"name": SUBMITTER_ACCOUNT, "namespace": ns, "labels": MANAGED_BY},
            automount_service_account_token=False, opts=child)  # fmt: skip
        binding: dict[str, Any] = {  # the API's own shape (the SDK's typed dicts spell keys in snake_case)
            "metadata": {"name": SUBMITTER_ACCOUNT, "namespace": ns, "labels": MANAGED_BY},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": SUBMITTER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": SUBMITTER_ACCOUNT, "namespace": ns}],
        }
        k8s.rbac.v1.RoleBinding(
            f"{name}-binding",
            metadata=binding["metadata"],
            role_ref=binding["roleRef"],
            subjects=binding["subjects"],
            opts=child,
        )
        token = k8s.core.v1.Secret(
            f"{name}-token",
            metadata={"name": TOKEN_SECRET, "namespace": ns, "labels": MANAGED_BY,
                      "annotations": {"kubernetes.io/service-account.name": SUBMITTER_ACCOUNT}},
            type="kubernetes.io/service-account-token",
            opts=pulumi.ResourceOptions(parent=self, depends_on=[account], additional_secret_outputs=["data"]),
        )  # fmt: skip
        made: pulumi.Output[str] = pulumi.Output.all(args.deployer_kubeconfig, token.data).apply(
            lambda a: token_kubeconfig(a[0], a[1] or {}, ns))  # fmt: skip
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(made)
        self.register_outputs({"kubeconfig": self.kubeconfig})
