"""Subcommands of the `alchemist` CLI: each module registers its own with `add_parser`."""

from __future__ import annotations

import argparse


def command(sub: argparse._SubParsersAction, name: str, text: str, examples: list[str],
            description: str | None = None) -> argparse.ArgumentParser:
    """A subcommand whose `--help` has a description and examples a user can copy."""
    return sub.add_parser(name, help=text, description=description or text,
                          epilog="examples:\n" + "\n".join(f"  {e}" for e in examples),
                          formatter_class=argparse.RawDescriptionHelpFormatter)
