"""What a stack's scheduler can do, known from the stack's name before the scheduler is built
(the CLI decides some things, such as starting a warm agent, before it reads a spec).

This is the one place a stack name says which kind of stack it is: every other module asks
`kind_of(name)` or a scheduler's `capabilities` (alchemist_jobs/scheduler.py), never compares
a name with "local". Light on purpose: `alchemist run` reads it before pydantic is imported."""

from __future__ import annotations

from dataclasses import dataclass

LOCAL = "local"


@dataclass(frozen=True)
class Capabilities:
    # The run's processes are this machine's own: its run directories are readable here, a
    # shell is started here, a warm agent interpreter can become its first process.
    runs_here: bool
    # A scheduled run lives on its own (a cluster job) and the CLI may return at once; else
    # the run's processes are the CLI's children (unless detached).
    runs_on_its_own: bool
    # `submit` returns at once without `--detach` (the run is detached from the CLI).
    submit_detaches: bool
    # The stack has Pulumi outputs (`--outputs`, the `alchemist` output of its infra).
    has_outputs: bool


THIS_MACHINE = Capabilities(runs_here=True, runs_on_its_own=False, submit_detaches=True, has_outputs=False)
CLUSTER = Capabilities(runs_here=False, runs_on_its_own=True, submit_detaches=False, has_outputs=True)


def kind_of(stack: str | None) -> Capabilities:
    """The capabilities of `--stack` (None: the default, local)."""
    return THIS_MACHINE if stack in (None, LOCAL) else CLUSTER
