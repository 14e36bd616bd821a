"""Tests that play another local account: the system user `alc-other` (created on first use), commands run as it
through `setpriv`, and a scratch directory both accounts reach (pytest's own tmp_path is private to root).

A test that cannot act as another uid (not root, no setpriv, no useradd) is skipped with one line.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
OTHER = "alc-other"


def other_account() -> tuple[int, int]:
    """(uid, gid) of `alc-other`, creating it if needed; skips the test where it cannot."""
    if os.geteuid() != 0:
        pytest.skip("acting as another local user needs root (setpriv --reuid)")
    if shutil.which("setpriv") is None:
        pytest.skip("acting as another local user needs setpriv (util-linux)")
    try:
        pw = pwd.getpwnam(OTHER)
    except KeyError:
        made = subprocess.run(["useradd", "--system", "--no-create-home", OTHER],
                              capture_output=True, text=True)
        if made.returncode not in (0, 9):  # 9: created meanwhile by another test process
            pytest.skip(f"cannot create the account {OTHER}: {made.stderr.strip()}")
        pw = pwd.getpwnam(OTHER)
    return pw.pw_uid, pw.pw_gid


def as_other(argv: list[str], **kw) -> subprocess.CompletedProcess:
    """Run argv as `alc-other` (no supplementary groups), capturing text output."""
    uid, gid = other_account()
    env = kw.pop("env", None) or {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                           *argv], capture_output=True, text=True, env=env, timeout=120, **kw)


def python_as_other(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """Python `code` (with `args` as sys.argv[1:]) run as `alc-other`, this checkout importable."""
    return as_other([sys.executable, "-c", code, *args],
                    env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO),
                         "HOME": "/nonexistent", **env}, cwd="/")


@pytest.fixture
def shared_dir():
    """A scratch directory every account can enter (mode 0755), removed afterwards."""
    other_account()
    d = Path(tempfile.mkdtemp(prefix="alc-two-users-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)
