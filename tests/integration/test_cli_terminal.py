"""`alchemist run` under a real terminal (a pseudo-terminal): the progress bar renders and
the summary follows. Nothing else in the suite gives the CLI a TTY."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from alchemist_jobs.rundir import RunDir
from tests.conftest import EXAMPLES, REPO

pytestmark = pytest.mark.timeout(420)


def run_in_pty(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run argv with stdin, stdout and stderr on a pty; return (exit code, everything shown)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=REPO,
                            close_fds=True)
    os.close(slave)
    out = bytearray()
    while True:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(), out.decode(errors="replace")


def test_readme_first_command_under_a_terminal(home: Path):
    env = dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home), TERM="xterm",
               COLUMNS="120")
    code, shown = run_in_pty([sys.executable, "-m", "alchemist_jobs", "run",
                              str(EXAMPLES / "digits.yaml"), "--set", "hyper.epochs=2"], env)
    tail = shown[-3000:]
    assert code == 0, tail
    assert "Traceback" not in shown, tail
    run = RunDir(next((home / "runs").iterdir()))
    assert run.state()["state"] == "succeeded"
    steps = run.result()["steps"]
    # The bar drew the step count out of the known total, then the summary followed.
    assert f"step {steps}/{steps} " in shown, tail
    assert "epoch 2/2 " in shown and "epoch 3/2" not in shown, tail
    assert f"run {run.run_id}: succeeded" in shown and "test accuracy" in shown, tail
