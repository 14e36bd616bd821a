"""EKS tokens without the aws CLI: no credentials is one line, and a token renews itself. The
tests against moto (AWS emulated in process: the token's presigned STS URL, its replay as
the cluster's authenticator does it) are in tests/integration/k8s/test_k8s_eks_auth_moto.py."""

from __future__ import annotations

import pytest

from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes import eks_auth

CLUSTER = "alchemist-aws-us-west-2"


def test_no_credentials_is_one_line(monkeypatch, tmp_path):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(UserError) as e:
        eks_auth.get_token(CLUSTER, "us-west-2")
    assert str(e.value).startswith(f"EKS cluster {CLUSTER} (us-west-2): no AWS credentials found")


def test_the_token_renews_itself(monkeypatch):
    made = []
    monkeypatch.setattr(eks_auth, "get_token", lambda *a: made.append(a) or f"t{len(made)}")
    t = eks_auth.Token(CLUSTER, "us-west-2")
    assert t.value() == t.value() == "t1"
    t._made -= eks_auth.REFRESH_AFTER_S + 1
    assert t.value() == "t2"
