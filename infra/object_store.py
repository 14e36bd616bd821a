"""Object storage for datasets: a store the provider creates (its `ObjectStoreBackend`), or an existing S3-compatible service.

A provider with a store of its own (`Provider.object_store_backend`, in the provider's package)
creates it through the backend, which reaches each team's prefix (`<team>/`) by the provider's
own identities, annotated on the team's job ServiceAccount. Otherwise: the endpoint and
bucket named in `alchemist:objectStore`, the ServiceAccount `alchemist-job` (which the team
namespace creates), and where access keys are given a Secret `alchemist-job-object-store` in
each team namespace with that team's own key pair (a team's `objectStoreAccessKeyId`, or the
stack's for one team at most: a pair two teams held would reach both prefixes, so the config
refuses it). Without either the stack has no object store and exports none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import pulumi
import pulumi_kubernetes as kubernetes
from pydantic import SecretStr

from alchemist_jobs.contract import JOB_SERVICE_ACCOUNT, OBJECT_STORE_SECRET
from infra.config import ObjectStoreConfig
from infra.labels import MANAGED_BY

ACCESS_KEY_ANNOTATION = "alchemist.io/access-key-id"


class ObjectStoreBackend(Protocol):
    """An object store the provider creates itself (`Provider.object_store_backend`)."""

    def create(self, store: ObjectStore, name: str, args: ObjectStoreArgs) -> dict[str, Any]:
        """Create the store as children of `store` (named `{name}-...`), give each team of
        `args.namespaces` access to its own prefix (`team_prefix`), and return the contract's
        `object_store` section (alchemist_jobs.contract.ObjectStoreAccess)."""
        ...


@dataclass
class ObjectStoreArgs:
    stack: str
    config: ObjectStoreConfig | None  # None: a backend's store with its defaults; otherwise none
    secret_key: SecretStr | None  # alchemist:objectStoreSecretKey (an existing service's keys)
    namespaces: dict[str, Any]  # team name -> Namespace resource
    backend: ObjectStoreBackend | None = None  # the provider's own store
    depends_on: list[Any] = field(default_factory=list)
    service_accounts: dict[str, Any] = field(default_factory=dict)  # team -> its job ServiceAccount
    default_team: str = ""  # whose prefix the stack output names (the contract's namespace)
    team_keys: dict[str, tuple[str, SecretStr]] = field(
        default_factory=dict
    )  # team -> its own key pair (an existing service)


def team_prefix(team: str) -> str:
    """The team's own part of the bucket: every key it reads or writes starts with this."""
    return f"{team}/"


class ObjectStore(pulumi.ComponentResource):
    """The stack's object store; `output` is the contract's `object_store` section (or None)."""

    def __init__(self, name: str, args: ObjectStoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:ObjectStore", name, None, opts)
        self._name = name
        self.output: dict[str, Any] | None = None
        if args.backend is not None:
            self.output = args.backend.create(self, name, args)
        elif args.config is not None:
            self._existing(name, args, args.config)
        self.register_outputs({"object_store": self.output})

    def _existing(self, name: str, args: ObjectStoreArgs, cfg: ObjectStoreConfig) -> None:
        # Each team's own key pair (StackConfig.object_store_keys: no two teams share one), which
        # the service's admin restricts to the team's prefix; its id, not secret, is annotated
        # so an admin can tell which key a namespace holds.
        for team, namespace in args.namespaces.items():
            if team not in args.team_keys:
                continue
            key_id, secret = args.team_keys[team]
            kubernetes.core.v1.Secret(
                f"{name}-{team}-keys",
                metadata={"name": OBJECT_STORE_SECRET, "namespace": team, "labels": MANAGED_BY,
                          "annotations": {ACCESS_KEY_ANNOTATION: key_id}},
                type="Opaque",
                string_data={
                    "AWS_ACCESS_KEY_ID": key_id,
                    "AWS_SECRET_ACCESS_KEY": pulumi.Output.secret(secret.get_secret_value()),
                },
                opts=pulumi.ResourceOptions(parent=self, depends_on=[namespace, *args.depends_on]),
            )  # fmt: skip
        assert cfg.endpoint is not None  # config.parse: a service the stack does not create has one
        self.output = {
            "endpoint": cfg.endpoint.rstrip("/"),
            "bucket": cfg.bucket,
            "region": cfg.region,
            "prefix": team_prefix(args.default_team),
        }

    def annotate_service_account(
        self, name: str, team: str, args: ObjectStoreArgs, annotations: dict[str, Any]
    ) -> None:
        """A backend's identity on the team's job ServiceAccount, which the team namespace owns: a
        patch (server-side apply of these fields only), not a second object of the same name."""
        kubernetes.core.v1.ServiceAccountPatch(
            f"{name}-{team}-sa",
            metadata={"name": JOB_SERVICE_ACCOUNT, "namespace": team, "annotations": annotations},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[
                *([args.service_accounts[team]] if team in args.service_accounts else []),
                *args.depends_on]),
        )  # fmt: skip
