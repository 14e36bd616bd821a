"""Help written for users (issue 24.11): every command and subcommand has a description and
examples to copy, the top-level help says what the tool does, `submit --help` lists no
option it ignores, and `stack list` has a header."""

from __future__ import annotations

import argparse

from alchemist_jobs.cli import build_parser


def _commands(parser: argparse.ArgumentParser, prefix: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix}{name}", sub
                yield from _commands(sub, f"{prefix}{name} ")


def test_every_command_has_a_description_and_examples():
    parser = build_parser()
    assert "module" not in parser.description and "alchemist run" in parser.epilog
    commands = dict(_commands(parser))
    assert {"run", "rm", "stack list", "data push", "plan", "ui"} <= set(commands)
    for name, sub in commands.items():
        assert sub.description, name
        assert (sub.epilog or "").startswith("examples:\n  alchemist "), name


def test_submit_help_lists_no_option_submit_ignores():
    options = {name: set(sub._option_string_actions) for name, sub in _commands(build_parser())}
    assert "--detach" in options["run"] and "--detach" not in options["submit"]
