"""The AWS provider's object store: an encrypted, private, TLS-only S3 bucket, each team reaching its prefix through IRSA.

The bucket (SSE-S3 encryption by default, every public-access block on, ACLs disabled, a policy
denying any request not made over TLS, unfinished multipart uploads aborted after a week) and,
per team namespace, an IRSA annotation on the ServiceAccount `alchemist-job` (which the team
namespace creates) for a role that may list, read and write only the keys under the team's
prefix (`<team>/`).
"""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING, Any

import pulumi

from alchemist_jobs.contract import JOB_SERVICE_ACCOUNT
from infra.object_store import team_prefix
from infra.providers.aws.cluster_addons import ROLE_ANNOTATION, irsa_trust_policy

if TYPE_CHECKING:
    from infra.object_store import ObjectStore, ObjectStoreArgs
    from infra.providers.aws.facts import AwsNetwork

MULTIPART_ABORT_DAYS = 7  # an interrupted `alchemist data push` leaves parts; S3 bills them


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


def _team_policy(team: str, bucket_arn: str) -> str:
    return job_access_policy(bucket_arn, team_prefix(team))


class S3Bucket:
    """The `ObjectStoreBackend` of an AWS stack."""

    def __init__(self, net: AwsNetwork):
        self.net = net
        self.role_arns: dict[str, Any] = {}  # team -> its IAM role's ARN

    def create(self, store: ObjectStore, name: str, args: ObjectStoreArgs) -> dict[str, Any]:
        net = self.net
        import pulumi_aws as aws

        on_aws = pulumi.ResourceOptions(parent=store, provider=net.aws_provider)
        cfg = args.config
        named: dict[str, Any] = (
            {"bucket": cfg.bucket} if cfg and cfg.bucket else {"bucket_prefix": bucket_prefix(args.stack)}
        )
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
                policy=bucket.arn.apply(functools.partial(_team_policy, team)),
                opts=on_aws,
            )
            self.role_arns[team] = role.arn
            store.annotate_service_account(name, team, args, {ROLE_ANNOTATION: role.arn})
        return {
            "bucket": bucket.bucket,
            "region": net.region,
            "prefix": team_prefix(args.default_team),
        }
