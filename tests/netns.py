"""Several hosts on one machine: Linux network namespaces on a bridge, with an optional
bandwidth limit, and a local-stack scheduler that runs each node in its own host.

    with Hosts(2, rate_mbit=100) as hosts:
        sched = NetnsScheduler(home, hosts)
        handle = sched.schedule(sched.dryrun(spec, spec_dir))   # spec.nodes == 2
        sched.wait(handle)

Host k is namespace `alc-<token>-h<k>` with veth `alc-<token>-h<k>` at 10.231.0.<k+1>/24;
the veths' peers sit on bridge `alc-<token>-br` in a switch namespace `alc-<token>-sw`. A
limit is a token-bucket filter on each host's egress, so it holds in both directions.
Only the namespaces created here are touched, and they are deleted on exit, on an
exception, on SIGTERM, and (should this process be killed outright) by the next Hosts()
on this machine, which sweeps namespaces whose creator is gone. Needs root and `ip`.

For torchrun across namespaces three things are needed: the rendezvous
host flag (`is_host`), `--local-addr` and GLOO_SOCKET_IFNAME; NetnsScheduler sets them.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alchemist_jobs.local_backend import LocalRequest, LocalScheduler
from alchemist_jobs.kubernetes.manifests import RDZV_PORT
from alchemist_jobs.server_role import CLUSTER_BASE_PORT

PREFIX = "alc-"
SUBNET = "10.231.0"
OWNERS = Path("/run/alchemist-netns")  # <token>.pid: the process that owns those namespaces


def unavailable() -> str | None:
    """Why namespaces cannot be used here, or None if they can."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip() or r.returncode}")
    return r


def _netns_names() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


@dataclass
class Host:
    index: int
    netns: str
    ifname: str
    addr: str

    @property
    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns]


class Hosts:
    """N hosts on one bridge; a context manager that always deletes what it created."""

    def __init__(self, n: int = 2, rate_mbit: float | None = None):
        if n < 1:
            raise ValueError("Hosts needs at least one host")
        self.n, self.rate_mbit = n, rate_mbit
        self.token = secrets.token_hex(3)[:5]  # alc-<5 hex>-h<k>: 12 characters, <= 15
        base = f"{PREFIX}{self.token}"
        self.switch, self.bridge = f"{base}-sw", f"{base}-br"
        self.hosts = [Host(k, f"{base}-h{k}", f"{base}-h{k}", f"{SUBNET}.{k + 1}")
                      for k in range(n)]
        self._old_term: Any = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k: int) -> Host:
        return self.hosts[k]

    def __enter__(self) -> "Hosts":
        reason = unavailable()
        if reason:
            raise RuntimeError(reason)
        if threading.current_thread() is threading.main_thread():
            # SIGTERM would end the process without running __exit__: turn it into an exception.
            self._old_term = signal.signal(signal.SIGTERM, _raise_exit)
        try:
            sweep_stale()
            self._create()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()

    def _create(self) -> None:
        OWNERS.mkdir(parents=True, exist_ok=True)
        (OWNERS / f"{self.token}.pid").write_text(str(os.getpid()))
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", self.bridge, "type", "bridge")
        _ip("-n", self.switch, "link", "set", self.bridge, "up")
        for h in self.hosts:
            peer = f"{PREFIX}{self.token}-p{h.index}"
            _ip("netns", "add", h.netns)
            # Created in the switch namespace, so no name ever lands in the root namespace.
            _ip("-n", self.switch, "link", "add", peer, "type", "veth", "peer", "name", h.ifname,
                "netns", h.netns)
            _ip("-n", self.switch, "link", "set", peer, "master", self.bridge)
            _ip("-n", self.switch, "link", "set", peer, "up")
            _ip("-n", h.netns, "addr", "add", f"{h.addr}/24", "dev", h.ifname)
            _ip("-n", h.netns, "link", "set", "lo", "up")
            _ip("-n", h.netns, "link", "set", h.ifname, "up")
            if self.rate_mbit:
                r = subprocess.run(
                    [*h.exec_prefix, "tc", "qdisc", "add", "dev", h.ifname, "root", "tbf", "rate",
                     f"{self.rate_mbit}mbit", "burst", "64kb", "latency", "50ms"],
                    capture_output=True, text=True)
                if r.returncode != 0:
                    raise RuntimeError(f"tc on {h.netns}: {r.stderr.strip()}")

    def destroy(self) -> None:
        """Kill every process left in our namespaces, then delete them. Idempotent."""
        _delete_token(self.token)
        if self._old_term is not None:
            signal.signal(signal.SIGTERM, self._old_term)
            self._old_term = None


def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _delete_token(token: str) -> None:
    names = [n for n in _netns_names() if n.startswith(f"{PREFIX}{token}-")]
    for name in names:
        pids = _ip("netns", "pids", name, check=False).stdout.split()
        for pid in pids:  # only processes inside a namespace this harness created
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    for name in names:
        _ip("netns", "del", name, check=False)
    (OWNERS / f"{token}.pid").unlink(missing_ok=True)


def sweep_stale() -> list[str]:
    """Delete the namespaces of Hosts whose owning process no longer exists (it was killed
    before it could clean up). Returns the tokens removed."""
    removed = []
    if not OWNERS.exists():
        return removed
    for f in OWNERS.glob("*.pid"):
        try:
            pid = int(f.read_text())
            os.kill(pid, 0)
            continue  # owner alive: its namespaces are in use
        except ProcessLookupError:
            pass
        except (ValueError, PermissionError, OSError):
            continue
        _delete_token(f.stem)
        removed.append(f.stem)
    return removed


class NetnsScheduler(LocalScheduler):
    """The local stack with node k's torchrun agent (and its workers) in host k; parameter
    servers run in host 0 on CLUSTER_BASE_PORT + shard, as on a cluster."""

    def __init__(self, root: Path, hosts: Hosts):
        super().__init__(root)
        self.hosts = hosts

    def dryrun(self, spec: Any, spec_dir: Path, run_id: str | None = None) -> LocalRequest:
        if spec.nodes != len(self.hosts) or spec.nodes < 2:
            raise ValueError(f"spec has {spec.nodes} node(s); the harness has {len(self.hosts)} "
                             f"hosts (need nodes == hosts >= 2)")
        req = super().dryrun(spec, spec_dir, run_id)
        req.private_network = False  # each node is in its host's namespace already
        h0 = self.hosts[0]
        for s in req.servers:
            s.prefix, s.host, s.port = h0.exec_prefix, h0.addr, CLUSTER_BASE_PORT + s.shard
            s.env.update(ALCHEMIST_PS_BIND=h0.addr, ALCHEMIST_NODE=h0.netns)
        addrs = ",".join(f"{s.host}:{s.port}" for s in req.servers)
        for node, (p, host) in enumerate(zip(req.processes, self.hosts.hosts)):
            # As on a cluster: c10d over TCP, node 0's agent hosting the store on a fixed port
            # (free: the namespace is fresh), not the local stack's private store files.
            argv = []
            for a in p.argv:
                if a.startswith("--rdzv-endpoint="):
                    a = f"--rdzv-endpoint={h0.addr}:{RDZV_PORT}"
                elif a.startswith("--rdzv-conf="):
                    a = f"--rdzv-conf=is_host={int(node == 0)},join_timeout=120"
                elif a.startswith("--local-addr="):
                    a = f"--local-addr={host.addr}"
                argv.append(a)
            p.argv = [*host.exec_prefix, *argv]
            p.env.pop("ALCHEMIST_STORE_DIR", None)
            p.env.update(GLOO_SOCKET_IFNAME=host.ifname, ALCHEMIST_NODE=host.netns,
                         ALCHEMIST_STORE_ADDR=host.addr)  # reachable from the other hosts
            if addrs:
                p.env["ALCHEMIST_PS_ADDRS"] = addrs
        return req
