"""`alchemist data push|ls|rm`: named datasets in the chosen stack's object store.

The stack's object store is its output's `object_store`. The local stack has none of its
own: `ALCHEMIST_OBJECT_STORE=s3://BUCKET` names one (with boto3's `AWS_ENDPOINT_URL` for an
S3-compatible service such as MinIO).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alchemist_jobs import environment as E
from alchemist_jobs.commands import command, complete_files
from alchemist_jobs.commands.stack import complete_stack
from alchemist_jobs.data import push, s3
from alchemist_jobs.data.s3 import error_code
from alchemist_jobs.data.source import dataset_uri, parse_s3_uri
from alchemist_jobs.errors import UserError
from alchemist_jobs.stack_kinds import kind_of


def add_parser(sub: argparse._SubParsersAction) -> None:
    data = command(
        sub,
        "data",
        "push, list and remove datasets in the stack's object store",
        [
            "alchemist data push ./imagenet --name imagenet",
            "alchemist data ls",
            "alchemist data ls --stack dev",
        ],
        description=__doc__.splitlines()[0],
    )
    verbs = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    verbs.required = True

    p = command(
        verbs,
        "push",
        "upload a directory as a named dataset (resumable)",
        [
            "alchemist data push ./imagenet --name imagenet",
            "alchemist data push ./digits --stack prod-us --quiet",
        ],
    )
    p.add_argument("dir", type=Path, metavar="DIR")
    p.add_argument("--name", help="dataset name (default: the directory's name)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _stack_args(p)
    p.set_defaults(func=cmd_push)

    p = command(
        verbs,
        "ls",
        "the datasets, their size and whether their push completed",
        ["alchemist data ls", "alchemist data ls --stack dev"],
    )
    _stack_args(p)
    p.set_defaults(func=cmd_ls)

    p = command(verbs, "rm", "delete a dataset", ["alchemist data rm imagenet"])
    p.add_argument("name", metavar="NAME")
    _stack_args(p)
    p.set_defaults(func=cmd_rm)


def _stack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--stack", default="local", help="whose object store (default: local)"
    ).completer = complete_stack  # type: ignore[attr-defined]  # argcomplete reads it; argparse stubs lack it
    p.add_argument(
        "--outputs",
        type=Path,
        default=None,
        help="a JSON file with the stack's `alchemist` output (instead of Pulumi)",
    ).completer = complete_files("json")  # type: ignore[attr-defined]  # argcomplete reads it; argparse stubs lack it
    p.add_argument(
        "--team",
        default=None,
        metavar="NAME",
        help=f"whose part of the store (default: ${E.TEAM.name}, else the stack's default team)",
    )


def object_store(stack: str, outputs: Path | None, team: str | None = None) -> Any:
    """The chosen stack's ObjectStore, under `team`'s prefix; one UserError line if it has none."""
    from alchemist_jobs.contract import ObjectStore
    from alchemist_jobs.stacks import no_team_on_local

    if not kind_of(stack).has_outputs:  # its store is named by the environment
        no_team_on_local(team)
        if outputs is not None:
            raise UserError(
                "--outputs: the local stack has no stack outputs; drop --outputs "
                "or name a cluster stack with --stack"
            )
        value = E.OBJECT_STORE.get(default="")
        if not value:
            raise UserError(
                f"--stack local: the local stack has no object store; accepted: set "
                f"{E.OBJECT_STORE.name}=s3://BUCKET (and AWS_ENDPOINT_URL for MinIO and "
                "other S3-compatible services), or --stack a stack that has one"
            )

        uri = parse_s3_uri(value, E.OBJECT_STORE.name)
        return ObjectStore(
            bucket=uri.bucket,
            region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
            endpoint=None,  # boto3's own (AWS_ENDPOINT_URL for MinIO and others)
            prefix="",
        )
    from alchemist_jobs.stacks import resolve

    out = resolve(stack, outputs, team)
    if out.object_store is None:
        raise UserError(
            f"--stack {stack}: this stack has no object store (its output has no "
            "`object_store`); accepted: a stack with `objectStore` in its config "
            "(docs/datasets.md)"
        )
    return out.object_store


@contextmanager
def _s3_errors(what: str) -> Iterator[None]:
    """boto3's failures as one line: no credentials, no endpoint, access denied, no bucket."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ClientError as e:
        raise UserError(f"{what}: the object store refused ({error_code(e)})") from None
    except BotoCoreError as e:
        raise UserError(f"{what}: {e}") from None


def cmd_push(args: argparse.Namespace) -> int:
    root = args.dir
    if not root.is_dir():
        raise UserError(f"DIR {str(root)!r}: not a directory; accepted: a directory of files to push")
    name = args.name or root.resolve().name
    store = object_store(args.stack, args.outputs, args.team)
    uri = dataset_uri(store.bucket, name, store.prefix)
    client = s3.client(store)
    with _s3_errors(str(uri)), _progress(args.quiet) as bar:
        done = push.push(client, root, uri, on_bytes=bar.advance, on_plan=bar.start)
    kept = len(done.files) - len(done.send)
    print(
        f"{uri}  {len(done.files)} files, {sum(s for s, _ in done.files.values())} bytes; "
        f"sent {len(done.send)} files ({done.send_bytes} bytes), {kept} already there"
        + (f", removed {len(done.stale)} stale" if done.stale else "")
    )
    print(f"use it with:  data: {{source: {uri}}}")
    return 0


class _Bar:
    """A rich progress bar of the bytes a push sends (on stderr; none with --quiet)."""

    def __init__(self, progress: Any):
        self.progress, self.task = progress, None

    def start(self, plan: Any) -> None:
        if self.progress is not None:
            self.task = self.progress.add_task(f"push {len(plan.send)} files", total=plan.send_bytes)

    def advance(self, n: int) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, advance=n)


@contextmanager
def _progress(quiet: bool) -> Iterator[_Bar]:
    if quiet:
        yield _Bar(None)
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=Console(file=sys.stderr),
    ) as progress:
        yield _Bar(progress)


def cmd_ls(args: argparse.Namespace) -> int:
    store = object_store(args.stack, args.outputs, args.team)
    with _s3_errors(f"s3://{store.bucket}"):
        found = push.list_datasets(s3.client(store), store.bucket, store.prefix)
    if not found:
        print(f"no datasets in s3://{store.bucket}/ (push one with `alchemist data push DIR`)")
        return 0
    print(f"{'NAME':24} {'FILES':>7} {'BYTES':>14}  {'STATE':10} SOURCE")
    for d in found:
        state = "complete" if d.complete else "incomplete"
        print(
            f"{d.name:24} {d.files:>7} {d.bytes:>14}  {state:10} {dataset_uri(store.bucket, d.name, store.prefix)}"
        )
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    store = object_store(args.stack, args.outputs, args.team)
    uri = dataset_uri(store.bucket, args.name, store.prefix, what="NAME")
    with _s3_errors(str(uri)):
        client = s3.client(store)
        if not s3.list_prefix(client, uri):
            names = [d.name for d in push.list_datasets(client, store.bucket, store.prefix)]
            raise UserError(
                f"NAME {args.name!r}: no such dataset in s3://{store.bucket}/; "
                f"accepted: {', '.join(names) or 'none (nothing pushed yet)'}"
            )
        n = push.remove(client, uri)
    print(f"removed {uri} ({n} files)")
    return 0
