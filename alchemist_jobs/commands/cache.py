"""`alchemist cache list|prune`: the jobs' package environments under the home (job_env.py)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from alchemist_jobs import defaults, job_env
from alchemist_jobs import environment as E
from alchemist_jobs.commands import command
from alchemist_jobs.commands.jobs import parse_age
from alchemist_jobs.errors import UserError
from alchemist_jobs.rundir import default_root


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    cache = command(
        subparsers,
        "cache",
        "list and prune the jobs' package environments",
        ["alchemist cache list", "alchemist cache prune --max-gib 2"],
        description=__doc__.splitlines()[0],
    )
    sub = cache.add_subparsers(dest="cache_command", metavar="SUBCOMMAND")
    sub.required = True
    p = command(
        sub,
        "list",
        "each environment: its lock's hash, size, last use and packages",
        ["alchemist cache list", "alchemist cache list --json"],
    )
    _home(p)
    p.add_argument("--json", action="store_true", help="as JSON (a list of environments)")
    p.set_defaults(func=cmd_list)
    p = command(
        sub,
        "prune",
        "remove the least recently used environments beyond a size, or those unused for a time, or all",
        [
            "alchemist cache prune",
            "alchemist cache prune --max-gib 2",
            "alchemist cache prune --older-than 14d",
            "alchemist cache prune --all",
        ],
    )
    _home(p)
    p.add_argument(
        "--max-gib",
        type=float,
        default=None,
        help=f"keep at most this many GiB (default: ${E.DEPS_CACHE_GIB.name} or "
        f"{job_env.DEFAULT_CACHE_GIB:g})",
    )
    p.add_argument(
        "--older-than",
        default=None,
        metavar="AGE",
        help="also remove those unused for AGE (90s, 30m, 12h, 7d, 2w)",
    )
    p.add_argument("--all", action="store_true", help="remove every environment")
    p.set_defaults(func=cmd_prune)


def _home(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--home",
        type=Path,
        default=defaults.get("home"),
        help=f"the local stack's root (default: ${E.HOME.name} or ~/.alchemist)",
    )


def _root(args: argparse.Namespace) -> Path:
    return (args.home or default_root()).resolve()


def _gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB" if size >= 2**27 else f"{size / 2**20:.1f} MiB"


def cmd_list(args: argparse.Namespace) -> int:
    envs = job_env.cached(_root(args))
    if args.json:
        print(
            json.dumps(
                [
                    dict(
                        hash=e.short,
                        path=str(e.path),
                        bytes=e.size,
                        last_used=e.last_used,
                        packages=e.packages,
                    )
                    for e in envs
                ],
                indent=1,
            )
        )
        return 0
    if not envs:
        print(f"no package environments under {job_env.envs_root(_root(args))}")
        return 0
    print(f"{'HASH':<17} {'SIZE':>10}  {'LAST USED':<16}  PACKAGES")
    for e in envs:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used))
        print(f"{e.short:<17} {_gib(e.size):>10}  {used:<16}  {' '.join(e.packages)}")
    print(
        f"{len(envs)} environment(s), {_gib(sum(e.size for e in envs))} of "
        f"{_gib(job_env.cache_limit())} allowed"
    )
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    if args.max_gib is not None and not args.max_gib >= 0:
        raise UserError(f"--max-gib {args.max_gib}: accepted: a number of GiB, 0 or more")
    limit = (
        0 if args.all else int(args.max_gib * 2**30) if args.max_gib is not None else job_env.cache_limit()
    )
    older = parse_age(args.older_than) if args.older_than is not None else None
    removed = job_env.prune(_root(args), limit, older_than_s=older)
    for e in removed:
        print(f"removed {e.short} ({_gib(e.size)}: {' '.join(e.packages)})")
    print(f"{len(removed)} environment(s) removed, {_gib(sum(e.size for e in removed))} freed")
    return 0
