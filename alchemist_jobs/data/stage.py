"""Staging: a job's `data.source` fetched once per node into the content-addressed cache, for workers to read.

Every worker calls `stage`; the cache's lock makes one of them per node download while the
others wait, and jobs staging the same content later find it there without fetching a byte.
A dataset pushed with `alchemist data push` is addressed by its manifest's ETag (one HEAD
request on a hit; the manifest lists every file's key, size and SHA-256, and a fill checks
each file against it); any other prefix by its listing's keys, sizes and ETags.
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
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from alchemist_jobs.data.cache import DataError, Entry, NodeCache, parse_size
from alchemist_jobs.data.source import DATASETS_PREFIX, parse_s3_uri

if TYPE_CHECKING:
    from alchemist_jobs.spec import JobSpec

CACHE_ENV = "ALCHEMIST_DATA_CACHE"
LIMIT_ENV = "ALCHEMIST_DATA_CACHE_LIMIT"


def cache_for(spec: "JobSpec", shared_root: Path, run_dir: Path | None) -> NodeCache:
    limit_text = os.environ.get(LIMIT_ENV)
    limit = parse_size(limit_text, LIMIT_ENV) if limit_text else None
    mode = spec.data.cache
    if mode == "none":
        if run_dir is None:
            raise ValueError("data.cache none needs the run directory")
        return NodeCache(Path(run_dir) / "data", None)
    if mode == "node" and os.environ.get(CACHE_ENV):
        return NodeCache(Path(os.environ[CACHE_ENV]), limit)
    return NodeCache(Path(shared_root) / "cache" / "datasets", limit)


def stage(spec: "JobSpec", shared_root: Path, run_dir: Path | None = None) -> Entry:
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
    from alchemist_jobs.data import s3

    uri = parse_s3_uri(source)
    client = s3.client()
    etag = s3.manifest_etag(client, uri)
    if etag is not None:
        def fill(dest: Path) -> None:
            objects = s3.list_prefix(client, uri)
            cache.reserve(sum(o.size for o in objects if o.rel != s3.MANIFEST))
            s3.download(client, uri, objects, dest, manifest_etag=etag)

        return cache.acquire(hashlib.sha256(f"manifest {etag}".encode()).hexdigest(), fill)
    objects = s3.list_prefix(client, uri)
    if not objects:
        raise DataError(f"{uri}: no objects there; accepted: a prefix holding the dataset "
                        "(`alchemist data ls`)")
    if uri.prefix.startswith(DATASETS_PREFIX) or f"/{DATASETS_PREFIX}" in uri.prefix:
        raise DataError(f"{uri}: its push has not finished (no {s3.MANIFEST}); run `alchemist "
                        "data push` again to complete it")
    size = sum(o.size for o in objects)
    return cache.acquire(s3.listing_key(objects),
                         lambda dest: s3.download(client, uri, objects, dest), size)


def local_listing(root: Path) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime ns) of every file under a local directory, sorted."""
    out = []
    for f in sorted(root.rglob("*")):
        if f.is_file():
            st = f.stat()
            out.append((f.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns))
    return out


def _stage_dir(root: Path, cache: NodeCache) -> Entry:
    if not root.is_dir():
        raise DataError(f"data.source {root}: no such directory on this node")
    listing = local_listing(root)
    key = hashlib.sha256(json.dumps(listing).encode()).hexdigest()

    def fill(dest: Path) -> None:
        for rel, _, _ in listing:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, dest / rel)

    return cache.acquire(key, fill, sum(size for _, size, _ in listing))
