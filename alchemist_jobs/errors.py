"""Errors a person can act on: one line naming where, what and what is accepted; exit 2."""

from __future__ import annotations

EXIT_USAGE = 2


class UserError(Exception):
    """Bad input (a job spec, a stack config, a CLI flag): printed as one line, exit code 2.

    The message must name the file or flag, the field, the bad value and what is accepted.
    The CLI prints it without a traceback unless --debug is given.
    """

    exit_code = EXIT_USAGE


class JobFailed(Exception):
    """A job that started but did not finish successfully (exit code 1)."""

    exit_code = 1


def shown(value: object, limit: int = 60) -> str:
    """A value as an error message quotes it: repr, cut to `limit` characters, so a huge or
    hostile value never floods the terminal."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
