"""A stack typo with a Pulumi CLI on PATH (a stand-in executable the CLI runs) names the
checkout's stacks."""

from __future__ import annotations

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
