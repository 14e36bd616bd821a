"""Cluster access by a presigned request (auth method `presigned-request`): the bearer token is
a cloud API request the CLI presigns with the user's own identity (boto3, imported on first use).

The stack output's `auth.request` (alchemist_jobs.contract.SignedRequest, written by the
provider's package) says which request: its service and operation, a header the signature must
cover, the token's prefix and lifetimes. The token is `token_prefix` + base64url (unpadded) of
the presigned URL; the cluster's authenticator replays the URL to learn who is calling. `Token`
renews it well before the cluster would reject it.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from alchemist_jobs.contract import ClusterAuth, ClusterLookup, SignedRequest, StackOutput
from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes.auth import private_file

# The requests the CLI presigns for a cluster. The token goes to whatever server the output
# names, so only a request that tells an authenticator who calls and gives nothing else away:
# a presigned GetSessionToken, say, would hand that server the user's temporary credentials.
SIGNABLE = (("sts", "get_caller_identity"),)
CREDENTIALS = (
    "credentials boto3 can find (AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, SSO, an instance role)"
)


def _signing_client(
    request: SignedRequest, region: str, session: Any = None, endpoint_url: str | None = None
):
    import boto3

    session = session or boto3.session.Session()
    # botocore resolves the service's regional endpoint.
    client = session.client(request.service, region_name=region, endpoint_url=endpoint_url)
    header = request.header
    if header is None:
        return client
    event = client.meta.method_to_api_mapping[request.operation]  # GetCallerIdentity
    prefix = client.meta.service_model.service_id.hyphenize()

    # The operation has no such parameter: carry the header's value from the call's params to
    # the request context, then into a header before signing (as awscli's get_token does).
    def take_header(params: dict, context: dict, **_: Any) -> None:
        if header in params:
            context[header] = params.pop(header)

    def add_header(request: Any, **_: Any) -> None:
        if header in request.context:
            request.headers[header] = request.context[header]

    client.meta.events.register(f"provide-client-params.{prefix}.{event}", take_header)
    client.meta.events.register(f"before-sign.{prefix}.{event}", add_header)
    return client


def presigned_url(
    request: SignedRequest, region: str, session: Any = None, endpoint_url: str | None = None
) -> str:
    client = _signing_client(request, region, session, endpoint_url)
    params = {request.header: request.header_value} if request.header else {}
    return client.generate_presigned_url(
        request.operation, Params=params, ExpiresIn=request.expires_s, HttpMethod="GET"
    )


def get_token(auth: ClusterAuth, region: str, session: Any = None, endpoint_url: str | None = None) -> str:
    """A bearer token for the cluster, from whatever credentials boto3 finds."""
    from botocore.exceptions import BotoCoreError, NoCredentialsError

    assert auth.request is not None  # configure() checks it
    request = auth.request
    if (request.service, request.operation) not in SIGNABLE:
        raise UserError(
            f"auth.request = {request.service}.{request.operation}: not a request this alchemist "
            f"presigns for a cluster; accepted: {', '.join(f'{s}.{o}' for s, o in SIGNABLE)}"
        )
    try:
        url = presigned_url(auth.request, region, session, endpoint_url)
    except NoCredentialsError:
        raise UserError(
            f"{auth.label} {auth.cluster} ({region}): no credentials found to sign its token; "
            f"accepted: {CREDENTIALS}"
        ) from None
    except BotoCoreError as e:
        raise UserError(
            f"{auth.label} {auth.cluster} ({region}): cannot sign a token ({type(e).__name__})"
        ) from None
    return auth.request.token_prefix + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def decode_token(token: str, prefix: str) -> str:
    """The presigned URL inside a token (what the cluster's authenticator does first)."""
    if not token.startswith(prefix):
        raise ValueError(f"not a token that starts with {prefix!r}")
    body = token[len(prefix) :]
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()


def _field(response: Any, path: str) -> Any:
    for key in path.split("."):
        response = response[key]
    return response


def describe_cluster(
    auth: ClusterAuth,
    lookup: ClusterLookup,
    region: str,
    session: Any = None,
    endpoint_url: str | None = None,
) -> tuple[str, str]:
    """(API server URL, base64 CA data) of the cluster, for stacks that export neither."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    if not lookup.operation.startswith("describe_"):  # it runs with the user's credentials
        raise UserError(
            f"auth.lookup.operation = {lookup.operation!r}: not a read; accepted: a describe_* operation"
        )
    session = session or boto3.session.Session()
    where = f"{auth.label} {auth.cluster} ({region})"
    try:
        client = session.client(lookup.service, region_name=region, endpoint_url=endpoint_url)
        response = getattr(client, lookup.operation)(**lookup.params)
    except ClientError as e:
        raise UserError(
            f"{where}: {e.response['Error'].get('Code')}: {e.response['Error'].get('Message')}"
        ) from None
    except (BotoCoreError, AttributeError) as e:
        raise UserError(f"{where}: cannot describe it ({type(e).__name__})") from None
    try:
        return _field(response, lookup.server_field), _field(response, lookup.certificate_authority_field)
    except (KeyError, TypeError):
        raise UserError(
            f"{where}: auth.lookup: the answer to {lookup.operation} has no "
            f"{lookup.server_field} or {lookup.certificate_authority_field}"
        ) from None


def configure(out: StackOutput, cfg: Any) -> None:
    """Fill a `kubernetes` Configuration for the stack's `auth` (method `presigned-request`): its
    address and CA (looked up when the output lacks them) and a bearer token renewed before
    every request needs it."""
    auth = out.auth
    assert auth is not None  # auth.credentials picks us only then
    if auth.request is None:
        raise UserError(
            f"stack {out.stack}: auth.request = None; accepted: the request to presign "
            f"(run `pulumi up -s {out.stack}` to refresh the stack's output)"
        )
    if auth.region is None:
        raise UserError(
            f"stack {out.stack}: auth.region = None; accepted: the region of the {auth.label}'s API"
        )
    endpoint, ca = auth.server, auth.certificate_authority
    if not endpoint or not ca:
        if auth.lookup is None:
            raise UserError(
                f"stack {out.stack}: auth.server and auth.certificate_authority are absent and "
                "auth.lookup = None; accepted: the server and CA, or how to look them up"
            )
        endpoint, ca = describe_cluster(auth, auth.lookup, auth.region)
    cfg.host = endpoint
    cfg.ssl_ca_cert = private_file(base64.b64decode(ca), ".crt")
    token = Token(auth, auth.region)
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
    """A token that renews itself after two thirds of the lifetime the cluster accepts (long
    `--follow` sessions)."""

    def __init__(self, auth: ClusterAuth, region: str, session: Any = None, endpoint_url: str | None = None):
        assert auth.request is not None
        self.args = (auth, region, session, endpoint_url)
        self.refresh_after_s = auth.request.token_lifetime_s * 2 // 3
        self._value, self._made = "", 0.0

    def value(self) -> str:
        if not self._value or time.monotonic() - self._made > self.refresh_after_s:
            self._value, self._made = get_token(*self.args), time.monotonic()
        return self._value
