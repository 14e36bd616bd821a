"""An agent interpreter started while the CLI is still validating the job.

Most of a short local job's launch time is two Python start-ups in a row: the CLI's (with
pydantic, to validate the spec) and then torchrun's (with torch). `alchemist run` starts
this process first, so torch's import overlaps the validation; it starts nothing and writes
nothing until the CLI sends it the agent's command line, environment, working directory
and log file, then it is exactly `python -m alchemist_jobs.agent ARGS` (or, for a TensorFlow
or JAX job on one node, `python -m alchemist_jobs.light_agent ARGS`, which needs no torch). If
the job is never started (bad input, --dry-run) the CLI kills it, and it leaves nothing behind.

Which agent the job wants is known only once the spec is validated, so this process guesses
from the command line (a spec file that names a TensorFlow or JAX framework, or a --set of
task.framework): torch is imported early only for a job that may need it. A wrong guess costs
time, never correctness: the request decides which agent runs, and agent.main imports torch
itself where it is not loaded yet.

This module is imported by the CLI before anything heavy: keep its imports to the standard
library.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from alchemist_jobs import agent, light_agent, private_net
from alchemist_jobs import environment as E
from alchemist_jobs.processes import popen_group
from alchemist_jobs.stack_kinds import kind_of

AGENTS = {"alchemist_jobs.agent": agent.main, "alchemist_jobs.light_agent": light_agent.main}
_LIGHT = re.compile(rb"\bframework\s*:\s*[\"']?(?:jax|tensorflow)\b")
_SPEC_PEEK_BYTES = 64 << 10


def may_need_torch(argv: list[str]) -> bool:
    """False when `alchemist run ARGV` names a TensorFlow or JAX job (a guess: see above)."""
    for a in argv:
        a = a.removeprefix("--set=")  # argparse's other spelling of `--set KEY=VALUE`
        if a.startswith("task.framework="):
            return a.partition("=")[2] not in ("jax", "tensorflow")
    for a in argv:
        if a.endswith((".yaml", ".yml")):
            try:
                with open(a, "rb") as f:
                    if _LIGHT.search(f.read(_SPEC_PEEK_BYTES)):
                        return False
            except OSError:
                pass
    return True


class WarmAgent:
    def __init__(self, argv: list[str] | None = None) -> None:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
        # Node 0's agent of a run in a network of its own: it starts in it (private_net.py).
        pre = private_net.new_namespace_preexec(strict=False) if private_net.unavailable() is None else None
        self.proc = popen_group(
            [sys.executable, "-m", "alchemist_jobs.warm_agent", *(argv or [])],
            stdin=subprocess.PIPE,
            preexec=pre,
            env=dict(os.environ, PYTHONPATH=path),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.used = False

    def launch(self, argv: list[str], env: dict[str, str], cwd: str, log: str) -> subprocess.Popen:
        """Turn this process into the agent `argv` (`python -m alchemist_jobs.agent ...`, or
        `... alchemist_jobs.light_agent ...`)."""
        assert argv[1] == "-m" and argv[2] in AGENTS, argv
        self.used = True
        assert self.proc.stdin is not None  # started with stdin=PIPE
        req = dict(module=argv[2], args=argv[3:], env=env, cwd=cwd, log=log)
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.close()
        return self.proc

    def discard(self) -> None:
        """Not needed after all: it has started nothing, so a kill is clean."""
        if not self.used and self.proc.poll() is None:
            self.proc.kill()
        if not self.used:
            self.proc.wait()


# Started by `cli.main` before it even builds its parser (the parser imports pydantic), when
# the command line can want one; `take_early()` hands it to `alchemist run`, and the CLI
# discards it on its way out if nothing took it.
_early: WarmAgent | None = None
_NOT_WANTED = ("--dry-run", "--detach", "-h", "--help")


def start_early(argv: list[str]) -> None:
    """Start an agent interpreter now if `alchemist run ARGV` may start a local job."""
    global _early
    if not E.WARM_AGENT.get(default=True) or any(a in _NOT_WANTED for a in argv):
        return
    for i, a in enumerate(argv):
        stack = (
            argv[i + 1]
            if a == "--stack" and i + 1 < len(argv)
            else a.partition("=")[2]
            if a.startswith("--stack=")
            else None
        )
        if stack is not None and not kind_of(stack).runs_here:
            return
    _early = WarmAgent(argv)


def take_early() -> WarmAgent | None:
    global _early
    agent, _early = _early, None
    return agent


def discard_early() -> None:
    agent = take_early()
    if agent is not None:
        agent.discard()


def _serve(argv: list[str]) -> None:
    if may_need_torch(argv):
        import torch.distributed.run  # noqa: F401  (the slow import this process exists to do early)

    line = sys.stdin.readline()
    if not line:
        os._exit(0)
    req = json.loads(line)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    os.umask(0o077)  # as popen_group gives every other process of a run
    fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # workers inherit stdin: give them what a plain Popen would
    os.close(null)

    # torchrun's agent: torch is imported already (or now), it binds its stores, then runs.
    AGENTS[req.get("module", "alchemist_jobs.agent")](req["args"])


if __name__ == "__main__":
    _serve(sys.argv[1:])
