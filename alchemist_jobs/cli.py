"""The `alchemist` command line: one subcommand module per concern, registered below."""

from __future__ import annotations

import argparse
import importlib
import sys

from alchemist_jobs.errors import JobFailed, UserError

# Each module exposes `add_parser(subparsers)`, which registers its subcommand(s) and sets
# `func(args) -> int` as the handler. Kept as import paths, with the commands each one
# registers, so a command imports only its own module: `alchemist run` starts fast, and no
# command imports the heavier modules (kubernetes, pulumi, boto3) it does not use.
COMMAND_MODULES = {
    "alchemist_jobs.commands.jobs": ("run", "submit", "list", "status", "logs", "cancel"),
    "alchemist_jobs.commands.stack": ("stack",),
    "alchemist_jobs.commands.interactive": ("interactive",),
    "alchemist_jobs.commands.monitor": ("monitor",),
    "alchemist_jobs.commands.plan": ("plan",),
}


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is a UserError: one line and exit 2 like every bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given the command line, only the module of its command is imported
    (all of them for --help, a bad command, or no argv)."""
    parser = _Parser(prog="alchemist", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    command = next((a for a in argv or () if not a.startswith("-")), None)
    owners = [m for m, commands in COMMAND_MODULES.items() if command in commands]
    for path in owners or COMMAND_MODULES:
        importlib.import_module(path).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        args = build_parser(argv).parse_args(argv)
        return int(args.func(args) or 0)
    except UserError as e:
        if debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except JobFailed as e:
        if debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
