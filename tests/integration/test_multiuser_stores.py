"""Another account on the same machine can neither write to nor read a local run's c10d
stores: not the torchrun agents' rendezvous store (whose state torch unpickles, so a write
is code execution as the job's owner) nor rank 0's worker store, for one node and for
emulated nodes > 1 (issue 25, finding 1).

The attack runs as uid nobody against every loopback port the run listens on (what
/proc/net/tcp shows any account): it connects as a TCPStore client, writes and reads back a
key, and overwrites every `torch.rendezvous.*` key it can list with a pickle that writes a
marker file. It also tries the store files it can name from the agents' command lines
(world-readable in /proc). The ports attacked are this run's own only: other people's
processes on this machine are left alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alchemist_jobs.rundir import RunDir
from tests import another_user
from tests.conftest import EXAMPLES, REPO

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(another_user.unavailable() is not None,
                                 reason=f"cannot act as another uid: {another_user.unavailable()}")]

ATTACK = r"""
import base64, json, os, pickle, socket, sys, threading, time
from datetime import timedelta
from pathlib import Path
import torch.distributed as dist

marker, ports = sys.argv[1], [int(p) for p in sys.argv[2:]]
out = {"uid": os.getuid(), "agents": [], "connected": [], "stores": [], "planted": [],
       "files": {}}


class Payload:
    def __reduce__(self):
        return (exec, (f"import os; open({marker!r}, 'w').write(str(os.getuid()))",))


# What `ps` shows every account: the agents' command lines.
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        continue
    if any(a in ("alchemist_jobs.agent", "alchemist_jobs.warm_agent") for a in argv):
        opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
        out["agents"].append({"pid": int(pid), "endpoint": opts.get("rdzv-endpoint")})
        path = opts.get("rdzv-endpoint", "")
        if path.startswith("/"):  # a store file: try to write it, and to read its directory
            for what, act in (("append", lambda: open(path, "ab").close()),
                              ("read", lambda: open(path, "rb").close()),
                              ("list", lambda: os.listdir(os.path.dirname(path)))):
                try:
                    act()
                    out["files"][f"{what} {path}"] = "ok"
                except OSError as e:
                    out["files"][f"{what} {path}"] = type(e).__name__


def attack(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
    except OSError:
        return
    out["connected"].append(port)
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                              timeout=timedelta(seconds=5))
        store.set("written-by-another-user", str(os.getuid()))
        if store.get("written-by-another-user") != str(os.getuid()).encode():
            return
    except Exception:
        return
    out["stores"].append(port)
    try:
        keys = store.list_keys()
    except Exception:
        keys = []
    for key in keys:
        if key.startswith("torch.rendezvous.") and "/" not in key:  # the state torch unpickles
            store.set(key, base64.b64encode(pickle.dumps(Payload())))
            out["planted"].append(key)


# A port that is not a store (gloo's pairs, a metrics endpoint) can leave a store client
# waiting for an answer that never comes: each port gets its own thread and 30 s in all.
threads = [threading.Thread(target=attack, args=(p,), daemon=True) for p in ports]
for t in threads:
    t.start()
deadline = time.monotonic() + 30
for t in threads:
    t.join(max(0.0, deadline - time.monotonic()))
print(json.dumps(out), flush=True)
os._exit(0)
"""


def tree(root: int) -> set[int]:
    """`root` and every process descended from it."""
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        parents[int(pid)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, grew = {root}, True
    while grew:
        new = {p for p, pp in parents.items() if pp in out} - out
        out |= new
        grew = bool(new)
    return out


def run_ports(root: int) -> list[int]:
    """Loopback ports in LISTEN held by the processes of the run (the CLI's tree)."""
    inodes = set()
    for pid in tree(root):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def wait_for(pred, what: str, proc: subprocess.Popen, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()[0]}"
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("nodes,procs", [(1, 2), (2, 1)])
def test_another_user_cannot_reach_a_local_runs_stores(tmp_path: Path, nodes: int, procs: int):
    home = tmp_path / "home"
    marker = tmp_path / "ran-as-the-jobs-owner"
    env = dict(os.environ, PYTHONPATH=str(REPO), ALCHEMIST_HOME=str(home))
    cli = subprocess.Popen(
        [sys.executable, "-m", "alchemist_jobs", "run", str(EXAMPLES / "digits.yaml"),
         "--quiet", "--set", f"nodes={nodes}", "--set", f"procs_per_node={procs}",
         "--set", "hyper.epochs=100000", "--set", "checkpoint.every_steps=1000000"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        run = wait_for(lambda: next((RunDir(p) for p in (home / "runs").glob("*")), None)
                       if (home / "runs").exists() else None, "the run directory", cli)
        # Every rank has stepped: the rendezvous and the worker stores are in use.
        wait_for(lambda: (run.progress() or {}).get("step", 0) > 0
                 and len(run.worker_records()) == nodes * procs, "training to start", cli)
        ports = run_ports(cli.pid)
        attack = another_user.run_python(ATTACK, str(marker), *map(str, ports))
        assert attack.returncode == 0, attack.stderr[-3000:]
        seen = json.loads(attack.stdout.splitlines()[-1])
        assert seen["uid"] == another_user.NOBODY
        # The attack is real: it saw the agents and reached the run's open ports (metrics).
        assert seen["agents"] and seen["connected"], (ports, seen)
        ran = ""
        if seen["stores"]:  # show what a reachable store gave the attacker
            deadline = time.monotonic() + 30
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            ran = marker.read_text() if marker.exists() else "not (yet)"
        assert seen["stores"] == [], (
            f"uid {seen['uid']} wrote to the run's c10d stores on ports {seen['stores']} "
            f"(planted {seen['planted']}); its pickle ran as uid {ran}")
        assert all(v != "ok" for v in seen["files"].values()), seen["files"]
        if nodes > 1:  # node 1's agent names its store file: another uid cannot open it
            assert seen["files"], seen
    finally:
        if cli.poll() is None:
            cli.send_signal(signal.SIGINT)
        out, _ = cli.communicate(timeout=180)
    assert not marker.exists()
    assert "cancelled; no process left running" in out, out
