"""`alchemist stack`: --root anywhere on the line, and replica names that are refused in
one line before anything is written (a stack file with a bad name would break `stack list`)."""

from __future__ import annotations

import shutil

import pytest

from alchemist_jobs import cli
from tests.conftest import REPO


@pytest.fixture
def checkout(tmp_path):
    root = tmp_path / "repo"
    (root / "infra").mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copytree(REPO / "stacks", root / "stacks")
    return root


def test_root_is_accepted_after_the_subcommand(checkout, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["stack", "list", "--root", str(checkout)]) == 0
    assert cli.main(["stack", "--root", str(checkout), "list"]) == 0
    out = capsys.readouterr().out
    assert sum(line.startswith("local ") for line in out.splitlines()) == 2


@pytest.mark.parametrize("name", ["", ".", "..", "UPPER", "a\nb", "a/b", "local", "-x", "x" * 41,
                                  "../../etc/passwd"])
def test_bad_replica_names_are_one_line_and_write_nothing(checkout, capsys, name):
    before = sorted(p.name for p in (checkout / "stacks").iterdir())
    src = before[0][len("Pulumi."):-len(".yaml")]
    assert cli.main(["stack", "--root", str(checkout), "replicate", src, "--", name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "DST" in err and "Traceback" not in err, err
    assert sorted(p.name for p in (checkout / "stacks").iterdir()) == before
    assert cli.main(["stack", "--root", str(checkout), "list"]) == 0


def test_a_local_interactive_shell_has_the_environments_executables_first(home, capsys):
    import sys
    from pathlib import Path

    assert cli.main(["interactive", "--dry-run"]) == 0
    env = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines()
               if "=" in line and not line.startswith("#"))
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert env["ALCHEMIST_STACK"] == "local" and not home.exists()


def test_the_defaults_file_sets_the_usual_stack_and_a_flag_wins(home, tmp_path, capsys,
                                                                 monkeypatch):
    from alchemist_jobs import defaults

    file = tmp_path / "defaults.yaml"
    file.write_text(f"stack: dev\noutputs: {REPO / 'examples/stack-outputs.json'}\n")
    monkeypatch.setenv("ALCHEMIST_DEFAULTS", str(file))
    defaults._load.cache_clear()
    assert cli.main(["run", str(REPO / "examples/digits.yaml"), "--dry-run"]) == 0
    assert "on stack dev" in capsys.readouterr().out
    assert cli.main(["run", str(REPO / "examples/digits.yaml"), "--dry-run", "--stack",
                     "local"]) == 0
    assert "on stack local" in capsys.readouterr().out
    file.write_text("stak: dev\n")
    defaults._load.cache_clear()
    assert cli.main(["list"]) == 2
    err = capsys.readouterr().err
    assert str(file) in err and "'stak'" in err and err.count("\n") == 1
    defaults._load.cache_clear()


def test_stack_list_json(checkout, capsys):
    import json

    assert cli.main(["stack", "list", "--root", str(checkout), "--json"]) == 0
    stacks = json.loads(capsys.readouterr().out)
    assert stacks[0]["name"] == "local"
    names = {p.name[len("Pulumi."):-len(".yaml")] for p in (checkout / "stacks").iterdir()}
    assert {s["name"] for s in stacks[1:]} == names
    assert all(set(s) == {"name", "provider", "kubernetes_version", "shared_fs", "summary"}
               for s in stacks)


def test_a_mistyped_stack_is_no_such_stack_with_the_stacks_there_are(checkout, capsys, monkeypatch, tmp_path):
    """Asked before the Pulumi CLI is looked for: the user may not need it for this answer."""
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("PATH", str(tmp_path))  # no `pulumi` anywhere
    monkeypatch.delenv("ALCHEMIST_PULUMI_DIR", raising=False)
    assert cli.main(["list", "--stack", "aws-us-west-3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "aws-us-west-3: no such stack" in err and "aws-us-west-2" in err and "local" in err
    # a stack that exists still needs the CLI (or --outputs) to be read
    assert cli.main(["list", "--stack", "aws-us-west-2"]) == 2
    assert "Pulumi CLI" in capsys.readouterr().err
