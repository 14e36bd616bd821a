"""The contract's neutral credential description (`auth`), both ways: what the AWS provider
exports is what the jobs half reads and signs a token for, and an output written before `auth`
(with `eks`) still reads as the same `auth`."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from alchemist_jobs.contract import ClusterAuth, StackOutput
from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes import eks_auth
from alchemist_jobs.kubernetes.auth import credentials
from infra.cluster_facts import ClusterFacts, Registry
from infra.providers import get
from infra.providers.aws.facts import AwsCloud, AwsNetwork, EksFacts

# `pulumi stack output alchemist` of an AWS stack as the program wrote it before `auth` existed
OLD_OUTPUT = Path(__file__).resolve().parents[2] / "fixtures" / "stack_outputs" / "aws-us-west-2.json"
SERVER = "https://0A1B2C3D4E5F60718293A4B5C6D7E8F9.gr7.us-west-2.eks.amazonaws.com"
CA = base64.b64encode(b"FAKE-EKS-CA").decode()


def _facts(eks: EksFacts) -> ClusterFacts:
    net = AwsNetwork(aws_provider=None, region=eks.region, vpc_id="vpc-1", vpc_cidr="10.0.0.0/16",
                     private_subnet_ids=[], oidc_provider_arn="arn", oidc_provider_url="https://oidc",
                     node_security_group_id="sg-1")  # fmt: skip
    return ClusterFacts(provider=None, kubeconfig=None, gpus_per_node=0, gpu_driver_by_operator=False,
                        toolkit_by_operator=False, registry=Registry(prefix="", host=""),
                        cloud=AwsCloud(network=net, eks=eks))  # fmt: skip


def _old_output() -> dict:
    return json.loads(OLD_OUTPUT.read_text())


def test_the_aws_providers_access_is_an_auth_the_jobs_half_signs_a_token_for(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE00")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret-key")
    eks = EksFacts(cluster_name="alchemist-aws-us-west-2", region="us-west-2", endpoint=SERVER,
                   certificate_authority=CA)  # fmt: skip
    access = get("aws").jobs_access(None, _facts(eks), None, None)  # type: ignore[arg-type]
    assert set(access) == {"auth"}
    data = {k: v for k, v in _old_output().items() if k != "eks"} | access
    out = StackOutput.parse(data, "test")
    assert out.auth == ClusterAuth(
        method="eks-token", cluster="alchemist-aws-us-west-2", region="us-west-2", server=SERVER,
        certificate_authority=CA,
        kubeconfig_command="aws eks update-kubeconfig --name alchemist-aws-us-west-2 --region us-west-2",
    )  # fmt: skip
    cfg = credentials(out)
    assert cfg.host == SERVER and Path(cfg.ssl_ca_cert).read_bytes() == b"FAKE-EKS-CA"
    token = cfg.api_key["BearerToken"]
    url = eks_auth.decode_token(token)
    assert "sts.us-west-2.amazonaws.com" in url and "x-k8s-aws-id" in url


def test_an_output_written_with_eks_reads_as_the_same_auth():
    old = _old_output()
    assert "eks" in old and "auth" not in old
    out = StackOutput.parse(old, "test")
    eks = old["eks"]
    new = EksFacts(eks["cluster_name"], eks["region"], eks["endpoint"], eks["certificate_authority"]).output()
    assert out.auth == ClusterAuth.model_validate(new)
    assert "eks" not in out.model_dump()


def test_an_output_with_both_eks_and_auth_is_one_line():
    data = _old_output() | {"auth": {"method": "eks-token", "cluster": "x"}}
    with pytest.raises(UserError) as e:
        StackOutput.parse(data, "stack aws-us-west-2")
    assert str(e.value) == ("stack aws-us-west-2: stack output `alchemist` breaks the contract at (top level): "
                            "Value error, `eks` (written before `auth`) and `auth` together; accepted: one of them")  # fmt: skip


def test_an_unknown_auth_method_is_one_line_naming_the_known_ones():
    data = {k: v for k, v in _old_output().items() if k != "eks"} | {
        "auth": {"method": "gke-token", "cluster": "x"}
    }
    out = StackOutput.parse(data, "test")
    with pytest.raises(UserError) as e:
        credentials(out)
    assert str(e.value) == (f"stack {out.stack}: auth.method = 'gke-token' is not known to this alchemist; "
                            "accepted: 'eks-token' (or a kubeconfig)")  # fmt: skip
