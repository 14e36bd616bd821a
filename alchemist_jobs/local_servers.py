"""The parameter servers of a local run: their processes, started beside the torchrun
agents, restarted when one dies (up to max_restarts), stopped with the run.

Each shard's listening socket is made here and handed to every attempt of its server
(ALCHEMIST_PS_LISTEN_FD), so its port is never free between the plan and the server's start,
nor while a killed server restarts: a port merely chosen free and bound later by the server
can be taken meanwhile by any socket of the machine (a worker's metrics server, an outgoing
connection), and every restart then fails with EADDRINUSE."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alchemist_jobs import environment as E
from alchemist_jobs.launch_plan import Role
from alchemist_jobs.processes import free_port, popen_group, record_procs, stop_groups
from alchemist_jobs.server_role import SERVER_MODULE, addrs

HOST = "127.0.0.1"  # where a local server listens, and its workers reach it


@dataclass
class ServerProcess:
    """One shard's process as the local stack starts it."""

    shard: int
    env: dict[str, str]
    cwd: str
    log: Path
    host: str = HOST
    port: int | None = None
    prefix: list[str] = field(default_factory=list)  # e.g. `ip netns exec NS` (netns.py)

    @property
    def argv(self) -> list[str]:
        return [*self.prefix, sys.executable, "-m", SERVER_MODULE]

    def shell(self) -> str:
        env = {**self.env, **E.PS_PORT.entry(self.port)}
        return (
            f"cd {shlex.quote(self.cwd)} && "
            + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
            + " "
            + shlex.join(self.argv)
        )


def server_ports(shards: int) -> list[int]:
    """A free loopback port for each shard, chosen when the run is planned (the launch plan's
    addresses; a private network's listeners are made on the same ports at start)."""
    return [free_port() for _ in range(shards)]


def server_processes(role: Role, run: Any, cwd: str) -> list[ServerProcess]:
    """The launch plan's server role as the local stack's processes, one per shard."""
    out = []
    for k, extra in enumerate(role.replica_env):
        port = role.port(f"ps-{k}")
        out.append(
            ServerProcess(
                shard=k,
                cwd=cwd,
                log=run.logs / f"server-{k}.launcher.log",
                port=port,
                host=HOST,
                env={**role.env, **extra},
            )
        )
    return out


class LocalServers:
    """Start the shards, restart one that dies (up to max_restarts each), stop them all.
    Their pids are recorded in run.json (`servers`) so `alchemist cancel` finds them."""

    def __init__(
        self,
        servers: list[ServerProcess],
        run: Any,
        max_restarts: int,
        preexec: Callable[[], None] | None = None,
        listeners: list[socket.socket] | None = None,
    ):
        """`preexec` and `listeners`: the run's private network (private_net.py), which
        each server joins, and one listening socket per shard made inside it."""
        self.servers, self.run, self.max_restarts = servers, run, max_restarts
        self.preexec = preexec
        self.procs: list[subprocess.Popen | None] = [None] * len(servers)
        self.restarts = [0] * len(servers)
        self.listeners: list[socket.socket | None] = (
            list(listeners) if listeners is not None else [None] * len(servers)
        )

    def start(self) -> None:
        for k, s in enumerate(self.servers):
            made = self.listeners[k]
            if made is not None:  # made in the run's private network
                s.port = made.getsockname()[1]
            elif not s.prefix:  # a server in this network namespace: its socket is made here
                made = self.listeners[k] = listen_socket(s.host, s.port)
                s.port = made.getsockname()[1]
            elif s.port is None:
                s.port = free_port()
        for k in range(len(self.servers)):
            self._spawn(k)

    def _spawn(self, k: int) -> None:
        s, listener = self.servers[k], self.listeners[k]
        env = {**os.environ, **s.env, **E.PS_PORT.entry(s.port), **E.PS_RESTART.entry(self.restarts[k])}
        fds: tuple[int, ...] = ()
        if listener is not None:
            fds = (listener.fileno(),)
            env.update(E.PS_LISTEN_FD.entry(listener.fileno()))
        with open(os.open(s.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as log:
            self.procs[k] = popen_group(
                s.argv,
                cwd=s.cwd,
                env=env,
                stdout=log,
                pass_fds=fds,
                preexec=self.preexec,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        record_procs(self.run, servers=self.pids)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None]

    def worker_env(self) -> dict[str, str]:
        return E.PS_ADDRS.entry(addrs([(s.host, str(s.port)) for s in self.servers]))

    def poll(self) -> bool:
        """Restart any server that died; False once one has died more than max_restarts
        times. A server that exited 0 finished (every worker said done) and stays down."""
        for k, p in enumerate(self.procs):
            code = p.poll() if p is not None else None
            if code is None or code == 0:
                continue
            if self.restarts[k] >= self.max_restarts:
                return False
            self.restarts[k] += 1
            print(
                f"alchemist: parameter server {k} exited with {code}; restart "
                f"{self.restarts[k]}/{self.max_restarts}",
                file=sys.stderr,
                flush=True,
            )
            self._spawn(k)
        return True

    def end(self, grace: float) -> None:
        """At a run's end: every worker said goodbye, so each server writes its final checkpoint
        and record and exits by itself. Wait up to `grace` seconds for that, then stop the rest
        (a SIGTERM sooner killed a server still writing, and its record kept no end)."""
        deadline = time.monotonic() + grace
        for p in self.procs:
            if p is None:
                continue
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
        self.stop(grace)

    def stop(self, grace: float = 5.0) -> None:
        stop_groups([p for p in self.procs if p is not None], grace)
        for k, listener in enumerate(self.listeners):
            if listener is not None:
                listener.close()
                self.listeners[k] = None


def listen_socket(host: str, port: int | None) -> socket.socket:
    """A listening TCP socket on host:port, or on a free port if that one was taken since it
    was planned (the workers learn the address after this, from `worker_env`)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port or 0))
    except OSError:
        sock.bind((host, 0))
    sock.listen(64)
    return sock
