"""EKS access without the aws CLI: the bearer token `aws eks get-token` makes, built with boto3.

The token is `k8s-aws-v1.` + base64url (unpadded) of a presigned STS GetCallerIdentity URL
whose signature covers the `x-k8s-aws-id: <cluster name>` header. The cluster's
authenticator replays the URL against STS to learn who is calling, and the signed header
ties the token to this one cluster. It is valid for 15 minutes; `Token` refreshes it early.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from alchemist_jobs.contract import StackOutput
from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes.auth import private_file

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
URL_EXPIRES_S = 60  # as the aws CLI: the URL must be used (by the authenticator) quickly
TOKEN_LIFETIME_S = 15 * 60  # what EKS accepts
REFRESH_AFTER_S = 10 * 60


def _sts_client(region: str, session: Any = None, endpoint_url: str | None = None):
    import boto3

    session = session or boto3.session.Session()
    # botocore resolves the regional endpoint (sts.<region>.amazonaws.com), as the aws CLI does.
    sts = session.client("sts", region_name=region, endpoint_url=endpoint_url)

    # GetCallerIdentity has no such parameter: carry the cluster name from the call's params
    # to the request context, then into a header before signing (as awscli's get_token does).
    def take_cluster_id(params: dict, context: dict, **_: Any) -> None:
        if CLUSTER_ID_HEADER in params:
            context[CLUSTER_ID_HEADER] = params.pop(CLUSTER_ID_HEADER)

    def add_header(request: Any, **_: Any) -> None:
        if CLUSTER_ID_HEADER in request.context:
            request.headers[CLUSTER_ID_HEADER] = request.context[CLUSTER_ID_HEADER]

    sts.meta.events.register("provide-client-params.sts.GetCallerIdentity", take_cluster_id)
    sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_header)
    return sts


def presigned_url(
    cluster_name: str, region: str, session: Any = None, endpoint_url: str | None = None
) -> str:
    sts = _sts_client(region, session, endpoint_url)
    return sts.generate_presigned_url(
        "get_caller_identity",
        Params={CLUSTER_ID_HEADER: cluster_name},
        ExpiresIn=URL_EXPIRES_S,
        HttpMethod="GET",
    )


def get_token(cluster_name: str, region: str, session: Any = None, endpoint_url: str | None = None) -> str:
    """A bearer token for the EKS cluster, from whatever AWS credentials boto3 finds."""
    from botocore.exceptions import BotoCoreError, NoCredentialsError

    try:
        url = presigned_url(cluster_name, region, session, endpoint_url)
    except NoCredentialsError:
        raise UserError(
            f"EKS cluster {cluster_name} ({region}): no AWS credentials found; accepted: "
            "credentials boto3 can find (AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
            "SSO, an instance role)"
        ) from None
    except BotoCoreError as e:
        raise UserError(
            f"EKS cluster {cluster_name} ({region}): cannot sign a token ({type(e).__name__})"
        ) from None
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def decode_token(token: str) -> str:
    """The presigned URL inside a token (what the cluster's authenticator does first)."""
    if not token.startswith(TOKEN_PREFIX):
        raise ValueError("not an EKS token")
    body = token[len(TOKEN_PREFIX) :]
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()


def describe_cluster(
    cluster_name: str, region: str, session: Any = None, endpoint_url: str | None = None
) -> tuple[str, str]:
    """(API server URL, base64 CA data) of an EKS cluster, for stacks that export neither."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    session = session or boto3.session.Session()
    try:
        c = session.client("eks", region_name=region, endpoint_url=endpoint_url).describe_cluster(
            name=cluster_name
        )["cluster"]
    except ClientError as e:
        raise UserError(
            f"EKS cluster {cluster_name} ({region}): "
            f"{e.response['Error'].get('Code')}: {e.response['Error'].get('Message')}"
        ) from None
    except BotoCoreError as e:
        raise UserError(
            f"EKS cluster {cluster_name} ({region}): cannot describe it ({type(e).__name__})"
        ) from None
    return c["endpoint"], c["certificateAuthority"]["data"]


def configure(out: StackOutput, cfg: Any) -> None:
    """Fill a `kubernetes` Configuration for the stack's `auth` (method `eks-token`): its
    address and CA (looked up when the output lacks them) and a bearer token renewed before
    every request needs it."""
    auth = out.auth
    assert auth is not None and auth.method == "eks-token"  # auth.credentials picks us only then
    if auth.region is None:
        raise UserError(f"stack {out.stack}: auth.region = None; accepted: the EKS cluster's AWS region")
    endpoint, ca = auth.server, auth.certificate_authority
    if not endpoint or not ca:
        endpoint, ca = describe_cluster(auth.cluster, auth.region)
    cfg.host = endpoint
    cfg.ssl_ca_cert = private_file(base64.b64decode(ca), ".crt")
    token = Token(auth.cluster, auth.region)
    # kubernetes-client/python v36 (kubernetes/client/configuration.py, auth_settings and
    # get_api_key_with_prefix): the header is sent only if api_key already holds
    # 'BearerToken' (or the legacy 'authorization'), the refresh hook runs only then, and
    # the prefix is read under 'BearerToken'. So seed the token under that key.
    cfg.api_key_prefix["BearerToken"] = "Bearer"
    cfg.api_key["BearerToken"] = token.value()

    def refresh(c: Any) -> None:  # called before every request's headers are made
        c.api_key["BearerToken"] = token.value()

    cfg.refresh_api_key_hook = refresh


class Token:
    """A token that renews itself before EKS would reject it (long `--follow` sessions)."""

    def __init__(self, cluster_name: str, region: str, session: Any = None, endpoint_url: str | None = None):
        self.args = (cluster_name, region, session, endpoint_url)
        self._value, self._made = "", 0.0

    def value(self) -> str:
        if not self._value or time.monotonic() - self._made > REFRESH_AFTER_S:
            self._value, self._made = get_token(*self.args), time.monotonic()
        return self._value
