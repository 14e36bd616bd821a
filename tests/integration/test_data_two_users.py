"""Datasets on a machine two accounts share, attacked as the other account (uid `alc-other`):
a node cache filled with another user's look-alike directory, an entry planted under the
victim's key, and links planted in a dataset directory that point at the victim's files."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from alchemist_jobs.data.cache import DataError
from alchemist_jobs.data.stage import stage
from alchemist_jobs.errors import UserError
from alchemist_jobs.spec import parse_spec
from tests.another_user import as_other, other_account, python_as_other, shared_dir  # noqa: F401

sys.path.insert(0, str(Path(__file__).parent))
from s3_server import S3Server  # noqa: E402

NAMES = {"train.bin": 4096, "sub/test.bin": 1024}


def write_dataset(root: Path, fill: bytes) -> None:
    for rel, size in NAMES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(fill * size)


def node_spec(source: Path):
    return parse_spec({"name": "ds", "task": {"builtin": "digits"},
                       "data": {"source": str(source), "cache": "node"}}, "test")


@pytest.fixture
def node_cache(shared_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A node cache both accounts use, as documented: a sticky, world-writable directory."""
    cache = shared_dir / "cache"
    cache.mkdir()
    cache.chmod(0o1777)
    monkeypatch.setenv("ALCHEMIST_DATA_CACHE", str(cache))
    return cache


STAGE_AS_OTHER = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from alchemist_jobs.data.stage import stage
    from alchemist_jobs.spec import parse_spec
    src = Path(sys.argv[1])
    for rel in {names!r}:
        st = os.stat(Path(sys.argv[2]) / rel)
        os.utime(src / rel, ns=(st.st_atime_ns, st.st_mtime_ns))  # the victim's times, exactly
    spec = parse_spec({{"name": "ds", "task": {{"builtin": "digits"}},
                       "data": {{"source": str(src), "cache": "node"}}}}, "attacker")
    print(stage(spec, Path("/nonexistent")).path)
""")


def test_another_users_look_alike_directory_is_never_served(shared_dir, node_cache):
    """Finding 4: equal names, sizes and mtimes, different bytes, another account's directory
    staged first into the shared node cache; the victim's run must get its own bytes."""
    uid, gid = other_account()
    theirs, mine = shared_dir / "theirs", shared_dir / "mine"
    theirs.mkdir()
    write_dataset(theirs, b"E")  # the attacker's bytes
    for p in [theirs, *theirs.rglob("*")]:
        os.chown(p, uid, gid)
    write_dataset(mine, b"G")
    code = STAGE_AS_OTHER.format(names=list(NAMES))
    attack = python_as_other(code, str(theirs), str(mine), ALCHEMIST_DATA_CACHE=str(node_cache))
    assert attack.returncode == 0, attack.stderr
    for rel in NAMES:  # the look-alike really matches what the old key looked at
        a, b = os.stat(theirs / rel), os.stat(mine / rel)
        assert (a.st_size, a.st_mtime_ns) == (b.st_size, b.st_mtime_ns)
    entry = stage(node_spec(mine), Path("/nonexistent"))
    try:
        for rel, size in NAMES.items():
            assert (entry.path / rel).read_bytes() == b"G" * size, rel
    finally:
        entry.release()


def test_the_same_names_sizes_and_times_with_other_bytes_are_another_dataset(tmp_path, monkeypatch):
    """Finding 4 for one user: a directory whose bytes changed with its times put back."""
    monkeypatch.setenv("ALCHEMIST_DATA_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "ds"
    write_dataset(src, b"1")
    times = {rel: os.stat(src / rel).st_mtime_ns for rel in NAMES}
    first = stage(node_spec(src), tmp_path)
    first.release()
    write_dataset(src, b"2")
    for rel, t in times.items():
        os.utime(src / rel, ns=(t, t))
    second = stage(node_spec(src), tmp_path)
    second.release()
    assert second.filled and (second.path / "train.bin").read_bytes() == b"2" * 4096


def test_a_local_source_is_read_to_hash_once_until_it_changes(tmp_path, monkeypatch):
    """The other workers of the node, and later runs, find the content key remembered."""
    import alchemist_jobs.data.stage as st

    monkeypatch.setenv("ALCHEMIST_DATA_CACHE", str(tmp_path / "cache"))
    reads: list[str] = []
    real = st.sha256_listed
    monkeypatch.setattr(st, "sha256_listed",
                        lambda f, where, sink=None: reads.append(f.rel) or real(f, where, sink))
    src = tmp_path / "ds"
    write_dataset(src, b"1")
    for _ in range(3):
        stage(node_spec(src), tmp_path).release()
    assert sorted(reads) == sorted(list(NAMES) * 2)  # hashed, then copied (and checked): once
    reads.clear()
    (src / "train.bin").write_bytes(b"3" * 4096)
    entry = stage(node_spec(src), tmp_path)
    entry.release()
    assert entry.filled and (entry.path / "train.bin").read_bytes() == b"3" * 4096
    assert sorted(reads) == sorted(list(NAMES) * 2)


PLANT_AS_OTHER = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    import alchemist_jobs.data.stage as st
    src = Path(sys.argv[1])
    # The victim's key is predictable to anyone who can read the victim's data: compute it as
    # the victim (uid 0) would, and plant a complete-looking entry of other bytes under it.
    os.getuid = lambda: 0
    key = st.user_key(st.listing_identity(src, st.local_listing(src)))
    entry = Path(sys.argv[2]) / "entries" / key
    for rel in {names!r}:
        (entry / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
        (entry / "data" / rel).write_bytes(b"E" * 8)
    (entry / "entry.json").write_text('{{"key": "%s", "bytes": 16}}' % key)
    print(entry)
""")


def test_an_entry_planted_under_the_victims_key_is_refused(shared_dir, node_cache):
    """Finding 4: the cache's own check: an entry another account owns is not served."""
    mine = shared_dir / "mine"
    write_dataset(mine, b"G")
    for sub in ("entries", "tmp", "locks"):  # as the first user of a shared cache leaves them
        (node_cache / sub).mkdir()
        (node_cache / sub).chmod(0o1777)
    planted = python_as_other(PLANT_AS_OTHER.format(names=list(NAMES)), str(mine), str(node_cache))
    assert planted.returncode == 0, planted.stderr
    with pytest.raises(DataError) as e:
        stage(node_spec(mine), Path("/nonexistent"))
    text = str(e.value)
    assert "\n" not in text and "not served" in text and f"uid {other_account()[0]}" in text


# --- finding 5: `data push` and links planted in the dataset directory ----------------------------


@pytest.fixture(scope="module")
def s3_server():
    srv = S3Server().start()
    yield srv
    srv.stop()


@pytest.fixture
def s3env(s3_server, monkeypatch):
    env = dict(AWS_ENDPOINT_URL=s3_server.url, AWS_ACCESS_KEY_ID="testing",
               AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
               ALCHEMIST_OBJECT_STORE="s3://two-users")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    from alchemist_jobs.data import s3

    client = s3.client()
    if "two-users" not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket="two-users")
    return client


def all_object_bytes(client) -> bytes:
    out = b""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket="two-users"):
        for o in page.get("Contents", []):
            out += client.get_object(Bucket="two-users", Key=o["Key"])["Body"].read()
    return out


VICTIM_SECRET = b"aws_secret_access_key = victim-only-3c1f9e"


@pytest.mark.parametrize("link", ["creds", "sub/creds", "linked-dir"])
def test_push_refuses_a_link_another_account_planted_to_the_victims_file(shared_dir, s3env, link,
                                                                        capsys):
    """Finding 5: a group dataset directory the other account can write to; it plants a link
    to the victim's private credentials file; the victim pushes: refused, one line naming the
    link, nothing sent."""
    from alchemist_jobs.cli import main

    private = shared_dir / "victim-home"
    private.mkdir(mode=0o700)
    (private / "credentials").write_bytes(VICTIM_SECRET)
    (private / "credentials").chmod(0o600)
    ds = shared_dir / "ds"
    (ds / "sub").mkdir(parents=True)
    (ds / "train.bin").write_bytes(b"x" * 100)
    for d in (ds, ds / "sub"):
        d.chmod(0o1777)  # a directory the team writes to
    assert as_other(["cat", str(private / "credentials")]).returncode != 0  # truly private
    target = private if link == "linked-dir" else private / "credentials"
    planted = as_other(["ln", "-s", str(target), str(ds / link)])
    assert planted.returncode == 0, planted.stderr
    assert main(["data", "push", str(ds), "--name", f"ds-{link.replace('/', '-')}",
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and link in err and "outside the directory" in err
    assert VICTIM_SECRET not in all_object_bytes(s3env)


def test_push_sends_a_link_within_the_directory_under_its_own_name(tmp_path, s3env, capsys):
    """A link whose target stays inside the directory is data of the directory: pushed."""
    from alchemist_jobs.cli import main

    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "real.bin").write_bytes(b"r" * 10)
    (ds / "alias.bin").symlink_to("real.bin")
    assert main(["data", "push", str(ds), "--name", "inside-link", "--quiet"]) == 0
    body = s3env.get_object(Bucket="two-users", Key="datasets/inside-link/alias.bin")["Body"]
    assert body.read() == b"r" * 10


def test_a_file_swapped_for_a_link_after_hashing_is_not_read(tmp_path):
    """The read checks it is the file that was listed: a swap to a link is refused."""
    from alchemist_jobs.data.local_dir import list_files, open_listed

    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "a.bin").write_bytes(b"a")
    (tmp_path / "secret").write_bytes(VICTIM_SECRET)
    listed = list_files(ds, "DIR")
    (ds / "a.bin").unlink()
    (ds / "a.bin").symlink_to(tmp_path / "secret")
    with pytest.raises(UserError, match="a.bin was replaced"):
        open_listed(listed[0], "DIR")


def test_staging_a_local_source_refuses_a_link_out_of_it(shared_dir, tmp_path):
    """The same rule where a local `data.source` is checked: at parse time, one line."""
    private = tmp_path / "credentials"
    private.write_bytes(VICTIM_SECRET)
    ds = shared_dir / "ds"
    ds.mkdir(mode=0o1777)
    ds.chmod(0o1777)
    (ds / "train.bin").write_bytes(b"x")
    assert as_other(["ln", "-s", str(private), str(ds / "creds")]).returncode == 0
    with pytest.raises(UserError, match="creds is a symbolic link to .*outside the directory"):
        node_spec(ds)
