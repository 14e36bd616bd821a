"""Code assets: the same directory gives the same hash, ignored files are not shipped, a
changed file gives a new snapshot; the pod side unpacks it once, read-only, and refuses a
corrupt one. Real files, real tarballs, the real init-container entry point."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes import code_assets
from alchemist_jobs.kubernetes.code_assets import list_files, pack, tree_hash
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.spec import load_spec
from tests.k8s_stacks import stack
from tests.unit.k8s.conftest import EXAMPLES, REPO


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
    assert list_files(root) == [".alchemistignore", ".gitignore", "job.yaml", "lib/.gitignore",
                                "lib/keep.log", "lib/model.py", "train.py"]


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


def _pod_setup(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "alchemist_jobs.kubernetes.pod_setup", *args],
                          capture_output=True, text=True, cwd=REPO)


def test_pod_setup_places_the_run_directory_and_the_snapshot_once(tmp_path):
    """What every job pod's init container does, with the ConfigMap's files."""
    sched = KubernetesScheduler(stack("dev").output)
    spec = load_spec(EXAMPLES / "script.yaml")
    cm = sched.dryrun(spec, EXAMPLES, run_id="plain-ddp-1").manifests[0]
    config = tmp_path / "config"
    config.mkdir()
    (config / "spec.yaml").write_text(cm["data"]["spec.yaml"])
    (config / "code.tar.gz").write_bytes(base64.b64decode(cm["binaryData"]["code.tar.gz"]))
    digest = sched.dryrun(spec, EXAMPLES).code.digest
    shared = tmp_path / "shared"
    args = ["--run-dir", shared / "runs/plain-ddp-1", "--spec", config / "spec.yaml",
            "--code", config / "code.tar.gz", "--code-dir", shared / "code" / digest]
    first = _pod_setup(*args)
    assert first.returncode == 0, first.stderr
    assert "unpacked" in first.stdout
    second = _pod_setup(*args)  # the next pod: nothing to do
    assert second.returncode == 0 and "already in place" in second.stdout
    code_dir = shared / "code" / digest
    # The whole examples directory, as it is (examples are added over time).
    assert sorted(p.name for p in code_dir.iterdir()) == sorted(
        p.name for p in EXAMPLES.iterdir() if p.name != "__pycache__")
    assert {"digits.yaml", "plain_ddp.py", "script.yaml"} <= {p.name for p in code_dir.iterdir()}
    assert (code_dir / "plain_ddp.py").read_bytes() == (EXAMPLES / "plain_ddp.py").read_bytes()
    assert tree_hash(code_dir) == digest
    assert not (code_dir / "plain_ddp.py").stat().st_mode & 0o222  # shipped code is read-only
    run = shared / "runs/plain-ddp-1"
    assert (run / "spec.yaml").read_text() == cm["data"]["spec.yaml"]
    assert all((run / d).is_dir() for d in ("logs", "checkpoints", "workers", "tensorboard"))
    assert not [p for p in (shared / "code").iterdir() if p.name.startswith(".")]


def test_pod_setup_refuses_a_snapshot_that_does_not_match_its_name(tmp_path):
    root = _project(tmp_path / "p")
    snap = pack(root)
    tarball = tmp_path / "code.tar.gz"
    tarball.write_bytes(snap.tarball)
    (tmp_path / "spec.yaml").write_text("name: x\n")
    wrong = tmp_path / "shared/code" / ("0" * code_assets.HASH_CHARS)
    res = _pod_setup("--run-dir", tmp_path / "shared/runs/x", "--spec", tmp_path / "spec.yaml",
                     "--code", tarball, "--code-dir", wrong)
    assert res.returncode != 0 and "does not match its name" in res.stderr
    assert not wrong.exists() and not [p for p in wrong.parent.iterdir()]
    shutil.rmtree(tmp_path / "shared")


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
    for rel, text in {"train.py": "print()\n", "local_only.py": "x\n", "model.ckpt": "w",
                      "scratch.txt": "s", "data/big.bin": "d", ".env": "TOKEN=1\n",
                      ".netrc": "machine x\n", ".aws/credentials": "[default]\n",
                      "secrets/deploy.pem": "-----BEGIN\n", "conf/id_rsa": "k",
                      "conf/settings.yaml": "a: 1\n"}.items():
        p = job / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    from alchemist_jobs.kubernetes.code_assets import list_files

    assert list_files(job) == ["conf/settings.yaml", "train.py"]


def test_pod_setup_refuses_a_planted_or_tampered_snapshot(tmp_path):
    """17.2/17.3: `code/<hash>` already on the shared file system is used only if its
    content still hashes to its name; a planted or rewritten one is refused with one line
    and no worker starts. Unpacked snapshots have no write bits, directories included."""
    root = _project(tmp_path / "p")
    snap = pack(root)
    tarball = tmp_path / "code.tar.gz"
    tarball.write_bytes(snap.tarball)
    (tmp_path / "spec.yaml").write_text("name: x\n")
    code_dir = tmp_path / "shared/code" / snap.digest
    args = ["--run-dir", tmp_path / "shared/runs/x", "--spec", tmp_path / "spec.yaml",
            "--code", tarball, "--code-dir", code_dir]
    assert _pod_setup(*args).returncode == 0
    assert not code_dir.stat().st_mode & 0o222
    # Someone with the same uid restores a write bit and rewrites a file.
    victim = next(p for p in sorted(code_dir.rglob("*")) if p.is_file())
    code_dir.chmod(0o755)
    victim.chmod(0o644)
    victim.write_text("import os; os.system('evil')\n")
    res = _pod_setup(*args)
    assert res.returncode != 0
    assert res.stderr.strip().count("\n") == 0 and "refusing to run it" in res.stderr, res.stderr
    assert snap.digest in res.stderr
    for p in [code_dir, *code_dir.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    shutil.rmtree(tmp_path / "shared")


def test_the_local_home_inside_the_code_directory_is_not_shipped(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("print('hi')\n")
    home = tmp_path / "alchemist-home"
    (home / "runs" / "r" / "code").mkdir(parents=True)
    (home / "runs" / "r" / "code" / "train.py").write_text("print('hi')\n")
    monkeypatch.setenv("ALCHEMIST_HOME", str(home))
    assert pack(tmp_path).files == ("train.py",)


def test_a_python_without_tarfiles_data_filter_unpacks_a_snapshot_and_refuses_links(
        tmp_path, monkeypatch):
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
    for bad in (tarfile.TarInfo("../escape.py"), tarfile.TarInfo("/abs.py"),
                tarfile.TarInfo("link.py")):
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
