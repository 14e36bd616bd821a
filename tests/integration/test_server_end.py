"""A local async run's parameter servers end by themselves once every worker is done: they
write their final checkpoint and their record (`finished`, `final_metrics`). The backend used to
SIGTERM them the moment the workers' agents exited, so a server still writing was killed, its
record kept no end, and the dashboard showed it by the run's state instead (test_ui_run_files
failed now and then on a loaded machine). Here the server's final record write is slowed, as a
loaded machine slows it, through a sitecustomize the run's processes load."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from tests.conftest import REPO

SLOW_FINAL_WRITE = """
import alchemist_jobs.rundir as _rundir

_write = _rundir.write_json_atomic


def _slow(path, data, *args, **kwargs):
    if "server-" in str(path) and isinstance(data, dict) and "finished" in data:
        import time

        time.sleep(3)  # a loaded machine, at the server's last write
    return _write(path, data, *args, **kwargs)


_rundir.write_json_atomic = _slow
"""


def test_a_server_still_writing_its_end_is_not_killed(tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_FINAL_WRITE)
    home = tmp_path / "home"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "alchemist_jobs",
            "run",
            "examples/digits.yaml",
            "--quiet",
            "--home",
            str(home),
            "--set",
            "hyper.epochs=1",
            "--set",
            "algorithm.name=async",
        ],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=f"{hook}{os.pathsep}{REPO}", ALCHEMIST_HOME=str(home)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = re.search(r"run (\S+): succeeded", proc.stdout).group(1)
    record = json.loads((home / "runs" / run_id / "workers" / "server-0.json").read_text())
    assert record.get("finished") and record.get("final_metrics"), record
