"""Datasets against moto's S3 server on 127.0.0.1: push, stage, cache hits, concurrency, corruption, resumed pushes.

The server is moto's own WSGI app on a real socket (tests/integration/s3_server.py); it
records every request, so "no GET of object data" and "downloaded once" are counted at the
server, not inferred from our code.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from alchemist_jobs.cli import main
from alchemist_jobs.data.cache import DataError
from alchemist_jobs.data.s3 import MANIFEST
from alchemist_jobs.data.source import parse_s3_uri
from alchemist_jobs.data.stage import stage
from alchemist_jobs.spec import parse_spec

sys.path.insert(0, str(Path(__file__).parent))
from s3_server import S3Server  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server():
    srv = S3Server().start()
    yield srv
    srv.stop()


@pytest.fixture
def s3env(server, monkeypatch, request):
    """boto3 pointed at the server; a fresh bucket per test; the server's request log cleared."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())
    bucket = f"t-{name[:40].strip('-')}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    env = dict(AWS_ENDPOINT_URL=server.url, AWS_ACCESS_KEY_ID="testing",
               AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
               ALCHEMIST_OBJECT_STORE=f"s3://{bucket}")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("ALCHEMIST_DATA_CACHE", raising=False)
    monkeypatch.delenv("ALCHEMIST_DATA_CACHE_LIMIT", raising=False)
    from alchemist_jobs.data import s3

    s3.client().create_bucket(Bucket=bucket)
    server.clear()
    server.put_gate, server.puts_seen, server.gets_wait_for_heads, server.heads_seen = None, 0, 0, 0
    return bucket


def make_dataset(root: Path, files: int = 12, size: int = 50_000) -> Path:
    """`files` files of distinct random bytes, some in subdirectories, one larger than a part."""
    root.mkdir(parents=True)
    for i in range(files):
        path = root / (f"shard-{i:03d}.bin" if i % 3 else f"sub/dir/s{i:03d}.bin")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
    (root / "large.bin").write_bytes(os.urandom(9 * 2**20))  # multipart (8 MiB parts)
    return root


def spec_for(uri: str, cache: str = "node"):
    return parse_spec({"name": "ds", "task": {"builtin": "digits"},
                       "data": {"source": uri, "cache": cache}}, "test")


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def push(src: Path, name: str, *extra: str) -> int:
    return main(["data", "push", str(src), "--name", name, "--quiet", *extra])


def test_push_then_stage_gives_the_same_files(s3env, server, tmp_path, capsys):
    src = make_dataset(tmp_path / "src")
    assert push(src, "shards") == 0
    assert f"s3://{s3env}/datasets/shards/" in capsys.readouterr().out
    server.clear()
    entry = stage(spec_for(f"s3://{s3env}/datasets/shards"), tmp_path / "home")
    assert entry.filled
    assert tree(entry.path) == tree(src)
    assert entry.path.is_relative_to(tmp_path / "home" / "cache" / "datasets")
    # each object fetched once; the large one in 8 MiB ranges (2 GETs)
    gets = [r.path for r in server.object_gets(s3env)]
    assert sorted(set(gets)) == sorted({f"/{s3env}/datasets/shards/{k}" for k in [*tree(src), MANIFEST]})
    assert gets.count(f"/{s3env}/datasets/shards/large.bin") == 2


def test_second_job_stage_makes_no_get_of_object_data(s3env, server, tmp_path):
    src = make_dataset(tmp_path / "src", files=5)
    assert push(src, "d") == 0
    uri = f"s3://{s3env}/datasets/d/"
    first = stage(spec_for(uri), tmp_path / "home")
    first.release()
    server.clear()
    # the second job is another process on the same node
    code = textwrap.dedent(f"""
        from pathlib import Path
        from alchemist_jobs.data.stage import stage
        from alchemist_jobs.spec import parse_spec
        spec = parse_spec({{"name": "j2", "task": {{"builtin": "digits"}}, "data": {{"source": {uri!r}}}}}, "t")
        e = stage(spec, Path({str(tmp_path / 'home')!r}))
        print(e.filled, e.path)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", str(first.path)]
    assert server.object_gets(s3env) == []
    # one HEAD of the push manifest, whose ETag addresses the content: no listing, no GET
    assert [(r.method, r.path) for r in server.requests] == [("HEAD", f"/{s3env}/datasets/d/{MANIFEST}")]


def test_two_concurrent_stages_download_once(s3env, server, tmp_path):
    src = make_dataset(tmp_path / "src", files=6)
    assert push(src, "d") == 0
    server.clear()
    # no object is served before both stagers have looked the dataset up: truly concurrent
    server.gets_wait_for_heads, server.heads_seen = 2, 0
    code = textwrap.dedent(f"""
        from pathlib import Path
        from alchemist_jobs.data.stage import stage
        from alchemist_jobs.spec import parse_spec
        spec = parse_spec({{"name": "j", "task": {{"builtin": "digits"}}, "data": {{"source": "s3://{s3env}/datasets/d"}}}}, "t")
        e = stage(spec, Path({str(tmp_path / 'home')!r}))
        print(e.filled, e.path)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env=os.environ) for _ in range(2)]
    outs = [p.communicate(timeout=240)[0].split() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert sorted(o[0] for o in outs) == ["False", "True"]
    assert outs[0][1] == outs[1][1]
    gets = [r.path for r in server.object_gets(s3env)]
    prefix = f"/{s3env}/datasets/d/"
    assert sorted(gets) == sorted([prefix + k for k in [*tree(src), MANIFEST]] + [prefix + "large.bin"])
    assert tree(Path(outs[0][1])) == tree(src)


def _nothing_visible(home: Path) -> None:
    cache = home / "cache" / "datasets"
    assert list((cache / "entries").iterdir()) == []
    assert list((cache / "tmp").iterdir()) == []


def test_corrupt_object_is_one_clear_error_and_nothing_is_staged(s3env, tmp_path):
    from alchemist_jobs.data import s3

    src = make_dataset(tmp_path / "src", files=4)
    assert push(src, "d") == 0
    key = "datasets/d/shard-001.bin"
    s3.client().put_object(Bucket=s3env, Key=key, Body=os.urandom(50_000))  # same size, other bytes
    with pytest.raises(DataError) as err:
        stage(spec_for(f"s3://{s3env}/datasets/d"), tmp_path / "home")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"s3://{s3env}/datasets/d/shard-001.bin: SHA-256 differs from the manifest")
    assert "nothing was staged" in msg
    _nothing_visible(tmp_path / "home")


def test_truncated_object_is_one_clear_error_and_nothing_is_staged(s3env, tmp_path):
    from alchemist_jobs.data import s3

    src = make_dataset(tmp_path / "src", files=4)
    assert push(src, "d") == 0
    key = "datasets/d/shard-002.bin"
    s3.client().put_object(Bucket=s3env, Key=key, Body=(src / "shard-002.bin").read_bytes()[:1000])
    with pytest.raises(DataError) as err:
        stage(spec_for(f"s3://{s3env}/datasets/d"), tmp_path / "home")
    assert str(err.value) == (
        f"s3://{s3env}/datasets/d/shard-002.bin: 1000 bytes in the bucket but 50000 bytes in the "
        "manifest of `alchemist data push` (changed, truncated or partly pushed); nothing was "
        "staged; push the dataset again")
    _nothing_visible(tmp_path / "home")


def test_interrupted_push_resumes_sending_only_what_is_missing(s3env, server, tmp_path):
    src = make_dataset(tmp_path / "src", files=10, size=20_000)
    (src / "large.bin").unlink()  # single-PUT files only: the gate counts whole objects
    server.put_gate, server.puts_allowed, server.puts_seen = threading.Event(), 4, 0
    proc = subprocess.Popen([sys.executable, "-m", "alchemist_jobs", "data", "push", str(src),
                             "--name", "d", "--quiet"], env=os.environ, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    server.wait_for_puts(5)  # 4 stored, the 5th held at the gate: kill the push there
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    server.put_gate.set()  # the held requests are answered 503; nothing more is stored
    server.put_gate = None
    from alchemist_jobs.data import s3

    there = {o.rel for o in s3.list_prefix(s3.client(), parse_s3_uri(f"s3://{s3env}/datasets/d"))}
    # at most the 4 let through (one may have been cut mid-body by the kill: S3 keeps none of it)
    assert 0 < len(there) <= 4 and MANIFEST not in there
    assert main(["data", "ls"]) == 0
    server.clear()
    assert push(src, "d") == 0
    sent = sorted(r.path.rsplit("/datasets/d/", 1)[1] for r in server.object_puts(s3env))
    assert sent == sorted([*(set(tree(src)) - there), MANIFEST])
    entry = stage(spec_for(f"s3://{s3env}/datasets/d"), tmp_path / "home")
    assert tree(entry.path) == tree(src)


def test_ls_shows_an_interrupted_push_as_incomplete_and_rm_removes(s3env, tmp_path, capsys):
    from alchemist_jobs.data import s3

    src = make_dataset(tmp_path / "src", files=3)
    assert push(src, "done") == 0
    s3.client().put_object(Bucket=s3env, Key="datasets/half/a.bin", Body=b"abc")
    capsys.readouterr()
    assert main(["data", "ls"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["done"][1:4] == ["4", str(3 * 50_000 + 9 * 2**20), "complete"]
    assert rows["half"][1:4] == ["1", "3", "incomplete"]
    assert main(["data", "rm", "done"]) == 0
    assert s3.list_prefix(s3.client(), parse_s3_uri(f"s3://{s3env}/datasets/done")) == []


def test_repush_of_a_changed_directory_replaces_the_dataset(s3env, server, tmp_path):
    src = make_dataset(tmp_path / "src", files=3)
    assert push(src, "d") == 0
    (src / "shard-001.bin").unlink()
    (src / "new.bin").write_bytes(b"new")
    server.clear()
    assert push(src, "d") == 0
    assert [r.path for r in server.object_puts(s3env)] == [f"/{s3env}/datasets/d/new.bin",
                                                            f"/{s3env}/datasets/d/{MANIFEST}"]
    entry = stage(spec_for(f"s3://{s3env}/datasets/d"), tmp_path / "home")
    assert tree(entry.path) == tree(src)


@pytest.mark.parametrize("argv,expected", [
    (["data", "push", "/nonexistent-dir"], "DIR '/nonexistent-dir': not a directory"),
    (["data", "push", "{src}", "--name", "bad/name"], "--name 'bad/name': not a dataset name"),
    (["data", "rm", "nothing-here"], "NAME 'nothing-here': no such dataset"),
])
def test_bad_input_is_one_line_exit_2(s3env, tmp_path, argv, expected):
    src = make_dataset(tmp_path / "src", files=1)
    argv = [a.format(src=src) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "alchemist_jobs", *argv], capture_output=True,
                          text=True, env=os.environ)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and expected in proc.stderr, proc.stderr


def test_local_stack_without_an_object_store_says_how_to_name_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ALCHEMIST_OBJECT_STORE"}
    proc = subprocess.run([sys.executable, "-m", "alchemist_jobs", "data", "ls"], capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: --stack local: the local stack has no object store")


def test_stack_outputs_object_store_is_used(s3env, server, tmp_path, capsys):
    """A cluster stack's `object_store` (here from --outputs) decides the bucket and endpoint."""
    fixture = json.loads((REPO / "tests/fixtures/stack_outputs/dev.json").read_text())
    fixture["object_store"] = {"endpoint": server.url, "bucket": s3env, "region": "us-east-1"}
    outputs = tmp_path / "dev.json"
    outputs.write_text(json.dumps(fixture))
    src = make_dataset(tmp_path / "src", files=1)
    os.environ.pop("AWS_ENDPOINT_URL")  # only the stack output names the endpoint now
    assert push(src, "d", "--stack", "dev", "--outputs", str(outputs)) == 0
    assert main(["data", "ls", "--stack", "dev", "--outputs", str(outputs)]) == 0
    assert "d " in capsys.readouterr().out
    assert server.object_puts(s3env)


def test_a_push_that_has_not_finished_is_not_staged(s3env, tmp_path):
    from alchemist_jobs.data import s3

    s3.client().put_object(Bucket=s3env, Key="datasets/half/a.bin", Body=b"abc")  # no manifest yet
    with pytest.raises(DataError, match=r"datasets/half/: its push has not finished \(no \.alchemist-manifest\.json\)"):
        stage(spec_for(f"s3://{s3env}/datasets/half"), tmp_path / "home")
    _nothing_visible(tmp_path / "home")


def test_a_prefix_not_pushed_by_alchemist_is_addressed_by_its_listing(s3env, server, tmp_path):
    from alchemist_jobs.data import s3

    client = s3.client()
    for i in range(3):
        client.put_object(Bucket=s3env, Key=f"raw/{i}.bin", Body=bytes([i]) * 1000)
    first = stage(spec_for(f"s3://{s3env}/raw/"), tmp_path / "home")
    assert first.filled and {p.name for p in first.path.iterdir()} == {"0.bin", "1.bin", "2.bin"}
    server.clear()
    again = stage(spec_for(f"s3://{s3env}/raw/"), tmp_path / "home")
    assert not again.filled and again.path == first.path
    assert server.object_gets(s3env) == []
    client.put_object(Bucket=s3env, Key="raw/1.bin", Body=b"changed")  # a new listing: a new entry
    changed = stage(spec_for(f"s3://{s3env}/raw/"), tmp_path / "home")
    assert changed.filled and (changed.path / "1.bin").read_bytes() == b"changed"


def test_a_local_directory_source_is_uploaded_for_a_cluster_run(s3env, server, tmp_path):
    from alchemist_jobs.contract import StackOutput
    from alchemist_jobs.data.pods import upload_local_source

    fixture = json.loads((REPO / "tests/fixtures/stack_outputs/dev.json").read_text())
    fixture["object_store"] = {"endpoint": server.url, "bucket": s3env}
    out = StackOutput.parse(fixture, "dev")
    src = make_dataset(tmp_path / "src", files=2)
    local = parse_spec({"name": "j", "task": {"builtin": "digits"}, "data": {"source": str(src)}}, "t")
    resolved = upload_local_source(local, out)
    assert resolved.data.source.startswith(f"s3://{s3env}/runs-data/") and local.data.source == str(src)
    entry = stage(resolved, tmp_path / "home")
    assert tree(entry.path) == tree(src)
    server.clear()
    assert upload_local_source(local, out).data.source == resolved.data.source  # resubmitted
    # nothing sent again; only the manifest is rewritten (same bytes, so the same ETag and cache entry)
    assert [r.path.rsplit("/", 1)[1] for r in server.object_puts(s3env)] == [MANIFEST]
