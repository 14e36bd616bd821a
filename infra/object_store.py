"""Object storage for datasets: an encrypted, private, TLS-only S3 bucket on AWS; an existing S3-compatible service elsewhere.

AWS: the bucket (SSE-S3 encryption by default, every public-access block on, ACLs disabled,
a policy denying any request not made over TLS, unfinished multipart uploads aborted after a
week) and, per team namespace, an IRSA annotation on the ServiceAccount `alchemist-job` (which the
team namespace creates) for a role
that may list, read and write only the keys under the team's prefix (`<team>/`). Other providers: the endpoint and
bucket named in `alchemist:objectStore`, the same ServiceAccount, and where access keys are
given a Secret `alchemist-job-object-store` in each team namespace with that team's own key
pair (a team's `objectStoreAccessKeyId`, or the stack's for one team at most: a pair two teams
held would reach both prefixes, so the config refuses it). Without
`objectStore` a non-AWS stack has no object store and exports none.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes
from pydantic import SecretStr

from alchemist_jobs.contract import JOB_SERVICE_ACCOUNT, OBJECT_STORE_SECRET
from infra.cluster import AwsNetwork
from infra.cluster_addons import ROLE_ANNOTATION, irsa_trust_policy
from infra.config import ObjectStoreConfig
from infra.labels import MANAGED_BY

ACCESS_KEY_ANNOTATION = "alchemist.io/access-key-id"
MULTIPART_ABORT_DAYS = 7  # an interrupted `alchemist data push` leaves parts; S3 bills them


@dataclass
class ObjectStoreArgs:
    stack: str
    config: ObjectStoreConfig | None  # None: AWS creates a bucket with defaults; others have none
    secret_key: SecretStr | None  # alchemist:objectStoreSecretKey (non-AWS access keys)
    namespaces: dict[str, Any]  # team name -> Namespace resource
    aws: AwsNetwork | None = None
    depends_on: list[Any] = field(default_factory=list)
    service_accounts: dict[str, Any] = field(default_factory=dict)  # team -> its job ServiceAccount
    default_team: str = ""  # whose prefix the stack output names (the contract's namespace)
    team_keys: dict[str, tuple[str, SecretStr]] = field(
        default_factory=dict
    )  # team -> its own key pair (non-AWS)


def bucket_prefix(stack: str) -> str:
    """A valid S3 name prefix (at most 37 characters, as the provider requires) for the stack's bucket."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"alchemist-{stack}".lower())[:31].rstrip("-")
    return f"{base}-data-"


def tls_only_policy(bucket_arn: str) -> str:
    """Deny every request to the bucket and its objects that does not use TLS."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": [bucket_arn, f"{bucket_arn}/*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }],
    })  # fmt: skip


def team_prefix(team: str) -> str:
    """The team's own part of the bucket: every key it reads or writes starts with this."""
    return f"{team}/"


def job_access_policy(bucket_arn: str, prefix: str) -> str:
    """What staging and `alchemist data push` need, under the team's prefix only: list the
    keys under it (ListBucket's `s3:prefix` condition key, AWS S3 User Guide "Bucket policy
    examples using condition keys"), read, write and delete objects whose key starts with it."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ListOwnPrefix", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [bucket_arn],
             "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}}},
            {"Sid": "OwnObjects", "Effect": "Allow",
             "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
             "Resource": [f"{bucket_arn}/{prefix}*"]},
        ],
    })  # fmt: skip


class ObjectStore(pulumi.ComponentResource):
    """The stack's object store; `output` is the contract's `object_store` section (or None)."""

    def __init__(self, name: str, args: ObjectStoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:ObjectStore", name, None, opts)
        self._name = name
        self.output: dict[str, Any] | None = None
        self.role_arns: dict[str, Any] = {}
        if args.aws is not None:
            self._aws(name, args, args.aws)
        elif args.config is not None:
            self._existing(name, args, args.config)
        self.register_outputs({"object_store": self.output})

    def _aws(self, name: str, args: ObjectStoreArgs, net: AwsNetwork) -> None:
        import pulumi_aws as aws

        on_aws = pulumi.ResourceOptions(parent=self, provider=net.aws_provider)
        cfg = args.config
        named = {"bucket": cfg.bucket} if cfg and cfg.bucket else {"bucket_prefix": bucket_prefix(args.stack)}
        bucket = aws.s3.Bucket(f"{name}-bucket", **named, tags={"alchemist:stack": args.stack}, opts=on_aws)
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption",
            bucket=bucket.id,
            rules=[aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                apply_server_side_encryption_by_default=aws.s3.
                BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(sse_algorithm="AES256"),
            )],
            opts=on_aws,
        )  # fmt: skip
        block = aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access-block",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=on_aws,
        )
        aws.s3.BucketOwnershipControls(
            f"{name}-ownership",
            bucket=bucket.id,
            rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
            opts=on_aws,
        )
        # After the public-access block: S3 evaluates a policy against the block when it is put.
        aws.s3.BucketPolicy(
            f"{name}-tls-only",
            bucket=bucket.id,
            policy=bucket.arn.apply(tls_only_policy),
            opts=pulumi.ResourceOptions.merge(on_aws, pulumi.ResourceOptions(depends_on=[block])),
        )
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle", bucket=bucket.id,
            rules=[aws.s3.BucketLifecycleConfigurationRuleArgs(
                id="abort-incomplete-multipart-uploads", status="Enabled",
                filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                abort_incomplete_multipart_upload=aws.s3.
                BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(days_after_initiation=MULTIPART_ABORT_DAYS),
            )],
            opts=on_aws,
        )  # fmt: skip
        for team in args.namespaces:
            role = aws.iam.Role(
                f"{name}-{team}-role",
                assume_role_policy=irsa_trust_policy(net.oidc_provider_arn, net.oidc_provider_url,
                                                     team, JOB_SERVICE_ACCOUNT),
                opts=on_aws,
            )  # fmt: skip
            aws.iam.RolePolicy(
                f"{name}-{team}-access",
                role=role.id,
                policy=bucket.arn.apply(lambda arn, t=team: job_access_policy(arn, team_prefix(t))),
                opts=on_aws,
            )
            self.role_arns[team] = role.arn
            self._annotate_service_account(name, team, args, {ROLE_ANNOTATION: role.arn})
        self.bucket = bucket
        self.output = {
            "bucket": bucket.bucket,
            "region": net.region,
            "prefix": team_prefix(args.default_team),
        }

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
        self.output = {
            "endpoint": cfg.endpoint.rstrip("/"),
            "bucket": cfg.bucket,
            "region": cfg.region,
            "prefix": team_prefix(args.default_team),
        }

    def _annotate_service_account(
        self, name: str, team: str, args: ObjectStoreArgs, annotations: dict[str, Any]
    ) -> None:
        """IRSA's role on the team's job ServiceAccount, which the team namespace owns: a patch
        (server-side apply of these fields only), not a second object of the same name."""
        kubernetes.core.v1.ServiceAccountPatch(
            f"{name}-{team}-sa",
            metadata={"name": JOB_SERVICE_ACCOUNT, "namespace": team, "annotations": annotations},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[
                *([args.service_accounts[team]] if team in args.service_accounts else []),
                *args.depends_on]),
        )  # fmt: skip
