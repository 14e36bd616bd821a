"""The cluster token the CLI signs itself from the request the provider describes: for an EKS
cluster (the AWS provider's `auth`) it is byte for byte what the EKS token maker made before the
request was data (fixed credentials, fixed clock); no credentials is one line, and a token
renews itself. The tests against moto (the token's replay as the cluster's authenticator does
it, the server and CA looked up) are in tests/integration/k8s/test_k8s_presigned_token_moto.py."""

from __future__ import annotations

import datetime
from unittest import mock

import boto3
import pytest

from alchemist_jobs.contract import ClusterAuth
from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes import presigned_token
from infra.providers.aws.auth import cluster_auth

CLUSTER = "alchemist-aws-us-west-2"
ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"  # botocore's documentation example pair, not a real key
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AT = datetime.datetime(2026, 1, 2, 3, 4, 5)
# What alchemist_jobs/kubernetes/eks_auth.py (as of b2f994f, which matched `aws eks get-token`)
# made for CLUSTER in us-west-2 with these credentials at AT.
TOKEN = (
    "k8s-aws-v1.aHR0cHM6Ly9zdHMudXMtd2VzdC0yLmFtYXpvbmF3cy5jb20vP0FjdGlvbj1HZXRDYWxsZXJJZGVudGl0eSZWZXJzaW9u"
    "PTIwMTEtMDYtMTUmWC1BbXotQWxnb3JpdGhtPUFXUzQtSE1BQy1TSEEyNTYmWC1BbXotQ3JlZGVudGlhbD1BS0lBSU9TRk9ETk43RVhBTVBM"
    "RSUyRjIwMjYwMTAyJTJGdXMtd2VzdC0yJTJGc3RzJTJGYXdzNF9yZXF1ZXN0JlgtQW16LURhdGU9MjAyNjAxMDJUMDMwNDA1WiZYLUFtei1F"
    "eHBpcmVzPTYwJlgtQW16LVNpZ25lZEhlYWRlcnM9aG9zdCUzQngtazhzLWF3cy1pZCZYLUFtei1TaWduYXR1cmU9NTQ2MWM1ZDBjMmE1ZDY5"
    "NzEzOWM2NjlmOTc2ZTcwNDNiZmY0YmE5MjkxNjc0NzcwYTFjNzY3MGM2MDI2M2JmNw"
)


def _session() -> boto3.session.Session:
    return boto3.session.Session(aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)


def eks_auth(cluster: str = CLUSTER, region: str = "us-west-2") -> ClusterAuth:
    """What the AWS provider writes into the contract for an EKS cluster."""
    return ClusterAuth.model_validate(cluster_auth(cluster, region))


def test_the_token_for_an_eks_cluster_is_what_it_was():
    with mock.patch("botocore.auth.get_current_datetime", return_value=AT):
        assert presigned_token.get_token(eks_auth(), "us-west-2", _session()) == TOKEN


def test_no_credentials_is_one_line(monkeypatch, tmp_path):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(UserError) as e:
        presigned_token.get_token(eks_auth(), "us-west-2")
    assert str(e.value) == (
        f"EKS cluster {CLUSTER} (us-west-2): no credentials found to sign its token; accepted: "
        + presigned_token.CREDENTIALS
    )


def test_the_token_renews_itself(monkeypatch):
    made = []
    monkeypatch.setattr(presigned_token, "get_token", lambda *a: made.append(a) or f"t{len(made)}")
    t = presigned_token.Token(eks_auth(), "us-west-2")
    assert t.refresh_after_s == 600  # two thirds of the 15 minutes EKS accepts a token for
    assert t.value() == t.value() == "t1"
    t._made -= t.refresh_after_s + 1
    assert t.value() == "t2"


def test_an_output_cannot_have_the_cli_presign_a_request_that_gives_credentials_away():
    """The token goes to whatever server the output names. A presigned STS GetSessionToken URL
    would hand that server the user's temporary credentials (it needs no parameters), so the
    CLI presigns only requests that tell an authenticator who calls and nothing more."""
    auth = eks_auth()
    assert auth.request is not None
    bad = auth.model_copy(
        update={"request": auth.request.model_copy(update={"operation": "get_session_token"})}
    )
    with pytest.raises(UserError) as e:
        presigned_token.get_token(bad, "us-west-2", _session())
    assert str(e.value) == (
        "auth.request = sts.get_session_token: not a request this alchemist presigns for a cluster; "
        "accepted: sts.get_caller_identity"
    )


def test_an_output_cannot_have_the_cli_call_anything_but_a_describe_for_its_address():
    """`auth.lookup` runs with the user's credentials: only a read (`describe_*`), never a call
    that changes something."""
    auth = eks_auth()
    assert auth.lookup is not None
    bad = auth.lookup.model_copy(
        update={"service": "iam", "operation": "create_user", "params": {"UserName": "x"}}
    )
    with pytest.raises(UserError) as e:
        presigned_token.describe_cluster(auth, bad, "us-west-2", _session())
    assert str(e.value) == (
        "auth.lookup.operation = 'create_user': not a read; accepted: a describe_* operation"
    )
