"""`data.source` / `data.cache` in the job spec, `object_store` in the contract, and boto3 staying unimported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alchemist_jobs.contract import StackOutput
from alchemist_jobs.errors import UserError
from alchemist_jobs.spec import parse_spec

REPO = Path(__file__).resolve().parents[2]


def spec(data: dict, spec_dir: Path | None = None):
    return parse_spec({"name": "j", "task": {"builtin": "digits"}, "data": data}, "job.yaml", spec_dir)


def test_defaults_keep_the_shared_fs_path():
    s = spec({})
    assert (s.data.source, s.data.cache, s.data.path) == (None, "node", "data")


def test_s3_source_and_cache_modes():
    s = spec({"source": "s3://my-bucket/datasets/digits", "cache": "shared"})
    assert s.data.source == "s3://my-bucket/datasets/digits" and s.data.cache == "shared"


@pytest.mark.parametrize("uri", ["s3://", "s3://UPPER/x", "s3://ab/x", "s3://b_ucket/x", "s3://bucket/../x"])
def test_bad_s3_uri_is_one_line_naming_the_field(uri):
    with pytest.raises(UserError) as err:
        spec({"source": uri})
    assert str(err.value).startswith(f"job.yaml: data.source: {uri!r} is not an object-store URI")
    assert "accepted: s3://BUCKET/PREFIX" in str(err.value)


def test_bad_cache_mode_names_what_is_accepted():
    with pytest.raises(
        UserError, match=r"data.cache: 'disk' is invalid; accepted: one of node, shared or none"
    ):
        spec({"cache": "disk"})


def test_local_directory_is_resolved_from_the_spec_dir(tmp_path):
    (tmp_path / "d").mkdir()
    assert spec({"source": "d"}, tmp_path).data.source == str(tmp_path / "d")


def test_missing_local_directory_is_one_line(tmp_path):
    with pytest.raises(UserError) as err:
        spec({"source": "nope"}, tmp_path)
    assert str(err.value) == (
        f"job.yaml: data.source: 'nope' is not a directory (looked for "
        f"{tmp_path / 'nope'}); accepted: s3://BUCKET/PREFIX or a local "
        "directory, relative to the spec"
    )


def _output(**extra) -> dict:
    data = json.loads((REPO / "tests/fixtures/stack_outputs/dev.json").read_text())
    data.update(extra)
    return data


def test_contract_object_store_optional_and_typed():
    assert StackOutput.parse(_output(), "dev").object_store is None
    out = StackOutput.parse(
        _output(
            object_store={"endpoint": "http://minio.lab:9000", "bucket": "alchemist-data", "region": "lab"}
        ),
        "dev",
    )
    assert (out.object_store.endpoint, out.object_store.bucket) == ("http://minio.lab:9000", "alchemist-data")
    aws = StackOutput.parse(_output(object_store={"bucket": "alchemist-data", "region": "eu-west-1"}), "dev")
    assert aws.object_store.endpoint is None


@pytest.mark.parametrize(
    "store,where",
    [
        ({"endpoint": "minio:9000", "bucket": "b-1"}, "breaks the contract at object_store.endpoint"),
        ({"endpoint": "http://m", "bucket": "b"}, "breaks the contract at object_store.bucket"),
        ({"bucket": "bkt", "extra": 1}, "has `object_store.extra`, which this alchemist's contract does not have"),
    ],
)
def test_contract_object_store_breaks_are_one_line(store, where):
    with pytest.raises(UserError, match=where):
        StackOutput.parse(_output(object_store=store), "dev")
