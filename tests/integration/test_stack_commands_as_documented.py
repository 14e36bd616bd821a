"""`alchemist stack` as the README, `--help` and docs/infra.md show it works on every shipped
stack (issue 35, item 5): the shipped stacks leave out what only their deployer can say (the
network they deploy from, the k3s installer they reviewed), and a read-only comparison or a
replica must not demand it. Each document's commands run in order, in a copy of the checkout
(a replica is written there), as a user pastes them."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.stack_tools import deploy_time_values, stand_ins
from tests.conftest import REPO, cli

pytestmark = pytest.mark.timeout(900)

SHIPPED = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (REPO / "stacks").glob("Pulumi.*.yaml"))


def _commands(text: str) -> list[list[str]]:
    """Every `alchemist stack ...` command of a text: code lines (continuations joined,
    comments dropped) and inline `code`."""
    text = text.replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        for cmd in re.findall(r"`(alchemist stack [^`]+)`", line) or \
                ([line.split("#")[0].strip()] if line.strip().startswith("alchemist stack") else []):
            argv = shlex.split(cmd)[1:]
            if argv[1] in ("replicate", "diff") and len(argv) < 4:
                continue  # the command named in a sentence, not one to run
            found.append(argv)
    return found


def _help_examples() -> list[list[str]]:
    out = []
    for sub in ("list", "replicate", "diff"):
        shown = cli("stack", sub, "--help").stdout
        out += [shlex.split(ln.strip())[1:] for ln in shown.split("examples:")[-1].splitlines()
                if ln.strip().startswith("alchemist stack")]
    return out


def _checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    for d in ("infra", "monitoring", "alchemist_jobs", "images"):
        (root / d).symlink_to(REPO / d)
    shutil.copytree(REPO / "stacks", root / "stacks")
    return root


DOCUMENTS = {
    "README.md": lambda: _commands((REPO / "README.md").read_text()),
    "docs/infra.md": lambda: _commands((REPO / "docs" / "infra.md").read_text()),
    "--help": _help_examples,
}


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_documented_stack_commands_work_on_the_shipped_stacks(tmp_path, document):
    commands = [c for c in DOCUMENTS[document]() if "--root" not in c]  # --root ~/alchemist
    assert any(c[1] == "diff" for c in commands), commands
    root = _checkout(tmp_path)
    told = 0
    for argv in commands:
        r = subprocess.run([sys.executable, "-m", "alchemist_jobs", *argv], cwd=root,
                           capture_output=True, text=True, timeout=600,
                           env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
        said = f"alchemist {shlex.join(argv)}:\n{r.stdout}{r.stderr}"
        # diff exits 1 when the platforms differ; 2 is a refusal, which none of these may be
        assert r.returncode in ((0, 1) if argv[1] == "diff" else (0,)), said
        assert "error" not in r.stderr, said
        if argv[1] == "replicate":
            dst = root / "stacks" / f"Pulumi.{argv[3]}.yaml"
            config = yaml.safe_load(dst.read_text())["config"]
            # what the source's deployer had not said, its provider's rules name (an AWS
            # stack's publicAccessCidrs): the replica's deployer is told how to say it
            for dotted, rule in deploy_time_values(config):
                if dotted in stand_ins(config):
                    told += 1
                    assert f"{rule.how} -s {argv[3]}" in r.stdout, said
        if argv[1] == "diff":
            assert re.search(r"^platforms of \S+ and \S+ (differ|are identical)", r.stdout,
                             re.M), said
    # the documents that replicate an AWS stack show the deployer's step; --help's replica
    # (dev, a kind stack) has none to show
    assert told == (0 if document == "--help" else 1), told


def test_every_shipped_stack_compares(tmp_path):
    """dev against each of the others: no stack needs its deploy-time values to be compared."""
    root = _checkout(tmp_path)
    for other in SHIPPED:
        r = cli("stack", "diff", "dev", other, cwd=root, timeout=600)
        assert r.returncode in (0, 1) and "error" not in r.stderr, r.stdout + r.stderr
