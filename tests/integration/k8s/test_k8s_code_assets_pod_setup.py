"""Code assets as a pod's init container unpacks them: `python -m alchemist_jobs.kubernetes.pod_setup`
run as a process (moved from tests/unit/k8s/test_k8s_code_assets.py: it starts processes)."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys

from alchemist_jobs.kubernetes import code_assets
from alchemist_jobs.kubernetes.code_assets import pack, tree_hash
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.spec import load_spec
from tests.k8s_stacks import stack
from tests.unit.k8s.conftest import EXAMPLES, REPO
from tests.unit.k8s.test_k8s_code_assets import _project


def _pod_setup(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "alchemist_jobs.kubernetes.pod_setup", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
    )


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
    args = [
        "--run-dir",
        shared / "runs/plain-ddp-1",
        "--spec",
        config / "spec.yaml",
        "--code",
        config / "code.tar.gz",
        "--code-dir",
        shared / "code" / digest,
    ]
    first = _pod_setup(*args)
    assert first.returncode == 0, first.stderr
    assert "unpacked" in first.stdout
    second = _pod_setup(*args)  # the next pod: nothing to do
    assert second.returncode == 0 and "already in place" in second.stdout
    code_dir = shared / "code" / digest
    # The whole examples directory, as it is (examples are added over time).
    assert sorted(p.name for p in code_dir.iterdir()) == sorted(
        p.name for p in EXAMPLES.iterdir() if p.name != "__pycache__"
    )
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
    res = _pod_setup(
        "--run-dir",
        tmp_path / "shared/runs/x",
        "--spec",
        tmp_path / "spec.yaml",
        "--code",
        tarball,
        "--code-dir",
        wrong,
    )
    assert res.returncode != 0 and "does not match its name" in res.stderr
    assert not wrong.exists() and not [p for p in wrong.parent.iterdir()]
    shutil.rmtree(tmp_path / "shared")


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
    args = [
        "--run-dir",
        tmp_path / "shared/runs/x",
        "--spec",
        tmp_path / "spec.yaml",
        "--code",
        tarball,
        "--code-dir",
        code_dir,
    ]
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
