"""`alchemist stack list` and `alchemist stack replicate`, and the lazy imports of the CLI."""

from __future__ import annotations

import shutil

import pytest
from infra_helpers import REPO, SHIPPED, STACKS

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


def test_list(monkeypatch, capsys, root):
    assert run(monkeypatch, root, "list") == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split()[:2] == ["STACK", "PROVIDER"]
    assert lines[0].startswith("local") and "built-in" in lines[0]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == set(SHIPPED)
    assert rows["aws-eu-west-1"].split()[1:5] == ["aws", "k8s", "1.35", "efs"]
    assert "16 GPUs" in rows["onprem-lab"] and "kind on the local Docker" in rows["dev"]


def test_replicate_refuses_to_overwrite(monkeypatch, capsys, root):
    assert run(monkeypatch, root, "replicate", "aws-us-west-2", "aws-eu-west-1") == 2
    assert "stacks/Pulumi.aws-eu-west-1.yaml exists" in capsys.readouterr().err


def test_unknown_stack(monkeypatch, capsys, root):
    assert run(monkeypatch, root, "replicate", "nope", "x") == 2
    assert (
        "stack 'nope': no stacks/Pulumi.nope.yaml; accepted: aws-eu-west-1, aws-us-west-2, dev, onprem-lab"
        in capsys.readouterr().err
    )
