"""Subcommands of the `alchemist` CLI: each module registers its own with `add_parser`."""

from __future__ import annotations

import argparse


def command(
    sub: argparse._SubParsersAction, name: str, text: str, examples: list[str], description: str | None = None
) -> argparse.ArgumentParser:
    """A subcommand whose `--help` has a description and examples a user can copy."""
    return sub.add_parser(
        name,
        help=text,
        description=description or text,
        epilog="examples:\n" + "\n".join(f"  {e}" for e in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def complete_files(*extensions: str):
    """Shell completion of a file with one of these extensions (or a directory on the way),
    by argcomplete, which is imported only when the shell asks."""

    def complete(**kwargs):
        from argcomplete.completers import FilesCompleter

        return FilesCompleter(extensions)(**kwargs)

    return complete
