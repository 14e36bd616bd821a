"""Process hygiene shared by every launcher: children die with their parent, are stopped
as whole process groups, and are never confused with a later process that reused a pid.

Standard library only: the CLI imports this before anything heavy (warm_agent.py).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

PR_SET_PDEATHSIG = 1


def _libc():
    if sys.platform != "linux":
        return None

    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send `sig` to this process when its parent dies (Linux only;
    elsewhere cancel and Ctrl-C still stop children explicitly)."""
    libc = _libc()
    if libc is not None:
        libc.prctl(PR_SET_PDEATHSIG, sig)


def popen_group(
    argv: list[str], die_with_parent: bool = True, preexec: Callable[[], None] | None = None, **kw
) -> subprocess.Popen:
    """Start a child in its own session (Ctrl-C in the terminal reaches the CLI only, which
    then stops children in order) that receives SIGTERM if the launcher dies (unless
    `die_with_parent` is False: a detached launcher outlives the command that started it).
    `preexec` runs in the child just before exec (e.g. joining the run's private network,
    private_net.py)."""
    libc = _libc() if die_with_parent else None  # loaded here: not between fork and exec

    def pre() -> None:
        if libc is not None:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if preexec is not None:
            preexec()

    kw.setdefault("umask", 0o077)  # what a run writes (logs, checkpoints) is its owner's only
    return subprocess.Popen(
        argv, start_new_session=True, preexec_fn=pre if libc is not None or preexec else None, **kw
    )


# Linux's PID_MAX_LIMIT (include/linux/threads.h, 64-bit): no pid is above it.
PID_MAX_LIMIT = 4 * 1024 * 1024


def alive(pid: object) -> bool:
    """True for a live process (a zombie counts as dead). `pid` may come from a damaged file:
    what no process can be (not an int, a bool, out of the kernel's range) is not alive."""
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= PID_MAX_LIMIT:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def signal_group(pid: int, sig: int) -> None:
    """Signal the process group a `popen_group` child leads; gone already is fine."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def terminate_group(pid: int) -> None:
    """SIGTERM the group, then SIGCONT: a stopped process (SIGSTOP, a debugger's stop) acts
    on no signal but SIGKILL until it is continued, and would otherwise live out the grace."""
    signal_group(pid, signal.SIGTERM)
    signal_group(pid, signal.SIGCONT)


def stop_groups(procs: Iterable[subprocess.Popen], grace: float) -> None:
    """SIGTERM every live group, wait up to `grace` seconds in all, then SIGKILL the rest."""
    live = [p for p in procs if p is not None and p.poll() is None]
    for p in live:
        terminate_group(p.pid)
    deadline = time.time() + grace
    for p in live:
        try:
            p.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            signal_group(p.pid, signal.SIGKILL)
            p.wait()


def stop_pids(pids: Iterable[int], grace: float) -> None:
    """The same for groups known only by pid (another CLI's children, from run.json)."""
    live = [p for p in pids if alive(p)]
    for pid in live:
        terminate_group(pid)
    deadline = time.time() + grace
    while any(alive(p) for p in live) and time.time() < deadline:
        time.sleep(0.1)
    for pid in live:
        signal_group(pid, signal.SIGKILL)


def environ_has(pid: int, entry: str) -> bool:
    """Whether process `pid` started with `entry` (KEY=VALUE) in its environment: a guard
    against signalling a process that merely reused a recorded pid."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return entry.encode() in f.read().split(b"\0")
    except OSError:
        return False


def start_time(pid: object) -> int | None:
    """When process `pid` started, in clock ticks since boot (/proc/PID/stat field 22);
    None if there is no such process. With the pid it names one process for good."""
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[-1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def still_same(pid: object, started: object) -> bool:
    """Whether `pid` is alive and is the process that started at `started` (not a later
    process that reused the pid): the check before any signal to a recorded pid."""
    return isinstance(started, int) and alive(pid) and start_time(pid) == started


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record_procs(run: Any, **groups: list[int]) -> None:
    """Record process ids (agents=[...], servers=[...]) in run.json with their start times,
    so a later `cancel` can tell them from processes that reused the pids."""
    st = run.state()
    starts = dict(st.get("proc_starts") or {})
    for pids in groups.values():
        starts.update({str(p): start_time(p) for p in pids})
    run.update_state(proc_starts=starts, **groups)


def owned_pids(state: dict, key: str) -> list[int]:
    """The pids of run.json's `key` that are still the processes the run started."""
    starts = state.get("proc_starts")
    pids = state.get(key)
    if not isinstance(starts, dict) or not isinstance(pids, list):
        return []
    return [p for p in pids if isinstance(p, int) and still_same(p, starts.get(str(p)))]
