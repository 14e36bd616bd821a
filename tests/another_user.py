"""Play a second person on a shared machine: run a command as uid `nobody` (65534), which
reaches loopback ports, /proc and world-readable files exactly as any other local account."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

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
