"""Staging: a job's `data.source` fetched once per node into the content-addressed cache, for workers to read.

Every worker calls `stage`; the cache's lock makes one of them per node download while the
others wait, and jobs staging the same content later find it there without fetching a byte.
A dataset pushed with `alchemist data push` is addressed by its manifest's ETag (one HEAD
request on a hit; the manifest lists every file's key, size and SHA-256, and a fill checks
each file against it); any other prefix by its listing's keys, sizes and ETags; a local
directory by its real path and every file's name, size and SHA-256 (read once per change of
the files: the key is remembered under their stat identity). Every key also holds the user's uid: on a node several accounts share, each has its own entries.
Where the cache lives (`data.cache`):

    node    $ALCHEMIST_DATA_CACHE (the node-local volume on clusters), else
            <shared root>/cache/datasets (locally: under ALCHEMIST_HOME)
    shared  <shared root>/cache/datasets (the shared file system: one fill per cluster)
    none    <run dir>/data (this run only)

$ALCHEMIST_DATA_CACHE_LIMIT (bytes, or e.g. `200Gi`) bounds the cache; least recently used
entries that no job is using are evicted to make room.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from alchemist_jobs import environment as E
from alchemist_jobs.data import s3
from alchemist_jobs.data.cache import DataError, Entry, NodeCache, parse_size
from alchemist_jobs.data.local_dir import LocalFile, list_files, sha256_listed
from alchemist_jobs.data.source import DATASETS_PREFIX, parse_s3_uri
from alchemist_jobs.errors import UserError

if TYPE_CHECKING:
    from alchemist_jobs.spec import JobSpec


def cache_for(spec: JobSpec, shared_root: Path, run_dir: Path | None) -> NodeCache:
    limit_text = E.DATA_CACHE_LIMIT.get()
    limit = parse_size(limit_text, E.DATA_CACHE_LIMIT.name) if limit_text else None
    mode = spec.data.cache
    if mode == "none":
        if run_dir is None:
            raise ValueError("data.cache none needs the run directory")
        return NodeCache(Path(run_dir) / "data", None)
    if mode == "node" and E.DATA_CACHE.get():
        return NodeCache(E.DATA_CACHE.require(), limit)
    return NodeCache(Path(shared_root) / "cache" / "datasets", limit)


def stage(spec: JobSpec, shared_root: Path, run_dir: Path | None = None) -> Entry:
    """The staged directory of `spec.data.source` (held in use until `release()`)."""
    source = spec.data.source
    if source is None:
        raise ValueError("stage() needs data.source; without it the data is data.path on the shared FS")
    cache = cache_for(spec, shared_root, run_dir)
    if source.startswith("s3://"):
        return _stage_s3(source, cache)
    return _stage_dir(Path(source), cache)


def _stage_s3(source: str, cache: NodeCache) -> Entry:
    """A pushed dataset is addressed by its manifest (every file's key, size and SHA-256), so a
    cache hit costs one HEAD; any other prefix by its listing (keys, sizes, ETags)."""
    uri = parse_s3_uri(source)
    client = s3.client()
    etag = s3.manifest_etag(client, uri)
    if etag is not None:

        def fill(dest: Path) -> None:
            objects = s3.list_prefix(client, uri)
            cache.reserve(sum(o.size for o in objects if o.rel != s3.MANIFEST))
            s3.download(client, uri, objects, dest, manifest_etag=etag)

        return cache.acquire(user_key(f"manifest {etag}"), fill)
    objects = s3.list_prefix(client, uri)
    if not objects:
        raise DataError(
            f"{uri}: no objects there; accepted: a prefix holding the dataset (`alchemist data ls`)"
        )
    if uri.prefix.startswith(DATASETS_PREFIX) or f"/{DATASETS_PREFIX}" in uri.prefix:
        raise DataError(
            f"{uri}: its push has not finished (no {s3.MANIFEST}); run `alchemist "
            "data push` again to complete it"
        )
    size = sum(o.size for o in objects)
    return cache.acquire(
        user_key(f"listing {s3.listing_key(objects)}"),
        lambda dest: s3.download(client, uri, objects, dest),
        size,
    )


def user_key(identity: str) -> str:
    """The cache key of `identity` for this user: each account on a node has its own entries,
    so no account ever reads an entry another one filled (NodeCache also checks the owner)."""
    return hashlib.sha256(f"uid {os.getuid()}\n{identity}".encode()).hexdigest()


def local_listing(root: Path, where: str = "data.source") -> list[tuple[LocalFile, str]]:
    """Every file under a local directory with its SHA-256, sorted by name; a link that
    leaves the directory is refused (data/local_dir.py)."""
    files = list_files(root, f"{where} {root}")
    with ThreadPoolExecutor(max_workers=4) as pool:
        digests = list(pool.map(lambda f: sha256_listed(f, f"{where} {root}"), files))
    return list(zip(files, digests))


def listing_identity(root: Path, listing: list[tuple[LocalFile, str]]) -> str:
    """What names a local dataset: the directory's real path and each file's name, size and
    SHA-256. Names, sizes and times alone are not the content: two directories with equal ones
    and different bytes are two datasets."""
    return json.dumps(
        {"source": str(Path(root).resolve()), "files": [[f.rel, f.size, digest] for f, digest in listing]}
    )


def _stage_dir(root: Path, cache: NodeCache) -> Entry:
    """Every worker of a node stages: the first hashes the directory, the others find its key
    remembered under the files' stat identity (path, size, mtime, ctime, inode: any change to
    a file changes its ctime, which no one but root can set back)."""
    if not root.is_dir():
        raise DataError(f"data.source {root}: no such directory on this node")
    where = f"data.source {root}"
    try:
        files = list_files(root, where)
    except UserError as e:
        raise DataError(str(e)) from None
    hashed: list[list[tuple[LocalFile, str]]] = []

    def content_key() -> str:
        try:
            hashed.append(local_listing(root))
        except UserError as e:
            raise DataError(str(e)) from None
        return user_key(listing_identity(root, hashed[0]))

    by_stat = user_key(
        json.dumps(
            {
                "source": str(root.resolve()),
                "stat": [[f.rel, f.size, f.mtime_ns, f.ctime_ns, f.dev, f.ino] for f in files],
            }
        )
    )
    key = cache.memo(by_stat, content_key)

    def fill(dest: Path) -> None:
        listing = hashed[0] if hashed else None
        if listing is None:
            content_key()
            listing = hashed[0]
        if user_key(listing_identity(root, listing)) != key:
            raise DataError(
                f"{where}: it changed while it was staged; accepted: a directory "
                "that does not change during a run"
            )
        for f, digest in listing:
            target = dest / f.rel
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(target, "wb") as out:
                try:
                    got = sha256_listed(f, where, out.write)
                except UserError as e:
                    raise DataError(str(e)) from None
            if got != digest:  # the copy is what was hashed, or nothing
                raise DataError(
                    f"{where}: {f.rel} changed while it was staged; accepted: a "
                    "directory that does not change during a run"
                )

    return cache.acquire(key, fill, sum(f.size for f in files))
