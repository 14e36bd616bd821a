"""Presigned-request bearer tokens for an EKS cluster (the AWS provider's `auth`) against moto's
STS and EKS (about a second each on a loaded machine)."""

from __future__ import annotations

import base64
from urllib.parse import parse_qs, urlparse

import boto3
import pytest
from moto import mock_aws

from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes import presigned_token
from alchemist_jobs.kubernetes.auth import credentials
from infra.providers.aws.auth import TOKEN_PREFIX, cluster_auth
from tests.k8s_stacks import stack
from tests.unit.k8s.test_k8s_presigned_token import CLUSTER, eks_auth


def decode(token: str) -> str:
    return presigned_token.decode_token(token, TOKEN_PREFIX)


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """Fake credentials only: nothing may reach real AWS."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)


@mock_aws
def test_the_token_round_trips_to_the_presigned_sts_url(aws_env):
    token = presigned_token.get_token(eks_auth(), "us-west-2")
    assert token.startswith("k8s-aws-v1.") and "=" not in token
    # Unpadded base64url, as `aws eks get-token` emits it.
    body = token[len("k8s-aws-v1.") :]
    assert base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode() == decode(token)
    url = urlparse(decode(token))
    q = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert url.scheme == "https" and url.netloc == "sts.us-west-2.amazonaws.com"
    assert q["Action"] == "GetCallerIdentity" and q["Version"] == "2011-06-15"
    assert q["X-Amz-Expires"] == "60"
    assert q["X-Amz-SignedHeaders"].split(";") == ["host", "x-k8s-aws-id"]
    assert q["X-Amz-Credential"].endswith("/us-west-2/sts/aws4_request")
    # The cluster name is not in the URL: it is a signed header, so a token for one cluster
    # does not verify for another.
    assert CLUSTER not in url.query
    other = urlparse(decode(presigned_token.get_token(eks_auth("other"), "us-west-2")))
    assert parse_qs(other.query)["X-Amz-Signature"] != parse_qs(url.query)["X-Amz-Signature"]


@mock_aws
def test_the_authenticator_replay_succeeds_against_moto_sts(aws_env):
    """EKS's authenticator GETs the URL with the x-k8s-aws-id header and reads the caller's
    ARN; moto (which intercepts HTTP to AWS endpoints in process) answers it as STS does."""
    import requests

    token = presigned_token.get_token(eks_auth(), "us-west-2")
    resp = requests.get(decode(token), headers={"x-k8s-aws-id": CLUSTER}, timeout=10)
    assert resp.status_code == 200
    assert "<GetCallerIdentityResult>" in resp.text and "<Arn>arn:aws:sts::" in resp.text


@mock_aws
def test_an_eks_stack_connects_with_a_bearer_token(aws_env):
    """The client configuration of an EKS stack: endpoint and CA looked up with boto3 when the
    output lacks them, and every request authorised by a fresh token."""
    eks = boto3.client("eks", region_name="us-west-2")
    made = eks.create_cluster(
        name=CLUSTER,
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-0a1b2c3d"]},
    )["cluster"]
    data = stack("aws-us-west-2").output.model_dump(mode="json")
    data["auth"] = cluster_auth(CLUSTER, "us-west-2")  # no server, no CA
    from alchemist_jobs.contract import StackOutput

    cfg = credentials(StackOutput.parse(data, "test"))
    assert cfg.host == made["endpoint"]
    with open(cfg.ssl_ca_cert, "rb") as f:
        assert f.read() == base64.b64decode(made["certificateAuthority"]["data"])
    # What the client itself puts in the header (auth_settings, not a helper we call).
    auth = cfg.auth_settings()["BearerToken"]["value"]
    assert auth.startswith("Bearer k8s-aws-v1.")
    url = decode(auth.removeprefix("Bearer "))
    assert "Action=GetCallerIdentity" in url


@mock_aws
def test_an_unknown_cluster_is_one_line(aws_env):
    with pytest.raises(UserError) as e:
        auth = eks_auth("nope")
        assert auth.lookup is not None
        presigned_token.describe_cluster(auth, auth.lookup, "us-west-2")
    assert "\n" not in str(e.value) and str(e.value).startswith(
        "EKS cluster nope (us-west-2): ResourceNotFoundException"
    )
