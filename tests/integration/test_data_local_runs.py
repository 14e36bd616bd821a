"""A real local 2-worker run of the built-in digits task reading a staged dataset: from moto's S3 server and from a local directory."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from alchemist_jobs.data.examples import export_digits
from alchemist_jobs.rundir import RunDir
from tests.conftest import EXAMPLES, cli

sys.path.insert(0, str(Path(__file__).parent))
from s3_server import S3Server  # noqa: E402

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def server():
    srv = S3Server().start()
    yield srv
    srv.stop()


def runs(home: Path) -> list[RunDir]:
    return sorted((RunDir(p) for p in (home / "runs").iterdir()), key=lambda r: r.path.stat().st_mtime)


def digests(run: RunDir) -> set[str]:
    return {w["final_param_sha256"] for w in run.worker_records()}


def test_digits_from_object_storage_staged_once_per_node(server, tmp_path, monkeypatch):
    bucket = "digits-e2e"
    env = dict(AWS_ENDPOINT_URL=server.url, AWS_ACCESS_KEY_ID="testing",
               AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
               ALCHEMIST_OBJECT_STORE=f"s3://{bucket}")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    from alchemist_jobs.data import s3

    s3.client().create_bucket(Bucket=bucket)
    export_digits(tmp_path / "digits")  # the built-in task's own split, as .npz files
    home = tmp_path / "home"
    assert cli("data", "push", str(tmp_path / "digits"), "--quiet").returncode == 0
    server.clear()

    source = f"data.source=s3://{bucket}/datasets/digits"
    first = cli("run", str(EXAMPLES / "digits.yaml"), "--set", source, "--quiet", home=home)
    assert first.returncode == 0, first.stdout + first.stderr
    (run,) = runs(home)
    res = run.result()
    assert res["world_size"] == 2 and res["test_accuracy"] >= 0.90, res
    # two workers on one node: the files were fetched once (plus the push manifest)
    gets = sorted(r.path for r in server.object_gets(bucket))
    prefix = f"/{bucket}/datasets/digits/"
    assert gets == [prefix + ".alchemist-manifest.json", prefix + "test.npz", prefix + "train.npz"]

    server.clear()
    second = cli("run", str(EXAMPLES / "digits.yaml"), "--set", source, "--quiet", home=home)
    assert second.returncode == 0, second.stdout + second.stderr
    assert server.object_gets(bucket) == []  # the second job read the node cache

    # The same numbers as the built-in task preparing the data itself: staging changes nothing.
    builtin = cli("run", str(EXAMPLES / "digits.yaml"), "--quiet", home=home)
    assert builtin.returncode == 0, builtin.stdout + builtin.stderr
    a, b, c = runs(home)
    assert len(digests(a)) == 1 and digests(a) == digests(b) == digests(c)


def test_digits_from_a_local_directory(tmp_path):
    export_digits(tmp_path / "digits")
    home = tmp_path / "home"
    spec = tmp_path / "job.yaml"
    spec.write_text((EXAMPLES / "digits.yaml").read_text().replace(
        "  path: data/digits     # on the stack's shared file system",
        "  source: digits        # relative to this spec"))
    r = cli("run", str(spec), "--set", "hyper.epochs=2", "--quiet", home=home)
    assert r.returncode == 0, r.stdout + r.stderr
    (run,) = runs(home)
    assert run.result()["world_size"] == 2
    # the resolved spec names the directory absolutely; the node cache holds one copy of it
    assert f"source: {tmp_path / 'digits'}" in run.spec.read_text()
    (entry,) = (home / "cache" / "datasets" / "entries").iterdir()
    staged = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (entry / "data").iterdir()}
    assert staged == {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                      for p in (tmp_path / "digits").iterdir()}
