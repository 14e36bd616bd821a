"""Shared fixtures: a private ALCHEMIST_HOME per test, and helpers to run the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh local shared-file-system root: runs never collide with other tests' runs."""
    h = tmp_path / "alchemist-home"
    monkeypatch.setenv("ALCHEMIST_HOME", str(h))
    return h


def cli(*args: str, home: Path | None = None, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """Run `alchemist ARGS` as a real process (python -m alchemist_jobs)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), **kw.pop("env_extra", {}))
    if home is not None:
        env["ALCHEMIST_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "alchemist_jobs", *args], cwd=kw.pop("cwd", REPO),
                          env=env, capture_output=True, text=True, timeout=timeout, **kw)


def cli_background(*args: str, home: Path | None = None) -> subprocess.Popen:
    """Start `alchemist ARGS` as a real process and return at once; its output (stdout and
    stderr together, text) is the process's `stdout`."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if home is not None:
        env["ALCHEMIST_HOME"] = str(home)
    return subprocess.Popen([sys.executable, "-m", "alchemist_jobs", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(autouse=True)
def _no_alchemist_thread_outlives_its_test():
    """A background thread of ours (a log follower, a watchdog) left running by one test keeps
    working for the rest of the session and slows every later test: each must end with the
    test that started it."""
    import threading

    before = set(threading.enumerate())
    yield
    left = [t for t in threading.enumerate()
            if t not in before and t.name.startswith("alchemist-")]
    for t in left:
        t.join(timeout=10.0)
    alive = [t.name for t in left if t.is_alive()]
    assert not alive, f"threads left running by this test: {alive}"
