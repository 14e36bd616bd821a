"""Tests that play another person on a shared machine, with the rights any other local account has.

Two ways: as uid `nobody` (65534: `unavailable`, `run_python`), which reaches loopback ports, /proc
and world-readable files exactly as any other local account; and as the system user `alc-other`
(created on first use: `other_account`, `as_other`, `python_as_other`), with a scratch directory
both accounts reach (pytest's own tmp_path is private to root). A test that cannot act as
another uid (not root, no setpriv, no useradd) is skipped with one line.
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
NOBODY = 65534


def unavailable() -> str | None:
    """Why this machine cannot play another user (None: it can)."""
    if os.geteuid() != 0:
        return "switching to another uid needs root"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    probe = subprocess.run([*prefix(), sys.executable, "-c",
                            "import torch, os; print(os.getuid())"],
                           capture_output=True, text=True, cwd="/")
    if probe.returncode != 0 or probe.stdout.strip() != str(NOBODY):
        return f"uid {NOBODY} cannot run {sys.executable} with torch: {probe.stderr[-200:]}"
    return None


def prefix() -> list[str]:
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def run_python(code: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -c CODE ARGS` as uid nobody, from `/`, with nothing of ours in its environment
    but the interpreter (whose packages are world-readable)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent"}
    return subprocess.run([*prefix(), sys.executable, "-c", code, *args], cwd="/", env=env,
                          capture_output=True, text=True, timeout=timeout)


def listening_loopback(uid: int) -> list[int]:
    """Ports of the loopback TCP sockets in LISTEN that `uid` owns, as /proc/net/tcp shows
    them to every account."""
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and int(f[7]) == uid:
                ports.append(int(f[1].rsplit(":", 1)[1], 16))
    return sorted(set(ports))


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
