"""Code assets: the same directory gives the same hash, ignored files are not shipped, a
changed file gives a new snapshot; the pod side unpacks it once, read-only, and refuses a
corrupt one. Real files, real tarballs, the real init-container entry point."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes import code_assets
from alchemist_jobs.kubernetes.code_assets import list_files, pack, tree_hash
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.spec import load_spec
from tests.k8s_stacks import stack
from tests.unit.k8s.conftest import EXAMPLES


def _project(root: Path) -> Path:
    files = {
        "train.py": "print('train')\n",
        "job.yaml": "name: mine\ntask: {script: train.py}\n",
        "lib/model.py": "W = 1\n",
        "lib/__pycache__/model.cpython-311.pyc": "bytecode",
        "lib/.gitignore": "scratch.txt\n!keep.log\n",
        "lib/scratch.txt": "lib's own ignore file\n",
        "lib/keep.log": "re-included below by lib/.gitignore\n",
        "data/big.bin": "x" * 1000,
        "outputs/run1.txt": "result",
        "notes.log": "ignored by the root .gitignore",
        "secret.env": "TOKEN=abc",
        ".gitignore": "*.log\noutputs/\n",
        ".alchemistignore": "data/\nsecret.env\n",
        ".git/HEAD": "ref: refs/heads/main\n",
    }
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (root / "train.py").chmod(0o755)
    return root


def test_ignored_files_are_not_shipped(tmp_path):
    root = _project(tmp_path / "proj")
    assert list_files(root) == [
        ".alchemistignore",
        ".gitignore",
        "job.yaml",
        "lib/.gitignore",
        "lib/keep.log",
        "lib/model.py",
        "train.py",
    ]


def test_the_same_directory_gives_the_same_hash_and_bytes(tmp_path):
    a = pack(_project(tmp_path / "a"))
    b = pack(_project(tmp_path / "b"))  # another place, other mtimes: same content
    assert a.digest == b.digest and a.tarball == b.tarball
    assert len(a.digest) == code_assets.HASH_CHARS


def test_a_changed_file_gives_a_new_snapshot(tmp_path):
    root = _project(tmp_path / "p")
    first = pack(root).digest
    (root / "lib/model.py").write_text("W = 2\n")
    second = pack(root).digest
    assert second != first
    (root / "train.py").chmod(0o644)  # the executable bit is part of the snapshot
    assert pack(root).digest not in (first, second)
    (root / "notes.log").write_text("an ignored file changes nothing")
    (root / "lib/model.py").write_text("W = 1\n")
    (root / "train.py").chmod(0o755)
    assert pack(root).digest == first


def test_a_directory_too_big_for_a_config_map_is_one_line(tmp_path):
    root = _project(tmp_path / "p")
    (root / "weights.pt").write_bytes(os.urandom(2 * 2**20))  # incompressible
    with pytest.raises(UserError) as e:
        pack(root, source="job.yaml")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("job.yaml: code directory")
    assert "weights.pt (2.0 MiB)" in msg and "accepted: at most 900 KiB" in msg


def test_a_script_outside_or_ignored_is_refused(tmp_path):
    root = _project(tmp_path / "p")
    sched = KubernetesScheduler(stack("dev").output)
    spec = load_spec(root / "job.yaml", ["task.script=notes.log"])
    with pytest.raises(UserError, match=r"^task.script: 'notes.log' is excluded by .gitignore"):
        sched.dryrun(spec, root)
    (tmp_path / "outside.py").write_text("")
    # Refused as the spec is read, for every stack: the run executes its copy of the directory.
    with pytest.raises(UserError, match=r"job.yaml: task.script: '../outside.py' lies outside"):
        load_spec(root / "job.yaml", ["task.script=../outside.py"])


def test_secret_looking_files_and_the_enclosing_repositorys_ignores_never_ship(tmp_path):
    """17.3: a project whose credentials are listed in its repository's .gitignore, with the
    spec one directory below the repository's top: none of them, nor anything the enclosing
    .gitignore (or .git/info/exclude) ignores, reaches the snapshot; secret-looking files are
    excluded even where no ignore file lists them."""
    repo = tmp_path / "proj"
    (repo / ".git" / "info").mkdir(parents=True)
    (repo / ".git" / "info" / "exclude").write_text("scratch.txt\n")
    (repo / ".gitignore").write_text("data/\n*.ckpt\n/train/local_only.py\n")
    job = repo / "train"
    for rel, text in {
        "train.py": "print()\n",
        "local_only.py": "x\n",
        "model.ckpt": "w",
        "scratch.txt": "s",
        "data/big.bin": "d",
        ".env": "TOKEN=1\n",
        ".netrc": "machine x\n",
        ".aws/credentials": "[default]\n",
        "secrets/deploy.pem": "-----BEGIN\n",
        "conf/id_rsa": "k",
        "conf/settings.yaml": "a: 1\n",
    }.items():
        p = job / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    from alchemist_jobs.kubernetes.code_assets import list_files

    assert list_files(job) == ["conf/settings.yaml", "train.py"]


def test_the_local_home_inside_the_code_directory_is_not_shipped(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("print('hi')\n")
    home = tmp_path / "alchemist-home"
    (home / "runs" / "r" / "code").mkdir(parents=True)
    (home / "runs" / "r" / "code" / "train.py").write_text("print('hi')\n")
    monkeypatch.setenv("ALCHEMIST_HOME", str(home))
    assert pack(tmp_path).files == ("train.py",)


def test_a_python_without_tarfiles_data_filter_unpacks_a_snapshot_and_refuses_links(tmp_path, monkeypatch):
    """Debian bookworm's Python 3.11.2 (the container tier's base image) has no `filter`
    argument to extractall: the real snapshot still unpacks there, and a member that is not a
    plain file or directory inside it is refused, as the data filter would refuse it."""
    import io
    import tarfile

    from alchemist_jobs.kubernetes import pod_setup

    monkeypatch.delattr(tarfile, "data_filter")
    sched = KubernetesScheduler(stack("dev").output)
    snapshot = sched.dryrun(load_spec(EXAMPLES / "script.yaml"), EXAMPLES).code
    with tarfile.open(fileobj=io.BytesIO(snapshot.tarball), mode="r:gz") as tar:
        pod_setup._extract(tar, tmp_path / "ok")
    assert tree_hash(tmp_path / "ok") == snapshot.digest
    for bad in (tarfile.TarInfo("../escape.py"), tarfile.TarInfo("/abs.py"), tarfile.TarInfo("link.py")):
        if bad.name == "link.py":
            bad.type, bad.linkname = tarfile.SYMTYPE, "/etc/passwd"
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w:gz") as tar:
            tar.addfile(bad, io.BytesIO(b""))
        raw.seek(0)
        with tarfile.open(fileobj=raw, mode="r:gz") as tar, pytest.raises(SystemExit) as e:
            pod_setup._extract(tar, tmp_path / "bad")
        assert "not a plain file or directory" in str(e.value)
    assert not (tmp_path / "escape.py").exists() and not (tmp_path / "bad").exists()
