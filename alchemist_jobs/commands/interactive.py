"""`alchemist interactive`: a JupyterLab and shell session on a cluster stack, or on `local` a
shell with the same environment a worker sees."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from alchemist_jobs import environment as E
from alchemist_jobs.commands import command
from alchemist_jobs.commands.jobs import _stack_args
from alchemist_jobs.errors import UserError
from alchemist_jobs.rundir import default_root
from alchemist_jobs.stack_kinds import kind_of


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = command(
        sub,
        "interactive",
        "a JupyterLab + shell session on a stack (on local: a shell with a worker's environment)",
        [
            "alchemist interactive",
            "alchemist interactive --stack dev --gpus 1 --hours 2",
            "alchemist interactive --stack dev --stop",
        ],
    )
    p.add_argument("--gpus", type=int, default=0, help="GPUs for the session (cluster stacks)")
    p.add_argument(
        "--hours", type=float, default=8.0, help="the session ends by itself after this long (default 8)"
    )
    p.add_argument("--stop", action="store_true", help="end your session on the stack")
    p.add_argument("--dry-run", action="store_true", help="print the session pod and exit")
    _stack_args(p)
    p.set_defaults(func=cmd_interactive)


def cmd_interactive(args: argparse.Namespace) -> int:
    if kind_of(args.stack).runs_here:
        return _local_shell(args)
    from alchemist_jobs.kubernetes.interactive import (
        Sessions,
        describe_pod,
        how_to_reach,
        session_name,
        session_pod,
    )
    from alchemist_jobs.stacks import resolve

    out = resolve(args.stack, args.outputs, args.team)
    name = session_name()
    if args.stop:
        if args.dry_run:
            print(f"# would delete pod {name} in namespace {out.namespace}")
            return 0
        gone = Sessions(out).stop(name)
        print(f"session {name} on stack {out.stack}: {'stopped' if gone else 'not running'}")
        return 0
    pod = session_pod(out, name, gpus=args.gpus, hours=args.hours)
    if args.dry_run:
        print(describe_pod(pod))
        return 0
    sessions = Sessions(out)
    _, created = sessions.start(pod)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    say(
        f"session {name} on stack {out.stack}: "
        f"{'starting' if created else 'already there'} ({out.images.interactive})"
    )
    sessions.wait_running(name, say=say)
    print(f"session {name} is running (ends by itself after {args.hours:g} h)")
    print(how_to_reach(out, name, sessions.token))
    return 0


def _local_shell(args: argparse.Namespace) -> int:
    """A shell whose environment is a local worker's (shared root, stack, PYTHONPATH...)."""
    from alchemist_jobs.spec import JobSpec
    from alchemist_jobs.stacks import local_scheduler, no_team_on_local

    no_team_on_local(args.team)
    if args.outputs is not None:
        raise UserError("--outputs: the local stack has no stack outputs; drop --outputs")
    if args.gpus:
        raise UserError(
            f"--gpus {args.gpus}: the local stack uses this machine's GPUs as "
            "they are; accepted: no --gpus on local"
        )
    if args.stop:
        print("a local session is a shell: leave it with `exit`")
        return 0
    root = Path(args.home) if args.home else default_root()
    # The exact environment the local backend gives a worker, from its own dry run.
    spec = JobSpec.model_validate({"name": "interactive", "task": {"builtin": "digits"}})
    env = dict(local_scheduler(root).dryrun(spec, Path.cwd()).processes[0].env)
    env.update(E.RUN_DIR.entry(root / "sessions" / f"local-{os.getpid()}"))
    # The environment's executables first (python, torchrun, alchemist of this install),
    # as in a worker, whichever environment the shell's own start-up files activate.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    shell = os.environ.get("SHELL") or shutil.which("bash") or "/bin/sh"
    if args.dry_run:
        print("\n".join(f"{k}={v}" for k, v in sorted(env.items())) + f"\n# then: {shell}")
        return 0
    E.RUN_DIR.require(env).mkdir(mode=0o700, parents=True, exist_ok=True)
    print(
        f"alchemist: {shell} with a worker's environment on stack local (shared root "
        f"{root}); `exit` leaves it",
        file=sys.stderr,
    )
    return subprocess.call([shell], env={**os.environ, **env})
