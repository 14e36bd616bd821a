"""Stacks resolved through a `pulumi` executable on PATH (a small fake of the CLI, as Pulumi
cannot be installed here) and a fresh interpreter's imports (moved from
tests/unit/k8s/test_k8s_stacks.py: these start processes)."""

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
    assert out.stack == "aws-us-west-2" and out.auth.region == "us-west-2"
    (call,) = _calls(fake_pulumi)
    assert call["args"] == [
        "stack",
        "output",
        "alchemist",
        "--json",
        "--show-secrets",
        "--stack",
        "aws-us-west-2",
        "--non-interactive",
    ]
    assert call["cwd"] == str(tmp_path)
    sched = get_scheduler("dev")
    assert type(sched).__name__ == "KubernetesScheduler" and sched.stack == "dev"


def test_an_unknown_stack_lists_the_known_ones(fake_pulumi):
    with pytest.raises(UserError) as e:
        resolve("aws-us-west-3")
    assert str(e.value) == (
        "--stack aws-us-west-3: no such stack; accepted: local, aws-eu-west-1, aws-us-west-2, dev, onprem-lab"
    )


def test_a_stack_without_the_output_is_one_line(fake_pulumi):
    with pytest.raises(
        UserError,
        match=r"^--stack empty: the stack exports no output "
        r"`alchemist`; accepted: a stack of Alchemist's infra/",
    ):
        resolve("empty")


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
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_an_unknown_stack_through_the_cli_creates_nothing(fake_pulumi, fake, run_cli):
    code, out, err = run_cli("submit", "examples/digits.yaml", "--stack", "aws-us-west-3")
    assert code == 2
    assert err == (
        "error: --stack aws-us-west-3: no such stack; accepted: local, "
        "aws-eu-west-1, aws-us-west-2, dev, onprem-lab\n"
    )
    assert fake.calls == []
    code, out, err = run_cli("submit", "examples/digits.yaml", "--stack", "dev")
    assert code == 0 and [k for k, _ in fake.creates()] == ["ConfigMap", "NetworkPolicy", "JobSet"]
