"""`alchemist stack list` as a process: its table has a header."""

from __future__ import annotations

from tests.conftest import cli


def test_stack_list_has_a_header(home):
    lines = cli("stack", "list", home=home).stdout.splitlines()
    assert lines[0].split()[:2] == ["STACK", "PROVIDER"] and lines[1].startswith("local ")
