"""`alchemist stack list` and `alchemist stack replicate`, and the lazy imports of the CLI."""

from __future__ import annotations

import shutil

import pytest
from infra_helpers import REPO, SHIPPED, STACKS, stack_config

from alchemist_jobs import cli


@pytest.fixture
def root(tmp_path):
    """A checkout with the shipped stacks, so replicas are written outside the real repo."""
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (tmp_path / "infra").symlink_to(REPO / "infra")
    shutil.copytree(STACKS, tmp_path / "stacks")
    return tmp_path


def run(monkeypatch, root, *argv):
    return cli.main(["stack", "--root", str(root), *argv])


def test_replicate_refuses_to_overwrite(monkeypatch, capsys, root):
    assert run(monkeypatch, root, "replicate", "aws-us-west-2", "aws-eu-west-1") == 2
    assert "stacks/Pulumi.aws-eu-west-1.yaml exists" in capsys.readouterr().err


def test_unknown_stack(monkeypatch, capsys, root):
    assert run(monkeypatch, root, "replicate", "nope", "x") == 2
    assert (
        "stack 'nope': no stacks/Pulumi.nope.yaml; accepted: aws-eu-west-1, aws-us-west-2, dev, onprem-lab"
        in capsys.readouterr().err
    )


def test_each_provider_describes_its_stacks_for_stack_list():
    """`stack list`'s WHERE AND WHAT comes from the provider's package (the job half asks infra's
    stack_tools for it), read from the stack file as shipped."""
    from infra.providers.registry import names, rules
    from infra.stack_tools import describe

    eu = stack_config("aws-eu-west-1")
    gpu = eu["alchemist:aws"]["gpuNodes"]
    assert rules("aws").describe(eu) == (
        f"eu-west-1, GPU nodes {','.join(gpu['instanceTypes'])} x0..{gpu['maxSize']}"
    )
    assert rules("onprem").describe(stack_config("onprem-lab")) == "4 hosts, 16 GPUs"
    assert rules("kind").describe(stack_config("dev")) == "kind on the local Docker"
    assert rules("existing").describe({}) == "an existing cluster (kubeconfig secret)"
    assert all(rules(n).describe({}) is not None for n in names())  # a bare config still reads
    configs = {n: stack_config(n) for n in SHIPPED} | {"odd": {"alchemist:provider": "gke"}}
    where = describe({"configs": configs})["where"]
    assert where == {**{n: rules(c["alchemist:provider"]).describe(c) for n, c in configs.items() if n != "odd"},
                     "odd": "unknown provider 'gke'"}  # fmt: skip


def test_deploy_time_values_are_each_providers_own():
    """What a replica's check takes a stand-in for is its provider's `deploy_time` (infra/providers/)."""
    from infra.providers.registry import rules
    from infra.stack_tools import check, stand_ins

    (cidrs,) = rules("aws").deploy_time
    (installer,) = rules("onprem").deploy_time
    assert stand_ins(stack_config("aws-us-west-2")) == {"alchemist:aws.publicAccessCidrs": cidrs.stand_in}
    assert stand_ins(stack_config("onprem-lab")) == {
        "alchemist:onprem.k3sInstallerSha256": installer.stand_in
    }
    assert stand_ins(stack_config("dev")) == {}
    private = stack_config("aws-us-west-2")
    private["alchemist:aws"] = {**private["alchemist:aws"], "endpointPublicAccess": False}
    assert stand_ins(private) == {}  # no public endpoint: no CIDRs to give
    assert check({"config": stack_config("onprem-lab")})["deploy_time"] == [
        ["alchemist:onprem.k3sInstallerSha256", installer.how]
    ]
