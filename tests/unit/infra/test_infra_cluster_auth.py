"""The contract's neutral credential description (`auth`), both ways: what the AWS provider
exports is what the jobs half reads and signs a token for, and an output written by an older
version (with `eks`, or the `eks-token` method) is one line telling to refresh it."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from alchemist_jobs.contract import StackOutput
from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes import presigned_token
from alchemist_jobs.kubernetes.auth import credentials
from infra.cluster_facts import ClusterFacts, Registry
from infra.providers import get
from infra.providers.aws.auth import TOKEN_PREFIX
from infra.providers.aws.facts import AwsCloud, AwsNetwork, EksFacts

# `pulumi stack output alchemist` of an AWS stack as the program writes it
OUTPUT = Path(__file__).resolve().parents[2] / "fixtures" / "stack_outputs" / "aws-us-west-2.json"
SERVER = "https://0A1B2C3D4E5F60718293A4B5C6D7E8F9.gr7.us-west-2.eks.amazonaws.com"
CA = base64.b64encode(b"FAKE-EKS-CA").decode()


def _facts(eks: EksFacts) -> ClusterFacts:
    net = AwsNetwork(aws_provider=None, region=eks.region, vpc_id="vpc-1", vpc_cidr="10.0.0.0/16",
                     private_subnet_ids=[], oidc_provider_arn="arn", oidc_provider_url="https://oidc",
                     node_security_group_id="sg-1")  # fmt: skip
    return ClusterFacts(provider=None, kubeconfig=None, gpus_per_node=0, gpu_driver_by_operator=False,
                        toolkit_by_operator=False, registry=Registry(prefix="", host=""),
                        cloud=AwsCloud(network=net, eks=eks))  # fmt: skip


def _output() -> dict:
    return json.loads(OUTPUT.read_text())


def test_the_aws_providers_access_is_an_auth_the_jobs_half_signs_a_token_for(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE00")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret-key")
    eks = EksFacts(cluster_name="alchemist-aws-us-west-2", region="us-west-2", endpoint=SERVER,
                   certificate_authority=CA)  # fmt: skip
    access = get("aws").jobs_access(None, _facts(eks), None, None)  # type: ignore[arg-type]
    assert set(access) == {"auth"}
    data = _output() | access
    out = StackOutput.parse(data, "test")
    assert out.auth is not None and out.auth.method == "presigned-request"
    assert (out.auth.cluster, out.auth.region, out.auth.server, out.auth.certificate_authority) == (
        "alchemist-aws-us-west-2", "us-west-2", SERVER, CA,
    )  # fmt: skip
    cfg = credentials(out)
    assert cfg.host == SERVER and Path(cfg.ssl_ca_cert).read_bytes() == b"FAKE-EKS-CA"
    token = cfg.api_key["BearerToken"]
    url = presigned_token.decode_token(token, TOKEN_PREFIX)
    assert "sts.us-west-2.amazonaws.com" in url and "x-k8s-aws-id" in url


# An output as the program wrote it before `auth` existed: `eks` where `auth` is now.
OLD_EKS = {
    "cluster_name": "alchemist-aws-us-west-2",
    "region": "us-west-2",
    "endpoint": SERVER,
    "certificate_authority": CA,
}


def test_an_output_written_with_eks_is_one_line_telling_to_refresh_it():
    old = {k: v for k, v in _output().items() if k != "auth"} | {"eks": OLD_EKS}
    with pytest.raises(UserError) as e:
        StackOutput.parse(old, "stack aws-us-west-2")
    assert str(e.value) == (
        "stack aws-us-west-2: stack output `alchemist` has `eks`, which this alchemist's contract does not "
        "have (the output was written by another version); accepted: the output as this version writes it: "
        "run `pulumi up -s aws-us-west-2` to refresh it"
    )


def test_an_output_written_with_the_eks_token_method_is_one_line_telling_to_refresh_it():
    old = _output() | {
        "auth": {"method": "eks-token", "cluster": "alchemist-aws-us-west-2", "region": "us-west-2"}
    }
    out = StackOutput.parse(old, "test")
    with pytest.raises(UserError) as e:
        credentials(out)
    assert str(e.value) == (
        "stack aws-us-west-2: auth.method = 'eks-token' is not known to this alchemist; accepted: "
        "'presigned-request' (or a kubeconfig; run `pulumi up -s aws-us-west-2` to refresh an output "
        "written by another version)"
    )


def test_an_unknown_auth_method_is_one_line_naming_the_known_ones():
    data = _output() | {"auth": {"method": "gke-token", "cluster": "x"}}
    out = StackOutput.parse(data, "test")
    with pytest.raises(UserError) as e:
        credentials(out)
    assert str(e.value) == (f"stack {out.stack}: auth.method = 'gke-token' is not known to this alchemist; "
                            "accepted: 'presigned-request' (or a kubeconfig; run `pulumi up -s aws-us-west-2` "
                            "to refresh an output written by another version)")  # fmt: skip


def test_the_aws_providers_fabric_is_the_contracts_fabric():
    """What the AWS provider says of EFA nodes is a `gpu.fabric` the jobs half reads; without EFA
    the output has none (other providers say nothing)."""
    from dataclasses import replace

    from alchemist_jobs.contract import Fabric

    facts = replace(_facts(EksFacts("c", "us-west-2")), fabric_per_node=4, fabric_rdma_read=True)
    fabric = Fabric.model_validate(get("aws").network_fabric(facts))
    assert (fabric.resource, fabric.per_node, fabric.gbit_per_device) == ("vpc.amazonaws.com/efa", 4, 100.0)
    assert fabric.nccl_env["FI_EFA_USE_DEVICE_RDMA"] == "1" and fabric.nccl_env["NCCL_NET_PLUGIN"] == "ofi"
    assert get("aws").network_fabric(replace(facts, fabric_per_node=0)) is None
    assert get("kind").network_fabric(facts) is None
