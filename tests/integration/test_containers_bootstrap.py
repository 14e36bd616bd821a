"""A worker whose launcher is PID 1, as torchrun is in a container, runs its job: the
bootstrap's dead-launcher check compares with the parent it started under, never with 1."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (a PID namespace)"
)


def test_worker_whose_launcher_is_pid_1_runs(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("import os; print('job ran, parent', os.getppid())\n")
    env = dict(
        os.environ,
        ALCHEMIST_RUN_DIR=str(tmp_path / "run"),
        ALCHEMIST_LOG_TO_CONSOLE="1",
        RANK="0",
        PYTHONPATH=str(REPO),
    )
    # In a new PID namespace the forked shell is PID 1 and the worker its child (`; exit` keeps
    # the shell from exec'ing it), as a pod's `sh -c "... exec torchrun"` makes torchrun.
    launcher = [
        '"$@"; exit $?',
        "sh",
        sys.executable,
        "-m",
        "alchemist_jobs.runtime.bootstrap",
        "script",
        str(script),
    ]
    proc = subprocess.run(
        ["unshare", "--pid", "--fork", "sh", "-c", *launcher],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "job ran, parent 1"
