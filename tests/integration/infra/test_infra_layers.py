"""The platform and monitoring layers are the same on every stack, apart from documented keys; `stack diff` says so."""

from __future__ import annotations

import pytest
import yaml
from infra_helpers import DEPLOYER_CIDR, REPO, SHIPPED, STACKS

from alchemist_jobs import cli
from infra.stack_diff import ALLOWED, compare, layers


def test_layers_identical_apart_from_documented_keys(renders):
    base = renders["aws-us-west-2"]
    assert len(layers(base)) >= 30  # the comparison covers the real layers, not an empty set
    for name in SHIPPED:
        report = compare(base, renders[name])
        assert report.differences == [], f"{name}: " + "; ".join(
            d.line("aws-us-west-2", name) for d in report.differences
        )
        documented = {a.reason for a in ALLOWED}
        assert all(d.allowed_because in documented for d in report.allowed)
    # dev differs from AWS only where documented: quotas, registry, provider facts
    allowed = {(d.type, d.path.split("[")[0].split(".")[0]) for d in compare(base, renders["dev"]).allowed}
    assert ("kubernetes:kueue.x-k8s.io/v1beta1:ClusterQueue", "spec") in allowed
    assert ("stack output", "provider") in allowed


def test_compare_reports_a_planted_difference(renders):
    import copy

    planted = copy.deepcopy(renders["aws-eu-west-1"])
    for r in planted["resources"]:
        if r["name"] == "platform-gpu-operator":
            r["inputs"]["values"]["dcgmExporter"]["enabled"] = False  # not a documented key
    report = compare(renders["aws-us-west-2"], planted)
    assert [(d.name, d.path) for d in report.differences] == [
        ("platform-gpu-operator", "values.dcgmExporter.enabled")
    ]


@pytest.fixture
def planted_root(tmp_path):
    """A checkout whose stacks/ holds aws-us-west-2 and a copy with one platform key changed."""
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (tmp_path / "infra").symlink_to(REPO / "infra")
    (tmp_path / "stacks").mkdir()
    for name in ("aws-us-west-2", "aws-eu-west-1", "aws-planted"):
        doc = yaml.safe_load((STACKS / f"Pulumi.{name.replace('planted', 'eu-west-1')}.yaml").read_text())
        doc["config"]["alchemist:aws"]["publicAccessCidrs"] = [DEPLOYER_CIDR]  # as the deployer sets it
        if name == "aws-planted":
            doc["config"]["alchemist:podSecurity"] = (
                "baseline"  # a platform difference, not provider-specific
            )
        (tmp_path / "stacks" / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path


def run_cli(monkeypatch, *argv):
    return cli.main(list(argv))


def test_stack_diff_exits_nonzero_on_a_planted_difference(planted_root, monkeypatch, capsys):
    code = run_cli(monkeypatch, "stack", "--root", str(planted_root), "diff", "aws-us-west-2", "aws-planted")
    captured = capsys.readouterr()
    out = captured.out
    assert code == 1, captured.err
    assert ('~ kubernetes:core/v1:Namespace platform-team-research-ns: metadata.labels."pod-security.kubernetes.io/enforce": '
            '"restricted" -> "baseline"') in out  # fmt: skip
    assert "platforms of aws-us-west-2 and aws-planted differ" in out


def test_stack_diff_of_a_replica_is_clean(planted_root, monkeypatch, capsys):
    code = run_cli(
        monkeypatch, "stack", "--root", str(planted_root), "diff", "aws-us-west-2", "aws-eu-west-1", "--all"
    )
    captured = capsys.readouterr()
    out = captured.out
    assert code == 0, captured.err + out
    assert "are identical: 0 difference(s)" in out
    assert (
        "(allowed: how jobs reach each cluster: its name, region, address and CA) ~ stack output alchemist: "
        'auth.region: "us-west-2" -> "eu-west-1"' in out
    )
