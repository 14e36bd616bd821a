# PYTHON_ARGCOMPLETE_OK (argcomplete's global completion, if activated, completes `alchemist` too)
"""The `alchemist` command line: one subcommand module per concern, registered below."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from alchemist_jobs import warm_agent
from alchemist_jobs.errors import JobFailed, UserError

# Each module exposes `add_parser(subparsers)`, which registers its subcommand(s) and sets
# `func(args) -> int` as the handler. Kept as import paths, with the commands each one
# registers, so a command imports only its own module: `alchemist run` starts fast, and no
# command imports the heavier modules (kubernetes, pulumi, boto3) it does not use.
COMMAND_MODULES = {
    "alchemist_jobs.commands.jobs": ("run", "submit", "list", "status", "logs", "cancel", "rm"),
    "alchemist_jobs.commands.stack": ("stack",),
    "alchemist_jobs.commands.interactive": ("interactive",),
    "alchemist_jobs.commands.monitor": ("monitor",),
    "alchemist_jobs.commands.data": ("data",),
    "alchemist_jobs.commands.cache": ("cache",),
    "alchemist_jobs.ui.command": ("ui",),
    "alchemist_jobs.commands.plan": ("plan",),
    "alchemist_jobs.commands.completion": ("completion",),
}


DESCRIPTION = (
    "Run distributed training jobs (PyTorch, TensorFlow, JAX) on this machine or on\n"
    "a GPU Kubernetes platform that `pulumi up` stood up, and follow them."
)
EPILOG = """getting started:
  alchemist run examples/digits.yaml          train on this machine (the local stack)
  alchemist list                              runs, newest first
  alchemist status RUN / logs RUN / rm RUN    one run
  alchemist run job.yaml --stack dev          the same job on a cluster stack
  alchemist ui                                the dashboard
`alchemist COMMAND --help` describes each command; docs/cli.md has the whole reference."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is a UserError: one line and exit 2 like every bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def _version() -> str:
    try:
        return version("alchemist")
    except PackageNotFoundError:
        return "unknown (not installed)"


class _Version(argparse.Action):
    """--version, looked up only when asked: importlib.metadata is slow to import."""

    def __init__(self, option_strings: list[str], dest: str, **_) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version and exit"
        )

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"alchemist {_version()}")
        parser.exit()


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given the command line, only the module of its command is imported
    (all of them for --help, a bad command, or no argv)."""
    parser = _Parser(
        prog="alchemist",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    command = next((a for a in argv or () if not a.startswith("-")), None)
    owners = [m for m, commands in COMMAND_MODULES.items() if command in commands]
    for path in owners or COMMAND_MODULES:
        importlib.import_module(path).add_parser(sub)
    return parser


MAX_ERROR_CHARS = 300


def one_line(message: object) -> str:
    """`error: MESSAGE` on one line of at most MAX_ERROR_CHARS characters, whatever a value
    quoted in it held (newlines, megabytes)."""
    text = "error: " + str(message).replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (`alchemist completion`)
        import argcomplete

        # answers and exits; flags are offered once a word starts with '-'
        argcomplete.autocomplete(build_parser(), always_complete_options=False)
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        rest: list[str] = []
        command = next((a for a in argv if not a.startswith("-")), None)
        if command in ("run", "submit") and "--" in argv:
            cut = argv.index("--")
            argv, rest = argv[:cut], argv[cut + 1 :]
        if command == "run":
            # The agent interpreter imports torch while this one imports the rest (warm_agent.py).
            warm_agent.start_early(argv)
        args = build_parser(argv).parse_args(argv)
        if rest:
            args.args = rest
        return int(args.func(args) or 0)
    except (UserError, JobFailed) as e:
        if debug:
            raise
        print(one_line(e), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `alchemist list | head`: the reader left. Quietly, as `cat | head` does; stdout is
        # pointed at /dev/null so the interpreter's final flush cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    finally:
        warm_agent.discard_early()  # started for a run that never took it (bad input, --stack)


if __name__ == "__main__":
    sys.exit(main())
