"""Every policy passes on every shipped stack and fails on a config that breaks it (and only it).

The tests here render a stack, start a process or take over a second; the in-process ones
are in `tests/unit/infra/test_infra_policies.py`."""

from __future__ import annotations

import pytest
from infra_helpers import SHIPPED

from infra.policies import POLICIES, Resource, violations


def as_resources(render):
    return [Resource(r["type"], r["name"], r["inputs"]) for r in render["resources"]]


@pytest.mark.parametrize(
    "name", [*SHIPPED, "fsx", "secret:existing", "secret:onprem-ssh", "allowed:no-open-endpoints"]
)
def test_every_policy_passes_on_every_shipped_stack(renders, name):
    assert violations(as_resources(renders[name])) == []


@pytest.mark.parametrize(
    "policy", ["storage-encrypted", "imdsv2-on-gpu-nodes", "no-open-endpoints", "team-pod-security"]
)
def test_policy_fails_on_a_config_that_breaks_it(renders, policy):
    found = violations(as_resources(renders[f"break:{policy}"]))
    assert found, f"{policy} did not notice the broken config"
    assert {p for p, _ in found} == {policy}, f"only {policy} should fail: {found}"


def test_violation_messages_name_the_resource(renders):
    assert violations(as_resources(renders["break:storage-encrypted"])) == [
        ("storage-encrypted", "shared-fs-efs: FileSystem must set encrypted: true")
    ]
    assert violations(as_resources(renders["break:imdsv2-on-gpu-nodes"])) == [
        (
            "imdsv2-on-gpu-nodes",
            "cluster-gpu-launch-template: GPU instances must set metadataOptions.httpTokens: required",
        )
    ]
    (open_api,) = violations(as_resources(renders["break:no-open-endpoints"]))
    assert open_api[1].startswith("cluster-eks: public API endpoint open to 0.0.0.0/0")
    psa = violations(as_resources(renders["break:team-pod-security"]))
    assert sorted(m for _, m in psa) == [
        "applied: team namespace must enforce Pod Security restricted or baseline, not 'privileged'",
        "research: team namespace must enforce Pod Security restricted or baseline, not 'privileged'",
    ]  # fmt: skip


def test_policy_pack_wraps_the_same_functions(renders):
    """The pack's ResourceValidationPolicies report exactly what the plain functions find.

    Uses the real pulumi_policy SDK (its policy objects and argument type); only PolicyPack,
    which serves the CLI over gRPC, is not started.
    """
    pulumi_policy = pytest.importorskip("pulumi_policy", reason="pulumi-policy is the pack's own dependency")
    from infra.policy.pack import build_policies

    policies = build_policies()
    assert [p.name for p in policies] == [p.name for p in POLICIES]
    assert all(p.enforcement_level == pulumi_policy.EnforcementLevel.MANDATORY for p in policies)
    for case in ("break:storage-encrypted", "break:no-open-endpoints", "aws-us-west-2"):
        reported = []
        for r in renders[case]["resources"]:
            args = pulumi_policy.ResourceValidationArgs(r["type"], r["inputs"], r["urn"], r["name"],
                                                        opts=None, provider=None)  # fmt: skip
            for p in policies:
                p.validate(args, lambda message, urn=None, name=p.name: reported.append((name, message)))
        assert reported == violations(as_resources(renders[case]))
