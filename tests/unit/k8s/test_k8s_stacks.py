"""Stack resolution: `--stack NAME` through the Pulumi CLI or `--outputs FILE`, one line for a
missing CLI, an unknown stack or a broken contract. The Pulumi CLI cannot be installed on
these machines, so a small fake `pulumi` executable stands on PATH (the far edge): it answers
`stack output` and `stack ls` from the fixture outputs, as the real CLI prints them, and
records its arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from alchemist_jobs.errors import UserError
from alchemist_jobs.stacks import get_scheduler, resolve
from tests.unit.k8s.conftest import FIXTURES, REPO, outputs

FAKE_PULUMI = textwrap.dedent('''\
    #!{python}
    """A fake Pulumi CLI: `stack output alchemist --json --show-secrets --stack S`, `stack ls --json`."""
    import json, os, sys
    from pathlib import Path
    args = sys.argv[1:]
    with open(os.environ["FAKE_PULUMI_LOG"], "a") as log:
        log.write(json.dumps({{"args": args, "cwd": os.getcwd()}}) + "\\n")
    fixtures = Path({fixtures!r})
    names = sorted(p.stem for p in fixtures.glob("*.json") if p.stem != "versions")
    if args[:3] == ["stack", "ls", "--json"]:
        print(json.dumps([{{"name": n, "current": False}} for n in names]))
        sys.exit(0)
    if args[:2] == ["stack", "output"]:
        stack = args[args.index("--stack") + 1]
        if stack not in names and stack != "empty":
            print(f"error: no stack named '{{stack}}' found", file=sys.stderr)
            sys.exit(255)
        if args[2] != "alchemist" or stack == "empty":
            print(f"error: current stack does not have output property '{{args[2]}}'", file=sys.stderr)
            sys.exit(255)
        print((fixtures / f"{{stack}}.json").read_text())
        sys.exit(0)
    print("error: unknown command", file=sys.stderr)
    sys.exit(1)
''')


@pytest.fixture
def fake_pulumi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "pulumi"
    exe.write_text(FAKE_PULUMI.format(python=sys.executable, fixtures=str(FIXTURES)))
    exe.chmod(0o755)
    log = tmp_path / "pulumi-calls.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PULUMI_LOG", str(log))
    return log


def _calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_stack_resolves_through_the_pulumi_cli(fake_pulumi, monkeypatch, tmp_path):
    monkeypatch.setenv("ALCHEMIST_PULUMI_DIR", str(tmp_path))
    out = resolve("aws-us-west-2")
    assert out.stack == "aws-us-west-2" and out.eks.region == "us-west-2"
    (call,) = _calls(fake_pulumi)
    assert call["args"] == ["stack", "output", "alchemist", "--json", "--show-secrets",
                            "--stack", "aws-us-west-2", "--non-interactive"]
    assert call["cwd"] == str(tmp_path)
    sched = get_scheduler("dev")
    assert type(sched).__name__ == "KubernetesScheduler" and sched.stack == "dev"


def test_an_unknown_stack_lists_the_known_ones(fake_pulumi):
    with pytest.raises(UserError) as e:
        resolve("aws-us-west-3")
    assert str(e.value) == ("--stack aws-us-west-3: no such stack; accepted: local, "
                            "aws-eu-west-1, aws-us-west-2, dev, onprem-lab")


def test_a_stack_without_the_output_is_one_line(fake_pulumi):
    with pytest.raises(UserError, match=r"^--stack empty: the stack exports no output "
                                        r"`alchemist`; accepted: a stack of Alchemist's infra/"):
        resolve("empty")


def test_a_missing_pulumi_cli_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError) as e:
        resolve("dev")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("--stack dev: reading a stack's outputs needs the Pulumi CLI, and "
                          "`pulumi` is not on PATH; accepted:")
    assert "--outputs FILE" in msg


def test_outputs_file_alone_needs_no_pulumi(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert resolve("onprem-lab", outputs("onprem-lab")).gpu.per_node == 8
    # `pulumi stack output --json` (all outputs) is accepted too.
    all_outputs = tmp_path / "all.json"
    all_outputs.write_text(json.dumps({"alchemist": json.loads(outputs("dev").read_text()),
                                       "other": 1}))
    assert resolve("dev", all_outputs).provider == "kind"


@pytest.mark.parametrize("mutate,expected", [
    (lambda d: d.pop("queue"), "breaks the contract at queue: Field required"),
    (lambda d: d["shared_fs"].update(kind="s3"), "breaks the contract at shared_fs.kind"),
    (lambda d: d.update(colour="blue"), "breaks the contract at colour"),
    (lambda d: d.pop("kubeconfig"), "has neither `kubeconfig` nor `eks`"),
    # Fields that become object names or label values in a job's manifests: refused where
    # they are read, naming the outputs file and the field, not later as a bad JobSet label.
    (lambda d: d.update(queue=":"), "breaks the contract at queue"),
    (lambda d: d.update(queue="q" * 64), "breaks the contract at queue"),
    (lambda d: d.update(namespace="Research"), "breaks the contract at namespace"),
    (lambda d: d["monitoring"]["pod_monitor_labels"].update(team="a b"),
     "breaks the contract at monitoring.pod_monitor_labels.team"),
    (lambda d: d["gpu"]["node_selector"].update(pool="-gpu"),
     "breaks the contract at gpu.node_selector.pool"),
])
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
    code, stdout, stderr = run_cli("run", "examples/digits.yaml", "--dry-run", "--stack", "dev",
                                   "--outputs", outputs("dev"))
    assert code == 0 and "fake-secret" not in stdout + stderr


def test_local_needs_none_of_the_cluster_libraries(tmp_path):
    """`import alchemist_jobs`, the CLI and the local stack import neither kubernetes, boto3 nor
    pulumi; a cluster stack's scheduler imports kubernetes only when it talks to the cluster."""
    code = textwrap.dedent(f'''
        import sys
        from pathlib import Path
        import alchemist_jobs, alchemist_jobs.cli
        from alchemist_jobs.cli import build_parser
        build_parser()
        from alchemist_jobs.stacks import get_scheduler
        get_scheduler("local", home=Path("{tmp_path}"))
        from alchemist_jobs.spec import load_spec
        s = get_scheduler("dev", outputs=Path("{outputs("dev")}"))
        s.dryrun(load_spec("{REPO}/examples/script.yaml"), Path("{REPO}/examples"))
        heavy = [m for m in ("kubernetes", "boto3", "botocore", "pulumi") if m in sys.modules]
        print(heavy)
    ''')
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_an_unknown_stack_through_the_cli_creates_nothing(fake_pulumi, fake, run_cli):
    code, out, err = run_cli("submit", "examples/digits.yaml", "--stack", "aws-us-west-3")
    assert code == 2
    assert err == ("error: --stack aws-us-west-3: no such stack; accepted: local, "
                   "aws-eu-west-1, aws-us-west-2, dev, onprem-lab\n")
    assert fake.calls == []
    code, out, err = run_cli("submit", "examples/digits.yaml", "--stack", "dev")
    assert code == 0 and [k for k, _ in fake.creates()] == ["ConfigMap", "NetworkPolicy",
                                                         "JobSet"]
