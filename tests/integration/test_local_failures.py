"""How a local run reports what went wrong: a killed torchrun agent, a worker killed by a
signal (the summary names the rank, the signal and shows the agent's lines), a full disk
(named, and not retried)."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alchemist_jobs.rundir import RunDir
from tests.conftest import EXAMPLES, REPO, cli
from tests.integration.test_local_runs import no_process_of

pytestmark = pytest.mark.timeout(420)


def start(home: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home))
    return subprocess.Popen([sys.executable, "-m", "alchemist_jobs", "run", *args], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(pred, what: str, proc: subprocess.Popen, timeout: float = 300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        assert proc.poll() is None, f"the CLI ended before {what}: {proc.communicate()[0]}"
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def training(home: Path, proc: subprocess.Popen) -> RunDir:
    runs = home / "runs"
    run = wait_for(lambda: next((RunDir(p) for p in runs.iterdir()), None)
                   if runs.exists() else None, "the run directory", proc)
    wait_for(lambda: (run.progress() or {}).get("step", 0) > 0 and run.state().get("agents"),
             "training to start", proc)
    return run


def test_a_killed_agent_is_reported_as_killed(home):
    proc = start(home, str(EXAMPLES / "digits.yaml"), "--set", "hyper.epochs=100000")
    run = training(home, proc)
    agent = run.state()["agents"][0]
    os.kill(agent, signal.SIGKILL)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, out
    assert "torchrun agent of node 0" in out and "killed by SIGKILL" in out, out
    assert "killed by SIGKILL" in run.state()["message"]
    assert run.state()["state"] == "failed"
    assert no_process_of(run) == []


ABORTING = """
import os, time
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 1:
    print("rank 1 about to abort", flush=True)
    os.abort()
dist.barrier()
"""


def test_the_failure_summary_names_the_rank_its_signal_and_the_agent(home, tmp_path):
    (tmp_path / "abort.py").write_text(ABORTING)
    (tmp_path / "job.yaml").write_text("name: aborts\ntask: {script: abort.py}\n"
                                       "procs_per_node: 2\nmax_restarts: 0\n")
    r = cli("run", str(tmp_path / "job.yaml"), home=home)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "rank 1 failed: exit -6 (SIGABRT)" in r.stdout, r.stdout
    assert "[rank-1.log] rank 1 about to abort" in r.stdout, r.stdout
    assert "[agent-0.log]" in r.stdout, r.stdout


@pytest.fixture
def small_disk(tmp_path):
    """A real 16 MiB file system (tmpfs) that the test fills up."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path: Path) -> None:
    """Fill the file system; one that is full already (open fails) is what the test wants."""
    try:
        with open(path, "wb") as f:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
    except OSError as e:
        assert e.errno == errno.ENOSPC, e


def tree_bytes(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*"))


def test_a_full_disk_is_named_and_not_retried(small_disk):
    home = small_disk / "home"
    # --quiet: rank 0's own output (its OSError's traceback) would scroll above the bar; what
    # is checked here is the CLI's word on the failure
    proc = start(home, str(EXAMPLES / "digits.yaml"), "--set", "hyper.epochs=100000",
                 "--set", "checkpoint.every_steps=5", "--set", "max_restarts=3", "--quiet")
    run = training(home, proc)
    fill(small_disk / "filler")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, out
    assert f"no space left on {small_disk}" in out, out
    assert "Traceback" not in out, out
    assert "restarts        0" in out, out  # a full disk does not heal by restarting
    # The disk was filled by the test, not by the job: its own files stay small.
    assert tree_bytes(home) < 4 << 20, sorted((p.stat().st_size, str(p)) for p in home.rglob("*"))[-5:]
    (small_disk / "filler").unlink(missing_ok=True)
    assert no_process_of(run) == []
