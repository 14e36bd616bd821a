"""The object store under Pulumi's mocks: AWS's bucket and its policies, IRSA for the job service account, on-prem endpoints, config errors.

The tests here render a stack, start a process or take over a second; the in-process ones
are in `tests/unit/infra/test_infra_object_store.py`."""

from __future__ import annotations

import json
import re

import pytest
from infra_helpers import STACKS, deployer_sets, render, resources

from alchemist_jobs.contract import JOB_SERVICE_ACCOUNT, OBJECT_STORE_SECRET, StackOutput


def by_type(r, suffix):
    return [x for x in resources(r) if x["type"].endswith(suffix)]


def test_aws_bucket_is_encrypted_private_tls_only_and_exported(renders):
    r = renders["aws-us-west-2"]
    (bucket,) = by_type(r, ":Bucket")
    out = StackOutput.parse(r["outputs"]["alchemist"], "aws-us-west-2").object_store
    assert out is not None and out.endpoint is None and out.region == "us-west-2"
    assert out.bucket.startswith("alchemist-aws-us-west-2-data-")
    assert bucket["inputs"]["bucketPrefix"] == "alchemist-aws-us-west-2-data-"

    (sse,) = by_type(r, ":BucketServerSideEncryptionConfiguration")
    assert sse["inputs"]["bucket"] == out.bucket
    assert sse["inputs"]["rules"] == [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}]

    (block,) = by_type(r, ":BucketPublicAccessBlock")
    assert {
        k: block["inputs"][k]
        for k in (
            "blockPublicAcls",
            "blockPublicPolicy",
            "ignorePublicAcls",
            "restrictPublicBuckets",
            "bucket",
        )
    } == {
        "blockPublicAcls": True,
        "blockPublicPolicy": True,
        "ignorePublicAcls": True,
        "restrictPublicBuckets": True,
        "bucket": out.bucket,
    }
    (owner,) = by_type(r, ":BucketOwnershipControls")
    assert owner["inputs"]["rule"] == {"objectOwnership": "BucketOwnerEnforced"}

    (policy,) = by_type(r, ":BucketPolicy")
    doc = json.loads(policy["inputs"]["policy"])
    arn = f"arn:aws:s3:::{out.bucket}"
    assert doc["Statement"] == [
        {
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": [arn, f"{arn}/*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }
    ]

    (lifecycle,) = by_type(r, ":BucketLifecycleConfiguration")
    (rule,) = lifecycle["inputs"]["rules"]
    assert rule["status"] == "Enabled" and rule["abortIncompleteMultipartUpload"] == {
        "daysAfterInitiation": 7
    }


def test_aws_job_service_account_of_each_team_gets_bucket_access_through_irsa(renders):
    r = renders["aws-us-west-2"]
    bucket = r["outputs"]["alchemist"]["object_store"]["bucket"]
    arn = f"arn:aws:s3:::{bucket}"
    teams = ["research", "applied"]
    # The team namespace owns the job ServiceAccount; the object store only annotates it (a
    # second ServiceAccount object of the same name would fail `pulumi up` with AlreadyExists).
    sas = {
        x["inputs"]["metadata"]["namespace"]: x["inputs"]
        for x in by_type(r, ":ServiceAccountPatch")
        if x["inputs"]["metadata"]["name"] == JOB_SERVICE_ACCOUNT
    }
    assert sorted(sas) == sorted(teams)
    roles = {x["name"]: x for x in by_type(r, "iam/role:Role")}
    for team in teams:
        role_arn = sas[team]["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
        role = roles[role_arn.rsplit("/", 1)[1]]
        (statement,) = json.loads(role["inputs"]["assumeRolePolicy"])["Statement"]
        assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
        (cond,) = statement["Condition"].values()
        subs = {k.rsplit(":", 1)[1]: v for k, v in cond.items()}
        assert subs == {
            "sub": f"system:serviceaccount:{team}:{JOB_SERVICE_ACCOUNT}",
            "aud": "sts.amazonaws.com",
        }
    access = {
        x["name"]: json.loads(x["inputs"]["policy"])
        for x in by_type(r, "iam/rolePolicy:RolePolicy")
        if x["name"].startswith("object-store-")
    }
    assert sorted(access) == sorted(f"object-store-{t}-access" for t in teams)
    assert r["outputs"]["alchemist"]["object_store"]["prefix"] == "research/"  # the default team's
    for team in teams:
        doc = access[f"object-store-{team}-access"]
        other = next(t for t in teams if t != team)
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"):
            assert iam_allows([doc], action, f"{arn}/{team}/datasets/digits/a.npz")
            assert not iam_allows([doc], action, f"{arn}/{other}/datasets/digits/a.npz"), (team, action)
            assert not iam_allows([doc], action, f"{arn}/datasets/digits/a.npz"), (team, action)
        assert iam_allows([doc], "s3:ListBucket", arn, {"s3:prefix": f"{team}/datasets/"})
        for prefix in (f"{other}/", "", "datasets/"):
            assert not iam_allows([doc], "s3:ListBucket", arn, {"s3:prefix": prefix}), (team, prefix)
        assert not iam_allows([doc], "s3:ListBucket", arn)  # no prefix: the whole bucket
        assert not iam_allows([doc], "s3:PutBucketPolicy", arn)


def _like(pattern: str, value: str) -> bool:
    """IAM's wildcard match: `*` any run of characters, `?` one (IAM User Guide, "IAM JSON
    policy elements: Resource" and the StringLike condition operator)."""
    return (
        re.fullmatch(
            "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern),
            value,
            re.DOTALL,
        )
        is not None
    )


def _statement_matches(st: dict, action: str, resource: str, context: dict) -> bool:
    actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
    resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
    if not any(_like(a.lower(), action.lower()) for a in actions) or not any(
        _like(r, resource) for r in resources
    ):
        return False
    for op, keys in (st.get("Condition") or {}).items():
        assert op in ("StringLike", "StringEquals"), f"evaluator lacks {op}"
        for key, values in keys.items():  # keys ANDed, values ORed; an absent key never matches
            values = values if isinstance(values, list) else [values]
            if key not in context or not any(
                _like(v, context[key]) if op == "StringLike" else v == context[key] for v in values
            ):
                return False
    return True


def iam_allows(policies: list[dict], action: str, resource: str, context: dict | None = None) -> bool:
    """Identity-based policies as AWS evaluates them (IAM User Guide, "Policy evaluation logic"):
    denied by default, allowed by a matching Allow statement, unless a matching Deny."""
    statements = [
        st
        for doc in policies
        for st in doc["Statement"]
        if _statement_matches(st, action, resource, context or {})
    ]
    return any(st["Effect"] == "Allow" for st in statements) and not any(
        st["Effect"] == "Deny" for st in statements
    )


@pytest.mark.parametrize("name", ["dev", "onprem-lab"])
def test_stacks_without_object_store_config_export_none(renders, name):
    r = renders[name]
    assert "object_store" not in r["outputs"]["alchemist"]
    assert not by_type(r, ":Bucket") and not by_type(r, ":ServiceAccountPatch")


@pytest.mark.parametrize("name", ["aws-us-west-2", "dev"])
def test_one_job_service_account_object_per_namespace(renders, name):
    made = [
        (x["inputs"]["metadata"]["namespace"], x["inputs"]["metadata"]["name"])
        for x in by_type(renders[name], ":ServiceAccount")
    ]
    assert len(made) == len(set(made)), sorted(made)


def test_onprem_minio_endpoint_with_keys_in_a_secret():
    import json

    import yaml

    secret = "minio-secret-key-that-must-never-leak-2718"
    teams = yaml.safe_load((STACKS / "Pulumi.onprem-lab.yaml").read_text())["config"]["alchemist:teams"]
    teams[1]["objectStoreAccessKeyId"] = "alchemist-applied"  # each team its own key pair
    r = render(
        STACKS / "Pulumi.onprem-lab.yaml",
        sets={
            **deployer_sets("onprem-lab"),
            "alchemist:objectStore": {
                "endpoint": "https://minio.lab.internal:9000",
                "bucket": "alchemist-data",
                "region": "lab-1",
                "accessKeyId": "alchemist",
                "cidrs": ["10.20.0.9/32"],
            },
            "alchemist:teams": teams,
        },
        secrets={
            "alchemist:objectStoreSecretKey": secret,
            "alchemist:objectStoreTeamSecretKeys": json.dumps({"applied": secret + "-applied"}),
        },
    )
    assert r["error"] is None, r["error"]
    out = StackOutput.parse(r["outputs"]["alchemist"], "onprem-lab").object_store
    assert (out.endpoint, out.bucket, out.region) == (
        "https://minio.lab.internal:9000",
        "alchemist-data",
        "lab-1",
    )
    keys = {
        x["inputs"]["metadata"]["namespace"]: x
        for x in by_type(r, "core/v1:Secret")
        if x["inputs"]["metadata"]["name"] == OBJECT_STORE_SECRET
    }
    assert sorted(keys) == ["applied", "research"]
    for k in keys.values():
        # the secret key makes the whole stringData secret in the engine's eyes: masked here
        assert k["inputs"]["stringData"] == "[secret]" and k["inputs"]["type"] == "Opaque"
    assert secret not in r["_stdout"] and secret not in r["_stderr"]
    assert not by_type(r, ":Bucket")  # an existing service: nothing created in a cloud
    # Job pods reach it at the addresses the config names, on the endpoint's port, nothing more.
    store = {
        x["inputs"]["metadata"]["namespace"]: x["inputs"]["spec"]
        for x in by_type(r, ":NetworkPolicy")
        if x["inputs"]["metadata"]["name"] == "alchemist-object-store"
    }
    assert sorted(store) == ["applied", "research"]
    assert store["research"]["egress"] == [
        {"to": [{"ipBlock": {"cidr": "10.20.0.9/32"}}], "ports": [{"protocol": "TCP", "port": 9000}]}
    ]


def test_aws_pods_reach_s3_and_sts_through_interface_endpoints_of_their_own(renders):
    r = renders["aws-us-west-2"]
    endpoints = {e["inputs"]["serviceName"]: e["inputs"] for e in by_type(r, ":VpcEndpoint")}
    assert set(endpoints) == {"com.amazonaws.us-west-2.s3", "com.amazonaws.us-west-2.sts"}
    for e in endpoints.values():
        assert e["vpcEndpointType"] == "Interface" and e["privateDnsEnabled"] is True
        assert len(e["subnetIds"]) == 3  # one subnet per zone
    # No S3 gateway endpoint: private DNS must answer the VPC's own resolver (the pods') too.
    assert endpoints["com.amazonaws.us-west-2.s3"]["dnsOptions"] == {
        "privateDnsOnlyForInboundResolverEndpoint": False
    }
    (sg,) = [
        x["inputs"] for x in by_type(r, ":SecurityGroup") if x["name"].startswith("object-store-endpoints")
    ]
    assert sg["ingress"] == [
        {"protocol": "tcp", "fromPort": 443, "toPort": 443, "cidrBlocks": ["10.40.0.0/16"]}
    ]
    subnets = [
        x["inputs"]["cidrBlock"]
        for x in by_type(r, ":Subnet")
        if x["name"].startswith("object-store-endpoints")
    ]
    assert subnets == ["10.40.240.0/23", "10.40.242.0/23", "10.40.244.0/23"]
    store = {
        x["inputs"]["metadata"]["namespace"]: x["inputs"]["spec"]
        for x in by_type(r, ":NetworkPolicy")
        if x["inputs"]["metadata"]["name"] == "alchemist-object-store"
    }
    assert sorted(store) == ["applied", "research"]
    assert store["research"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/managed-by": "alchemist"}}
    assert store["research"]["egress"] == [
        {"to": [{"ipBlock": {"cidr": "10.40.240.0/20"}}], "ports": [{"protocol": "TCP", "port": 443}]}
    ]
