"""`alchemist stack list` and `alchemist stack replicate`, and the lazy imports of the CLI.

The tests here render a stack, start a process or take over a second; the in-process ones
are in `tests/unit/infra/test_infra_stack_cli.py`."""

from __future__ import annotations

import subprocess
import sys

import yaml
from infra_helpers import DEPLOYER_CIDR, INSTALLER_SHA256, REPO, SHIPPED, STACKS, stack_config
from test_infra_stack_cli import run

EU_SETS = ["aws.region=eu-west-1", "aws.availabilityZones=[eu-west-1a,eu-west-1b,eu-west-1c]",
           "aws.vpcCidr=10.41.0.0/16"]  # fmt: skip


def test_list(monkeypatch, capsys, root):
    assert run(monkeypatch, root, "list") == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split()[:2] == ["STACK", "PROVIDER"]
    assert lines[0].startswith("local") and "built-in" in lines[0]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == set(SHIPPED)
    assert rows["aws-eu-west-1"].split()[1:5] == ["aws", "k8s", "1.35", "efs"]
    assert "16 GPUs" in rows["onprem-lab"] and "kind on the local Docker" in rows["dev"]


def test_the_shipped_eu_stack_is_a_replica_of_us_west(monkeypatch, capsys, root):
    # The shipped stacks leave the deployer's API CIDRs out; a replica is checked, so it gets one.
    sets = [arg for s in [*EU_SETS, f"aws.publicAccessCidrs=[{DEPLOYER_CIDR}]"] for arg in ("--set", s)]
    assert run(monkeypatch, root, "replicate", "aws-us-west-2", "aws-eu-test", *sets) == 0
    assert (
        "wrote stacks/Pulumi.aws-eu-test.yaml (4 keys changed from aws-us-west-2)" in capsys.readouterr().out
    )
    written = (root / "stacks" / "Pulumi.aws-eu-test.yaml").read_text()
    assert written.startswith(
        "# A replica of aws-us-west-2: `alchemist stack replicate aws-us-west-2 aws-eu-test"
    )
    config = yaml.safe_load(written)["config"]
    assert config["alchemist:aws"].pop("publicAccessCidrs") == [DEPLOYER_CIDR]
    assert config == stack_config("aws-eu-west-1")


def test_replicate_checks_the_replica(monkeypatch, capsys, root):
    code = run(monkeypatch, root, "replicate", "aws-us-west-2", "aws-bad", "--set", "aws.region=eu-west-1")
    assert code == 2
    assert capsys.readouterr().err == (
        "error: stacks/Pulumi.aws-bad.yaml: alchemist:aws.availabilityZones[0] = "
        "'us-west-2a' is not accepted; accepted: a zone of eu-west-1, such as eu-west-1a\n"
    )
    assert not (root / "stacks" / "Pulumi.aws-bad.yaml").exists()


def test_replicate_refuses_encrypted_values_and_says_what_to_set(monkeypatch, capsys, root):
    doc = yaml.safe_load((STACKS / "Pulumi.onprem-lab.yaml").read_text())
    doc["config"]["alchemist:onprem"]["k3sInstallerSha256"] = INSTALLER_SHA256  # as its deployer set it
    doc["encryptionsalt"] = "v1:c2FsdA==:v1:bm9uY2U=:Y2lwaGVy"
    doc["config"]["alchemist:sshPrivateKey"] = {"secure": "v1:AAAABBBBCCCC"}
    (root / "stacks" / "Pulumi.lab-a.yaml").write_text(yaml.safe_dump(doc))
    assert run(monkeypatch, root, "replicate", "lab-a", "lab-b") == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "error: stacks/Pulumi.lab-a.yaml: alchemist:sshPrivateKey is encrypted with lab-a's secrets"
    )
    assert (
        "--set sshPrivateKey= " in err
        and "pulumi config set --secret alchemist:sshPrivateKey <value> -s lab-b" in err
    )
    assert "AAAABBBBCCCC" not in err
    assert not (root / "stacks" / "Pulumi.lab-b.yaml").exists()
    # leaving it out writes the replica without it (nor SRC's encryption salt) and says what to set
    assert run(monkeypatch, root, "replicate", "lab-a", "lab-b", "--set", "sshPrivateKey=") == 0
    out = capsys.readouterr().out
    assert "then set its secret: pulumi config set --secret alchemist:sshPrivateKey <value> -s lab-b" in out
    written = yaml.safe_load((root / "stacks" / "Pulumi.lab-b.yaml").read_text())
    assert set(written) == {"config"} and "alchemist:sshPrivateKey" not in written["config"]


def test_cli_help_and_stack_module_never_import_pulumi():
    code = (
        "import sys\n"
        "import alchemist_jobs, alchemist_jobs.commands.stack\n"
        "from alchemist_jobs import cli\n"
        "cli.build_parser().format_help()\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('pulumi', 'pulumi_aws', 'pulumi_kubernetes', 'infra')]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
