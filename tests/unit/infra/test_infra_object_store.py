"""The object store under Pulumi's mocks: AWS's bucket and its policies, IRSA for the job service account, on-prem endpoints, config errors.

The rendered program runs for real; only the engine and AWS are mocked (infra/render.py). What
S3 does with these inputs is AWS's documented behaviour: a bucket policy denying
`aws:SecureTransport = false` refuses plain HTTP, the four public-access-block flags refuse
public ACLs and policies, `BucketOwnerEnforced` disables ACLs.
"""

from __future__ import annotations

import pytest
from infra_helpers import STACKS, deployer_sets

from infra.config import StackConfigError, parse, pulumi_value
from infra.providers.aws.object_store import bucket_prefix


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


@pytest.mark.parametrize(
    "stack_file,store,secret,message",
    [
        (
            "Pulumi.aws-us-west-2.yaml",
            {"endpoint": "https://minio:9000"},
            None,
            "alchemist:objectStore.endpoint",
        ),
        ("Pulumi.onprem-lab.yaml", {"bucket": "data"}, None, "alchemist:objectStore.endpoint"),
        ("Pulumi.onprem-lab.yaml", {"endpoint": "https://minio:9000"}, None, "alchemist:objectStore.bucket"),
        (
            "Pulumi.onprem-lab.yaml",
            {"endpoint": "minio:9000", "bucket": "data"},
            None,
            "alchemist:objectStore.endpoint",
        ),
        (
            "Pulumi.onprem-lab.yaml",
            {"endpoint": "https://minio:9000", "bucket": "Data_1"},
            None,
            "alchemist:objectStore.bucket",
        ),
        (
            "Pulumi.onprem-lab.yaml",
            {"endpoint": "https://minio:9000", "bucket": "data", "accessKeyId": "k"},
            None,
            "alchemist:objectStore.accessKeyId",
        ),
        ("Pulumi.dev.yaml", None, "s3cr3t-value", "alchemist:objectStoreSecretKey"),
        # a NetworkPolicy matches addresses: a host name needs the addresses it resolves to
        (
            "Pulumi.onprem-lab.yaml",
            {"endpoint": "https://minio:9000", "bucket": "data"},
            None,
            "alchemist:objectStore.cidrs",
        ),
        (
            "Pulumi.onprem-lab.yaml",
            {"endpoint": "https://minio:9000", "bucket": "data", "cidrs": ["minio"]},
            None,
            "alchemist:objectStore.cidrs",
        ),
        ("Pulumi.aws-us-west-2.yaml", {"cidrs": ["10.0.0.1/32"]}, None, "alchemist:objectStore.cidrs"),
        # one key pair for the lab's two teams would reach both teams' prefixes
        (
            "Pulumi.onprem-lab.yaml",
            {"endpoint": "https://10.20.0.9:9000", "bucket": "data", "accessKeyId": "k"},
            "s3cr3t-value",
            "alchemist:teams[1].objectStoreAccessKeyId is missing",
        ),
    ],
)
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

    raw = {
        **existing_stack_config(),
        "alchemist:kubeconfig": KUBECONFIG,
        "alchemist:objectStore": {"endpoint": "http://10.20.0.9", "bucket": "data"},
    }
    egress = store_egress(parse({k: pulumi_value(v) for k, v in raw.items()}, {"alchemist:kubeconfig"}))
    assert (egress.cidrs, egress.port) == (("10.20.0.9/32",), 80)
    aws = yaml.safe_load((STACKS / "Pulumi.aws-us-west-2.yaml").read_text())["config"]
    aws["alchemist:aws"]["publicAccessCidrs"] = [DEPLOYER_CIDR]
    egress = vpc_endpoint_egress(parse({k: pulumi_value(v) for k, v in aws.items()}, set()).aws.vpc_cidr)
    assert (egress.cidrs, egress.port) == (("10.40.240.0/20",), 443)
    assert (
        store_egress(parse({k: pulumi_value(v) for k, v in aws.items()}, set())) is None
    )  # the provider's own
    for prefix in range(16, 21):
        vpc = ipaddress.ip_network(f"10.40.0.0/{prefix}")
        for zones in range(2, 7):
            private, public = subnet_cidrs(vpc, zones)
            block = endpoint_block(vpc)
            assert not any(block.overlaps(ipaddress.ip_network(c)) for c in [*private, *public])
            subnets = [ipaddress.ip_network(c) for c in endpoint_subnets(vpc, zones)]
            assert len(subnets) == zones and all(s.subnet_of(block) and s.prefixlen <= 28 for s in subnets)


def _teams_cfg(
    provider_file: str,
    store: dict | None,
    teams_keys: dict[str, str],
    secret: str | None,
    team_secrets: str | None,
):
    import yaml

    raw = yaml.safe_load((STACKS / provider_file).read_text())["config"]
    for path, value in deployer_sets(provider_file[len("Pulumi.") : -len(".yaml")]).items():  # `--path` keys
        top, _, leaf = path.partition(".")
        raw[top][leaf] = value
    if store is not None:
        raw["alchemist:objectStore"] = store
    raw["alchemist:teams"] = [{**t, **({"objectStoreAccessKeyId": teams_keys[t["name"]]} if t["name"] in teams_keys
                                       else {})} for t in raw["alchemist:teams"]]  # fmt: skip
    config = {k: pulumi_value(v) for k, v in raw.items()}
    secret_keys = set()
    for key, value in (
        ("alchemist:objectStoreSecretKey", secret),
        ("alchemist:objectStoreTeamSecretKeys", team_secrets),
    ):
        if value is not None:
            config[key] = value
            secret_keys.add(key)
    return parse(config, secret_keys)


LAB_STORE = {"endpoint": "https://10.20.0.9:9000", "bucket": "data", "accessKeyId": "research-key"}


def test_each_team_gets_its_own_key_pair_and_no_pair_serves_two_teams():
    cfg = _teams_cfg(
        "Pulumi.onprem-lab.yaml",
        LAB_STORE,
        {"applied": "applied-key"},
        "s3cr3t-value",
        '{"applied": "s3cr3t-applied"}',
    )
    keys = cfg.object_store_keys()
    assert {t: k for t, (k, _) in keys.items()} == {"research": "research-key", "applied": "applied-key"}
    assert keys["applied"][1].get_secret_value() == "s3cr3t-applied"
    # every team its own key, no stack-wide pair: also fine
    no_pair = {k: v for k, v in LAB_STORE.items() if k != "accessKeyId"}
    cfg = _teams_cfg(
        "Pulumi.onprem-lab.yaml",
        no_pair,
        {"research": "r", "applied": "a"},
        None,
        '{"research": "s3cr3t-r", "applied": "s3cr3t-a"}',
    )
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
def test_bad_team_keys_are_one_line_naming_the_key(
    provider_file, store, teams_keys, secret, team_secrets, message
):
    with pytest.raises(StackConfigError) as err:
        _teams_cfg(provider_file, store, teams_keys, secret, team_secrets)
    text = str(err.value)
    assert message in text and "\n" not in text and "s3cr3t" not in text
