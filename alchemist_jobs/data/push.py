"""`alchemist data push|ls|rm` underneath: resumable parallel uploads, listings and deletes of named datasets.

A push compares the directory with what the prefix already holds: an object whose size and
recorded SHA-256 (object metadata `sha256`) match its file is not sent again, so a rerun after
an interruption sends only what is missing. Objects the directory no longer has are deleted,
and the manifest (every file's size and SHA-256) is written last: it marks a complete push.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alchemist_jobs.data import s3 as s3mod
from alchemist_jobs.data.local_dir import LocalFile, list_files, open_listed, sha256_listed
from alchemist_jobs.data.source import DATASETS_PREFIX, S3Uri
from alchemist_jobs.errors import UserError

UPLOAD_BATCH = 64  # files open at once while uploading


@dataclass
class PushPlan:
    files: dict[str, tuple[int, str]]  # rel -> (size, sha256) of the local directory
    send: list[str]  # rel paths to upload
    stale: list[str]  # objects under the prefix the directory does not have
    sources: dict[str, LocalFile] = field(default_factory=dict)  # rel -> the file read

    @property
    def send_bytes(self) -> int:
        return sum(self.files[r][0] for r in self.send)


def local_files(root: Path) -> tuple[dict[str, tuple[int, str]], dict[str, LocalFile]]:
    """(rel -> (size, sha256), rel -> the file) of the directory; a link out of it is refused."""
    where = f"DIR {str(root)!r}"
    listed = list_files(root, where)
    if not listed:
        raise UserError(f"{where}: no files to push; accepted: a directory holding files")
    if any(f.rel == s3mod.MANIFEST for f in listed):
        raise UserError(
            f"{where}: holds {s3mod.MANIFEST}, a name reserved for the push "
            "manifest; accepted: a directory without it"
        )
    with ThreadPoolExecutor(max_workers=4) as pool:
        digests = list(pool.map(lambda f: sha256_listed(f, where), listed))
    return ({f.rel: (f.size, d) for f, d in zip(listed, digests)}, {f.rel: f for f in listed})


def plan(client: Any, root: Path, uri: S3Uri) -> PushPlan:
    files, sources = local_files(root)
    remote = {o.rel: o for o in s3mod.list_prefix(client, uri)}
    same_size = [r for r, (size, _) in files.items() if r in remote and remote[r].size == size]

    def recorded(rel: str) -> str | None:
        head = client.head_object(Bucket=uri.bucket, Key=uri.prefix + rel)
        return head.get("Metadata", {}).get("sha256")

    with ThreadPoolExecutor(max_workers=s3mod.CONCURRENCY) as pool:
        present = {r for r, d in zip(same_size, pool.map(recorded, same_size)) if d == files[r][1]}
    send = [r for r in files if r not in present]
    stale = [r for r in remote if r not in files and r != s3mod.MANIFEST]
    return PushPlan(files, send, stale, sources)


def push(
    client: Any,
    root: Path,
    uri: S3Uri,
    on_bytes: Callable[[int], None] | None = None,
    on_plan: Callable[[PushPlan], None] | None = None,
) -> PushPlan:
    """Make `uri` hold exactly the files of `root`; returns what was (to be) sent."""
    from s3transfer.subscribers import BaseSubscriber

    class _Progress(BaseSubscriber):
        def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
            if on_bytes:
                on_bytes(bytes_transferred)

    p = plan(client, root, uri)
    if on_plan:
        on_plan(p)
    if p.send or p.stale:  # the dataset is about to change: it is incomplete until the end
        client.delete_object(Bucket=uri.bucket, Key=uri.prefix + s3mod.MANIFEST)
    # Each file is sent from a descriptor opened and checked as the file that was hashed (a
    # path is never reopened by name), a batch at a time to bound the descriptors held.
    where = f"DIR {str(root)!r}"
    with s3mod.transfer_manager(client) as tm:
        for i in range(0, len(p.send), UPLOAD_BATCH):
            batch = p.send[i : i + UPLOAD_BATCH]
            opened: list[Any] = []
            try:
                for rel in batch:
                    opened.append(open_listed(p.sources[rel], where))
                futures = [
                    tm.upload(
                        fh,
                        uri.bucket,
                        uri.prefix + rel,
                        extra_args={"Metadata": {"sha256": p.files[rel][1]}},
                        subscribers=[_Progress()],
                    )
                    for rel, fh in zip(batch, opened)
                ]
                for f in futures:
                    f.result()
            finally:
                for fh in opened:
                    fh.close()
    _delete(client, uri, p.stale)
    manifest = {"version": 1, "files": {r: {"size": s, "sha256": d} for r, (s, d) in p.files.items()}}
    client.put_object(
        Bucket=uri.bucket,
        Key=uri.prefix + s3mod.MANIFEST,
        Body=json.dumps(manifest, indent=1).encode(),
        ContentType="application/json",
    )
    return p


def _delete(client: Any, uri: S3Uri, rels: list[str]) -> None:
    for i in range(0, len(rels), 1000):  # DeleteObjects takes at most 1000 keys
        batch = [{"Key": uri.prefix + r} for r in rels[i : i + 1000]]
        client.delete_objects(Bucket=uri.bucket, Delete={"Objects": batch, "Quiet": True})


@dataclass
class DatasetInfo:
    name: str
    files: int
    bytes: int
    complete: bool  # the manifest is there: the last push finished


def list_datasets(client: Any, bucket: str, prefix: str = "") -> list[DatasetInfo]:
    found: dict[str, DatasetInfo] = {}
    for o in s3mod.list_prefix(client, S3Uri(bucket, prefix + DATASETS_PREFIX)):
        name, _, rel = o.rel.partition("/")
        info = found.setdefault(name, DatasetInfo(name, 0, 0, False))
        if rel == s3mod.MANIFEST:
            info.complete = True
        else:
            info.files += 1
            info.bytes += o.size
    return [found[n] for n in sorted(found)]


def remove(client: Any, uri: S3Uri) -> int:
    """Delete every object under the prefix (the manifest first); returns how many."""
    rels = [o.rel for o in s3mod.list_prefix(client, uri)]
    if s3mod.MANIFEST in rels:
        client.delete_object(Bucket=uri.bucket, Key=uri.prefix + s3mod.MANIFEST)
        rels.remove(s3mod.MANIFEST)
    _delete(client, uri, rels)
    return len(rels)
