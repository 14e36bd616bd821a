"""Stack resolution: `--stack NAME` through the Pulumi CLI or `--outputs FILE`, one line for a
missing CLI, an unknown stack or a broken contract. The Pulumi CLI cannot be installed on
these machines, so a small fake `pulumi` executable stands on PATH (the far edge): it answers
`stack output` and `stack ls` from the fixture outputs, as the real CLI prints them, and
records its arguments."""

from __future__ import annotations

import json

import pytest

from alchemist_jobs.errors import UserError
from alchemist_jobs.stacks import resolve
from tests.unit.k8s.conftest import outputs


def test_a_missing_pulumi_cli_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError) as e:
        resolve("dev")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(
        "--stack dev: reading a stack's outputs needs the Pulumi CLI, and `pulumi` is not on PATH; accepted:"
    )
    assert "--outputs FILE" in msg


def test_outputs_file_alone_needs_no_pulumi(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert resolve("onprem-lab", outputs("onprem-lab")).gpu.per_node == 8
    # `pulumi stack output --json` (all outputs) is accepted too.
    all_outputs = tmp_path / "all.json"
    all_outputs.write_text(json.dumps({"alchemist": json.loads(outputs("dev").read_text()), "other": 1}))
    assert resolve("dev", all_outputs).provider == "kind"


@pytest.mark.parametrize(
    "mutate,expected",
    [
        (lambda d: d.pop("queue"), "breaks the contract at queue: Field required"),
        # the provider names its file system (jobs mount the PVC whatever it is): a name, no sentence
        (lambda d: d["shared_fs"].update(kind="an S3 bucket"), "breaks the contract at shared_fs.kind"),
        (lambda d: d.update(colour="blue"), "has `colour`, which this alchemist's contract does not have"),
        (lambda d: d.pop("kubeconfig"), "has neither `kubeconfig` nor `auth`"),
        # Fields that become object names or label values in a job's manifests: refused where
        # they are read, naming the outputs file and the field, not later as a bad JobSet label.
        (lambda d: d.update(queue=":"), "breaks the contract at queue"),
        (lambda d: d.update(queue="q" * 64), "breaks the contract at queue"),
        (lambda d: d.update(namespace="Research"), "breaks the contract at namespace"),
        (
            lambda d: d["monitoring"]["pod_monitor_labels"].update(team="a b"),
            "breaks the contract at monitoring.pod_monitor_labels.team",
        ),
        (
            lambda d: d["gpu"]["node_selector"].update(pool="-gpu"),
            "breaks the contract at gpu.node_selector.pool",
        ),
    ],
)
def test_a_contract_break_is_one_line(tmp_path, mutate, expected):
    data = json.loads(outputs("dev").read_text())
    mutate(data)
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError) as e:
        resolve("dev", path)
    assert expected in str(e.value) and "\n" not in str(e.value)
    assert "fake-secret" not in str(e.value)


def test_bad_outputs_files_are_one_line(tmp_path):
    with pytest.raises(UserError, match=r"^--outputs .*nope.json: no such file$"):
        resolve("dev", tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match=r"line 1: not JSON"):
        resolve("dev", bad)
    with pytest.raises(UserError, match=r"not a stack name"):
        resolve("dev; rm -rf /")


def test_the_kubeconfig_never_shows(tmp_path, run_cli, fake):
    out = resolve("dev", outputs("dev"))
    assert "fake-secret" not in repr(out) and "fake-secret" not in str(out.model_dump())
    code, stdout, stderr = run_cli(
        "run", "examples/digits.yaml", "--dry-run", "--stack", "dev", "--outputs", outputs("dev")
    )
    assert code == 0 and "fake-secret" not in stdout + stderr
