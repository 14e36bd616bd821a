"""Where a job's data comes from: `data.source` parsed into a shared-FS path, a local directory or an S3 prefix."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from alchemist_jobs.data.local_dir import list_files
from alchemist_jobs.errors import UserError

# S3 bucket naming rules (lower case, digits, dots, hyphens; 3 to 63 characters).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
DATASETS_PREFIX = "datasets/"  # where `alchemist data push` puts named datasets


@dataclass(frozen=True)
class S3Uri:
    bucket: str
    prefix: str  # "" or ends with "/"

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_s3_uri(uri: str, where: str = "data.source") -> S3Uri:
    """`s3://bucket/some/prefix` -> S3Uri; one UserError line when it is not one."""
    rest = uri.removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    if not uri.startswith("s3://") or not _BUCKET.fullmatch(bucket) or ".." in prefix:
        raise UserError(
            f"{where}: {uri!r} is not an object-store URI; accepted: "
            "s3://BUCKET/PREFIX with a valid bucket name (3-63 of a-z 0-9 . -)"
        )
    prefix = prefix.strip("/")
    return S3Uri(bucket, prefix + "/" if prefix else "")


def resolve_local_source(value: str, spec_dir: Path, where: str) -> str:
    """A local directory `data.source`, made absolute (relative paths are from the spec file)."""
    path = (Path(spec_dir) / Path(value).expanduser()).resolve()
    if not path.is_dir():
        raise UserError(
            f"{where}: data.source: {value!r} is not a directory (looked for {path}); "
            "accepted: s3://BUCKET/PREFIX or a local directory, relative to the spec"
        )

    list_files(path, f"{where}: data.source {path}")  # a link out of it is refused now, not in a worker
    return str(path)


def dataset_uri(bucket: str, name: str, prefix: str = "", what: str = "--name") -> S3Uri:
    """Where the dataset `name` pushed with `alchemist data push` lives (under the team's
    `prefix`); `what` is how the user gave the name, for the error."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", name):
        raise UserError(
            f"{what} {name!r}: not a dataset name; accepted: letters, digits, '.', "
            "'_', '-' (up to 128, starting with a letter or digit)"
        )
    return S3Uri(bucket, f"{prefix}{DATASETS_PREFIX}{name}/")  # prefix: the team's (contract)
