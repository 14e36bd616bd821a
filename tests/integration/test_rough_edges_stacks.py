"""The first hour's rough edges (issue 35, item 5) where the CLI starts a process: a stack typo
with a Pulumi CLI on PATH (a stand-in executable) names the checkout's stacks, and `stack list`
outside a checkout (which asks the checkout's infra in a subprocess) honours
ALCHEMIST_PULUMI_DIR."""

from __future__ import annotations

from alchemist_jobs import cli
from tests.conftest import EXAMPLES, REPO
from tests.unit.test_rough_edges import SHIPPED, _one_line_error, elsewhere  # noqa: F401 (the fixture)


def test_a_stack_typo_with_pulumi_installed_names_the_checkouts_stacks(capsys, home, elsewhere, monkeypatch):  # noqa: F811 (the fixture)
    """A fresh checkout has initialised no stack, so `pulumi stack ls` knows none: the
    checkout's stack files name them."""
    fake = elsewhere / "bin" / "pulumi"
    fake.write_text("#!/bin/sh\necho \"error: no stack named 'devv' found\" >&2\nexit 255\n")
    fake.chmod(0o755)
    monkeypatch.chdir(REPO)
    err = _one_line_error(capsys, ["run", str(EXAMPLES / "digits.yaml"), "--stack", "devv", "--dry-run"])
    assert err == f"error: --stack devv: no such stack; accepted: {', '.join(['local', *SHIPPED])}"


def test_stack_list_outside_a_checkout_honours_alchemist_pulumi_dir(capsys, elsewhere, monkeypatch):  # noqa: F811 (the fixture)
    monkeypatch.setenv("ALCHEMIST_PULUMI_DIR", str(REPO))
    assert cli.main(["stack", "list"]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == ["local", *SHIPPED]
