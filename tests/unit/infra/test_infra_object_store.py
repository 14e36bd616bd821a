"""The object store under Pulumi's mocks: AWS's bucket and its policies, IRSA for the job service account, on-prem endpoints, config errors.

The rendered program runs for real; only the engine and AWS are mocked (infra/render.py). What
S3 does with these inputs is AWS's documented behaviour: a bucket policy denying
`aws:SecureTransport = false` refuses plain HTTP, the four public-access-block flags refuse
public ACLs and policies, `BucketOwnerEnforced` disables ACLs.
"""

from __future__ import annotations

import json
import re

import pytest
from infra_helpers import STACKS, deployer_sets, render, resources

from alchemist_jobs.contract import JOB_SERVICE_ACCOUNT, OBJECT_STORE_SECRET, StackOutput
from infra.config import StackConfigError, parse, pulumi_value
from infra.object_store import bucket_prefix


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
    assert {k: block["inputs"][k] for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                            "restrictPublicBuckets", "bucket")} == {
        "blockPublicAcls": True, "blockPublicPolicy": True, "ignorePublicAcls": True,
        "restrictPublicBuckets": True, "bucket": out.bucket}
    (owner,) = by_type(r, ":BucketOwnershipControls")
    assert owner["inputs"]["rule"] == {"objectOwnership": "BucketOwnerEnforced"}

    (policy,) = by_type(r, ":BucketPolicy")
    doc = json.loads(policy["inputs"]["policy"])
    arn = f"arn:aws:s3:::{out.bucket}"
    assert doc["Statement"] == [{
        "Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
        "Resource": [arn, f"{arn}/*"], "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]

    (lifecycle,) = by_type(r, ":BucketLifecycleConfiguration")
    (rule,) = lifecycle["inputs"]["rules"]
    assert rule["status"] == "Enabled" and rule["abortIncompleteMultipartUpload"] == {"daysAfterInitiation": 7}


def test_aws_job_service_account_of_each_team_gets_bucket_access_through_irsa(renders):
    r = renders["aws-us-west-2"]
    bucket = r["outputs"]["alchemist"]["object_store"]["bucket"]
    arn = f"arn:aws:s3:::{bucket}"
    teams = ["research", "applied"]
    # The team namespace owns the job ServiceAccount; the object store only annotates it (a
    # second ServiceAccount object of the same name would fail `pulumi up` with AlreadyExists).
    sas = {x["inputs"]["metadata"]["namespace"]: x["inputs"] for x in by_type(r, ":ServiceAccountPatch")
           if x["inputs"]["metadata"]["name"] == JOB_SERVICE_ACCOUNT}
    assert sorted(sas) == sorted(teams)
    roles = {x["name"]: x for x in by_type(r, "iam/role:Role")}
    for team in teams:
        role_arn = sas[team]["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
        role = roles[role_arn.rsplit("/", 1)[1]]
        (statement,) = json.loads(role["inputs"]["assumeRolePolicy"])["Statement"]
        assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
        (cond,) = statement["Condition"].values()
        subs = {k.rsplit(":", 1)[1]: v for k, v in cond.items()}
        assert subs == {"sub": f"system:serviceaccount:{team}:{JOB_SERVICE_ACCOUNT}", "aud": "sts.amazonaws.com"}
    access = {x["name"]: json.loads(x["inputs"]["policy"]) for x in by_type(r, "iam/rolePolicy:RolePolicy")
              if x["name"].startswith("object-store-")}
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
    return re.fullmatch("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern),
                        value, re.DOTALL) is not None


def _statement_matches(st: dict, action: str, resource: str, context: dict) -> bool:
    actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
    resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
    if not any(_like(a.lower(), action.lower()) for a in actions) or not any(_like(r, resource) for r in resources):
        return False
    for op, keys in (st.get("Condition") or {}).items():
        assert op in ("StringLike", "StringEquals"), f"evaluator lacks {op}"
        for key, values in keys.items():  # keys ANDed, values ORed; an absent key never matches
            values = values if isinstance(values, list) else [values]
            if key not in context or not any(_like(v, context[key]) if op == "StringLike" else v == context[key]
                                             for v in values):
                return False
    return True


def iam_allows(policies: list[dict], action: str, resource: str, context: dict | None = None) -> bool:
    """Identity-based policies as AWS evaluates them (IAM User Guide, "Policy evaluation logic"):
    denied by default, allowed by a matching Allow statement, unless a matching Deny."""
    statements = [st for doc in policies for st in doc["Statement"]
                  if _statement_matches(st, action, resource, context or {})]
    return any(st["Effect"] == "Allow" for st in statements) and not any(st["Effect"] == "Deny" for st in statements)


@pytest.mark.parametrize("name", ["dev", "onprem-lab"])
def test_stacks_without_object_store_config_export_none(renders, name):
    r = renders[name]
    assert "object_store" not in r["outputs"]["alchemist"]
    assert not by_type(r, ":Bucket") and not by_type(r, ":ServiceAccountPatch")


@pytest.mark.parametrize("name", ["aws-us-west-2", "dev"])
def test_one_job_service_account_object_per_namespace(renders, name):
    made = [(x["inputs"]["metadata"]["namespace"], x["inputs"]["metadata"]["name"])
            for x in by_type(renders[name], ":ServiceAccount")]
    assert len(made) == len(set(made)), sorted(made)


def test_onprem_minio_endpoint_with_keys_in_a_secret():
    import json

    import yaml

    secret = "minio-secret-key-that-must-never-leak-2718"
    teams = yaml.safe_load((STACKS / "Pulumi.onprem-lab.yaml").read_text())["config"]["alchemist:teams"]
    teams[1]["objectStoreAccessKeyId"] = "alchemist-applied"  # each team its own key pair
    r = render(STACKS / "Pulumi.onprem-lab.yaml",
               sets={**deployer_sets("onprem-lab"), "alchemist:objectStore": {"endpoint": "https://minio.lab.internal:9000", "bucket": "alchemist-data",
                                               "region": "lab-1", "accessKeyId": "alchemist",
                                               "cidrs": ["10.20.0.9/32"]}, "alchemist:teams": teams},
               secrets={"alchemist:objectStoreSecretKey": secret,
                        "alchemist:objectStoreTeamSecretKeys": json.dumps({"applied": secret + "-applied"})})
    assert r["error"] is None, r["error"]
    out = StackOutput.parse(r["outputs"]["alchemist"], "onprem-lab").object_store
    assert (out.endpoint, out.bucket, out.region) == ("https://minio.lab.internal:9000", "alchemist-data", "lab-1")
    keys = {x["inputs"]["metadata"]["namespace"]: x for x in by_type(r, "core/v1:Secret")
            if x["inputs"]["metadata"]["name"] == OBJECT_STORE_SECRET}
    assert sorted(keys) == ["applied", "research"]
    for k in keys.values():
        # the secret key makes the whole stringData secret in the engine's eyes: masked here
        assert k["inputs"]["stringData"] == "[secret]" and k["inputs"]["type"] == "Opaque"
    assert secret not in r["_stdout"] and secret not in r["_stderr"]
    assert not by_type(r, ":Bucket")  # an existing service: nothing created in a cloud
    # Job pods reach it at the addresses the config names, on the endpoint's port, nothing more.
    store = {x["inputs"]["metadata"]["namespace"]: x["inputs"]["spec"] for x in by_type(r, ":NetworkPolicy")
             if x["inputs"]["metadata"]["name"] == "alchemist-object-store"}
    assert sorted(store) == ["applied", "research"]
    assert store["research"]["egress"] == [{"to": [{"ipBlock": {"cidr": "10.20.0.9/32"}}],
                                            "ports": [{"protocol": "TCP", "port": 9000}]}]


def _cfg(provider_file: str, store: dict | None, secret: str | None = None) -> None:
    import yaml

    raw = yaml.safe_load((STACKS / provider_file).read_text())["config"]
    if store is not None:
        raw["alchemist:objectStore"] = store
    config = {k: pulumi_value(v) for k, v in raw.items()}
    secret_keys = set()
    if secret is not None:
        config["alchemist:objectStoreSecretKey"] = secret
        secret_keys.add("alchemist:objectStoreSecretKey")
    parse(config, secret_keys)


@pytest.mark.parametrize("stack_file,store,secret,message", [
    ("Pulumi.aws-us-west-2.yaml", {"endpoint": "https://minio:9000"}, None,
     "alchemist:objectStore.endpoint"),
    ("Pulumi.onprem-lab.yaml", {"bucket": "data"}, None, "alchemist:objectStore.endpoint"),
    ("Pulumi.onprem-lab.yaml", {"endpoint": "https://minio:9000"}, None, "alchemist:objectStore.bucket"),
    ("Pulumi.onprem-lab.yaml", {"endpoint": "minio:9000", "bucket": "data"}, None, "alchemist:objectStore.endpoint"),
    ("Pulumi.onprem-lab.yaml", {"endpoint": "https://minio:9000", "bucket": "Data_1"}, None,
     "alchemist:objectStore.bucket"),
    ("Pulumi.onprem-lab.yaml", {"endpoint": "https://minio:9000", "bucket": "data", "accessKeyId": "k"}, None,
     "alchemist:objectStore.accessKeyId"),
    ("Pulumi.dev.yaml", None, "s3cr3t-value", "alchemist:objectStoreSecretKey"),
    # a NetworkPolicy matches addresses: a host name needs the addresses it resolves to
    ("Pulumi.onprem-lab.yaml", {"endpoint": "https://minio:9000", "bucket": "data"}, None,
     "alchemist:objectStore.cidrs"),
    ("Pulumi.onprem-lab.yaml", {"endpoint": "https://minio:9000", "bucket": "data", "cidrs": ["minio"]}, None,
     "alchemist:objectStore.cidrs"),
    ("Pulumi.aws-us-west-2.yaml", {"cidrs": ["10.0.0.1/32"]}, None, "alchemist:objectStore.cidrs"),
    # one key pair for the lab's two teams would reach both teams' prefixes
    ("Pulumi.onprem-lab.yaml", {"endpoint": "https://10.20.0.9:9000", "bucket": "data", "accessKeyId": "k"},
     "s3cr3t-value", "alchemist:teams[1].objectStoreAccessKeyId is missing"),
])
def test_bad_object_store_config_is_one_line_naming_the_key(stack_file, store, secret, message):
    with pytest.raises(StackConfigError) as err:
        _cfg(stack_file, store, secret)
    text = str(err.value)
    assert message in text and "\n" not in text
    assert "s3cr3t-value" not in text


def test_bucket_prefix_is_valid_for_any_stack_name():
    for stack in ("dev", "aws-us-west-2", "Team_A.prod", "x" * 80):
        prefix = bucket_prefix(stack)
        assert len(prefix) <= 37 and prefix.endswith("-data-")
        assert prefix == prefix.lower() and all(c.isalnum() or c == "-" for c in prefix)


def test_job_pods_reach_the_store_by_address_only():
    """What the platform's `alchemist-object-store` policy opens: an IP endpoint's own address
    (no cidrs needed), and on AWS only the block of the VPC its S3 and STS endpoints sit in,
    which none of the cluster's own subnets overlaps for any zone count or VPC size."""
    import ipaddress

    import yaml
    from infra_helpers import DEPLOYER_CIDR, KUBECONFIG, existing_stack_config

    from infra.object_store_network import store_egress
    from infra.providers.aws.cluster import subnet_cidrs
    from infra.providers.aws.store_endpoints import endpoint_block, endpoint_subnets, vpc_endpoint_egress

    raw = {**existing_stack_config(), "alchemist:kubeconfig": KUBECONFIG,
           "alchemist:objectStore": {"endpoint": "http://10.20.0.9", "bucket": "data"}}
    egress = store_egress(parse({k: pulumi_value(v) for k, v in raw.items()}, {"alchemist:kubeconfig"}))
    assert (egress.cidrs, egress.port) == (("10.20.0.9/32",), 80)
    aws = yaml.safe_load((STACKS / "Pulumi.aws-us-west-2.yaml").read_text())["config"]
    aws["alchemist:aws"]["publicAccessCidrs"] = [DEPLOYER_CIDR]
    egress = vpc_endpoint_egress(parse({k: pulumi_value(v) for k, v in aws.items()}, set()).aws.vpc_cidr)
    assert (egress.cidrs, egress.port) == (("10.40.240.0/20",), 443)
    assert store_egress(parse({k: pulumi_value(v) for k, v in aws.items()}, set())) is None  # the provider's own
    for prefix in range(16, 21):
        vpc = ipaddress.ip_network(f"10.40.0.0/{prefix}")
        for zones in range(2, 7):
            private, public = subnet_cidrs(vpc, zones)
            block = endpoint_block(vpc)
            assert not any(block.overlaps(ipaddress.ip_network(c)) for c in [*private, *public])
            subnets = [ipaddress.ip_network(c) for c in endpoint_subnets(vpc, zones)]
            assert len(subnets) == zones and all(s.subnet_of(block) and s.prefixlen <= 28 for s in subnets)


def test_aws_pods_reach_s3_and_sts_through_interface_endpoints_of_their_own(renders):
    r = renders["aws-us-west-2"]
    endpoints = {e["inputs"]["serviceName"]: e["inputs"] for e in by_type(r, ":VpcEndpoint")}
    assert set(endpoints) == {"com.amazonaws.us-west-2.s3", "com.amazonaws.us-west-2.sts"}
    for e in endpoints.values():
        assert e["vpcEndpointType"] == "Interface" and e["privateDnsEnabled"] is True
        assert len(e["subnetIds"]) == 3  # one subnet per zone
    # No S3 gateway endpoint: private DNS must answer the VPC's own resolver (the pods') too.
    assert endpoints["com.amazonaws.us-west-2.s3"]["dnsOptions"] == {"privateDnsOnlyForInboundResolverEndpoint": False}
    (sg,) = [x["inputs"] for x in by_type(r, ":SecurityGroup") if x["name"].startswith("object-store-endpoints")]
    assert sg["ingress"] == [{"protocol": "tcp", "fromPort": 443, "toPort": 443, "cidrBlocks": ["10.40.0.0/16"]}]
    subnets = [x["inputs"]["cidrBlock"] for x in by_type(r, ":Subnet") if x["name"].startswith("object-store-endpoints")]
    assert subnets == ["10.40.240.0/23", "10.40.242.0/23", "10.40.244.0/23"]
    store = {x["inputs"]["metadata"]["namespace"]: x["inputs"]["spec"] for x in by_type(r, ":NetworkPolicy")
             if x["inputs"]["metadata"]["name"] == "alchemist-object-store"}
    assert sorted(store) == ["applied", "research"]
    assert store["research"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/managed-by": "alchemist"}}
    assert store["research"]["egress"] == [{"to": [{"ipBlock": {"cidr": "10.40.240.0/20"}}],
                                            "ports": [{"protocol": "TCP", "port": 443}]}]


def _teams_cfg(provider_file: str, store: dict | None, teams_keys: dict[str, str], secret: str | None,
               team_secrets: str | None):
    import yaml

    raw = yaml.safe_load((STACKS / provider_file).read_text())["config"]
    for path, value in deployer_sets(provider_file[len("Pulumi."):-len(".yaml")]).items():  # `--path` keys
        top, _, leaf = path.partition(".")
        raw[top][leaf] = value
    if store is not None:
        raw["alchemist:objectStore"] = store
    raw["alchemist:teams"] = [{**t, **({"objectStoreAccessKeyId": teams_keys[t["name"]]} if t["name"] in teams_keys
                                       else {})} for t in raw["alchemist:teams"]]  # fmt: skip
    config = {k: pulumi_value(v) for k, v in raw.items()}
    secret_keys = set()
    for key, value in (("alchemist:objectStoreSecretKey", secret), ("alchemist:objectStoreTeamSecretKeys", team_secrets)):
        if value is not None:
            config[key] = value
            secret_keys.add(key)
    return parse(config, secret_keys)


LAB_STORE = {"endpoint": "https://10.20.0.9:9000", "bucket": "data", "accessKeyId": "research-key"}


def test_each_team_gets_its_own_key_pair_and_no_pair_serves_two_teams():
    cfg = _teams_cfg("Pulumi.onprem-lab.yaml", LAB_STORE, {"applied": "applied-key"}, "s3cr3t-value",
                     '{"applied": "s3cr3t-applied"}')
    keys = cfg.object_store_keys()
    assert {t: k for t, (k, _) in keys.items()} == {"research": "research-key", "applied": "applied-key"}
    assert keys["applied"][1].get_secret_value() == "s3cr3t-applied"
    # every team its own key, no stack-wide pair: also fine
    no_pair = {k: v for k, v in LAB_STORE.items() if k != "accessKeyId"}
    cfg = _teams_cfg("Pulumi.onprem-lab.yaml", no_pair, {"research": "r", "applied": "a"},
                     None, '{"research": "s3cr3t-r", "applied": "s3cr3t-a"}')
    assert sorted(k for k, _ in cfg.object_store_keys().values()) == ["a", "r"]


@pytest.mark.parametrize("provider_file,store,teams_keys,secret,team_secrets,message", [
    # two teams, one key id
    ("Pulumi.onprem-lab.yaml", LAB_STORE, {"applied": "research-key"}, "s3cr3t-value", '{"applied": "s3cr3t-x"}',
     "alchemist:teams[1].objectStoreAccessKeyId = 'research-key' is not accepted; accepted: a key no other team holds"),
    # a team key without its secret, a secret for a team without a key
    ("Pulumi.onprem-lab.yaml", LAB_STORE, {"applied": "applied-key"}, "s3cr3t-value", None,
     "alchemist:objectStoreTeamSecretKeys = <secret> is not accepted"),
    ("Pulumi.onprem-lab.yaml", LAB_STORE, {"applied": "applied-key"}, "s3cr3t-value", '{"research": "s3cr3t-x"}',
     "alchemist:objectStoreTeamSecretKeys = <secret> is not accepted"),
    ("Pulumi.onprem-lab.yaml", LAB_STORE, {"applied": "applied-key"}, "s3cr3t-value", "s3cr3t-not-a-map",
     "alchemist:objectStoreTeamSecretKeys = <secret> is not accepted; accepted: a mapping of team name"),
    # AWS grants access through IAM; no store, no keys
    ("Pulumi.aws-us-west-2.yaml", None, {"applied": "k"}, None, None, "alchemist:teams[1].objectStoreAccessKeyId"),
    ("Pulumi.onprem-lab.yaml", None, {}, None, '{"applied": "s3cr3t-x"}', "alchemist:objectStoreTeamSecretKeys"),
])  # fmt: skip
def test_bad_team_keys_are_one_line_naming_the_key(provider_file, store, teams_keys, secret, team_secrets, message):
    with pytest.raises(StackConfigError) as err:
        _teams_cfg(provider_file, store, teams_keys, secret, team_secrets)
    text = str(err.value)
    assert message in text and "\n" not in text and "s3cr3t" not in text
