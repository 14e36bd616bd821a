"""S3 access for datasets through boto3 (imported lazily) and its transfer manager: list, download, verify.

Any S3-compatible service works: the endpoint is the stack's `object_store.endpoint`, or
boto3's own `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_S3`, or boto3's regional default. Credentials
come from boto3's usual chain (environment, a web identity token a service account projects, a
profile).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alchemist_jobs.data.cache import DataError
from alchemist_jobs.data.source import S3Uri

if TYPE_CHECKING:
    from alchemist_jobs.contract import ObjectStore

# Written last by `alchemist data push`: every file's size and SHA-256. Its presence means the
# push completed; staging checks every downloaded file against it.
MANIFEST = ".alchemist-manifest.json"
CHUNK = 8 * 2**20  # multipart threshold and part size
CONCURRENCY = 16  # parallel requests (many small files are latency-bound, not bandwidth-bound)


@dataclass(frozen=True)
class Obj:
    rel: str  # key relative to the prefix
    size: int
    etag: str


def client(store: ObjectStore | None = None) -> Any:
    """An S3 client for the stack's object store (or boto3's defaults), sized for parallel transfers."""
    import boto3
    from botocore.config import Config

    endpoint = store.endpoint if store else None
    custom = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    config = Config(
        max_pool_connections=CONCURRENCY * 2,
        retries={"max_attempts": 5, "mode": "standard"},
        # S3-compatible services (MinIO, Ceph) want bucket names in the path
        s3={"addressing_style": "path"} if custom else None,
    )
    region = store.region if store else None
    return boto3.client("s3", endpoint_url=endpoint, region_name=region, config=config)


def transfer_manager(s3: Any, concurrency: int = CONCURRENCY) -> Any:
    from boto3.s3.transfer import TransferConfig, create_transfer_manager

    config = TransferConfig(
        multipart_threshold=CHUNK, multipart_chunksize=CHUNK, max_concurrency=concurrency, use_threads=True
    )
    return create_transfer_manager(s3, config)


def list_prefix(s3: Any, uri: S3Uri) -> list[Obj]:
    """Every object under the prefix (directory markers skipped), sorted by key."""
    from botocore.exceptions import ClientError

    out: list[Obj] = []
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=uri.bucket, Prefix=uri.prefix):
            for o in page.get("Contents", []):
                rel = o["Key"][len(uri.prefix) :]
                if rel and not rel.endswith("/"):
                    out.append(Obj(rel, int(o["Size"]), o.get("ETag", "").strip('"')))
    except ClientError as e:
        raise DataError(f"{uri}: cannot list it ({error_code(e)})") from None
    return sorted(out, key=lambda o: o.rel)


def error_code(e: Exception) -> str:
    resp = getattr(e, "response", None) or {}
    return (resp.get("Error") or {}).get("Code") or type(e).__name__


def listing_key(objects: list[Obj]) -> str:
    """The content address of a listing: keys, sizes and ETags (SHA-256, hex)."""
    h = hashlib.sha256()
    for o in objects:
        h.update(json.dumps([o.rel, o.size, o.etag]).encode() + b"\n")
    return h.hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(2**20):
            h.update(chunk)
    return h.hexdigest()


def manifest_etag(s3: Any, uri: S3Uri) -> str | None:
    """The ETag of the push manifest under the prefix (one HEAD), or None if there is none."""
    from botocore.exceptions import ClientError

    try:
        return s3.head_object(Bucket=uri.bucket, Key=uri.prefix + MANIFEST)["ETag"].strip('"')
    except ClientError as e:
        if error_code(e) in ("404", "NoSuchKey", "NotFound"):
            return None
        raise DataError(f"{uri}: cannot read it ({error_code(e)})") from None


def read_manifest(s3: Any, uri: S3Uri, etag: str | None = None) -> dict[str, dict]:
    """The push manifest's files; with `etag`, exactly that version of it (else a DataError)."""
    from botocore.exceptions import ClientError

    extra = {"IfMatch": f'"{etag}"'} if etag else {}
    try:
        body = s3.get_object(Bucket=uri.bucket, Key=uri.prefix + MANIFEST, **extra)["Body"].read()
        return json.loads(body)["files"]
    except ClientError as e:
        raise DataError(
            f"{uri}{MANIFEST}: changed or vanished while staging ({error_code(e)}): "
            "a push is under way; stage again when it has finished"
        ) from None
    except (ValueError, KeyError, TypeError):
        raise DataError(
            f"{uri}{MANIFEST}: not a manifest written by `alchemist data push`; push the dataset again"
        ) from None


def download(
    s3: Any,
    uri: S3Uri,
    objects: list[Obj],
    dest: Path,
    on_bytes: Callable[[int], None] | None = None,
    manifest_etag: str | None = None,
) -> None:
    """Download `objects` of `uri` into `dest` in parallel, then check each one.

    A file whose size differs from the listing, or whose SHA-256 differs from the push's
    manifest, is a DataError naming it; the caller discards `dest`, so nothing half-written
    is ever used.
    """
    from botocore.exceptions import ClientError
    from s3transfer.subscribers import BaseSubscriber

    class _Known(BaseSubscriber):
        """Size and ETag from the listing: no HeadObject per file, and every ranged GET of a
        large object asks for that same version (If-Match), so parts never mix versions."""

        def __init__(self, obj: Obj):
            self.obj = obj

        def on_queued(self, future: Any, **kwargs: Any) -> None:
            future.meta.provide_transfer_size(self.obj.size)
            if self.obj.etag:
                future.meta.provide_object_etag(f'"{self.obj.etag}"')

        def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
            if on_bytes:
                on_bytes(bytes_transferred)

    has_manifest = manifest_etag is not None or any(o.rel == MANIFEST for o in objects)
    manifest = read_manifest(s3, uri, manifest_etag) if has_manifest else None
    files = [o for o in objects if o.rel != MANIFEST]
    if not files:
        raise DataError(
            f"{uri}: no objects there; accepted: a prefix holding the dataset (`alchemist data ls`)"
        )
    if manifest is not None:
        _check_listing(uri, files, manifest)
    with transfer_manager(s3) as tm:
        futures = []
        for o in files:
            target = dest / o.rel
            target.parent.mkdir(parents=True, exist_ok=True)
            futures.append(
                (o, tm.download(uri.bucket, uri.prefix + o.rel, str(target), subscribers=[_Known(o)]))
            )
        for o, fut in futures:
            try:
                fut.result()
            except ClientError as e:
                raise DataError(f"{uri}{o.rel}: download failed ({error_code(e)})") from None
            except Exception as e:  # truncated bodies, connection resets after retries
                raise DataError(f"{uri}{o.rel}: download failed ({type(e).__name__}: {e})") from None
    _verify(uri, dest, files, manifest)


def _check_listing(uri: S3Uri, files: list[Obj], manifest: dict[str, dict]) -> None:
    listed = {o.rel: o.size for o in files}
    expected = {rel: int(m["size"]) for rel, m in manifest.items()}
    for rel in sorted(set(listed) | set(expected)):
        if listed.get(rel) != expected.get(rel):
            raise DataError(
                f"{uri}{rel}: {_describe(listed.get(rel))} in the bucket but "
                f"{_describe(expected.get(rel))} in the manifest of `alchemist data push` (changed, "
                "truncated or partly pushed); nothing was staged; push the dataset again"
            )


def _describe(size: int | None) -> str:
    return "absent" if size is None else f"{size} bytes"


def _verify(uri: S3Uri, dest: Path, files: list[Obj], manifest: dict | None) -> None:
    def check(o: Obj) -> str | None:
        path = dest / o.rel
        size = path.stat().st_size
        if size != o.size:
            return f"{uri}{o.rel}: got {size} bytes, the listing says {o.size} (truncated)"
        if manifest is not None and sha256_file(path) != manifest[o.rel]["sha256"]:
            return (
                f"{uri}{o.rel}: SHA-256 differs from the manifest of `alchemist data push` "
                "(corrupt or overwritten)"
            )
        return None

    with ThreadPoolExecutor(max_workers=min(8, (os.cpu_count() or 1) * 2)) as pool:
        problems = [p for p in pool.map(check, files) if p]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise DataError(f"{problems[0]}; nothing was staged{more}")
