"""The parameter-server role of a job: which servers it needs, how each one starts, and (on
the local stack) keeping them alive beside the torchrun agents.

A job whose algorithm needs a parameter server (`async`, `easgd` with variant async) gets
one server process per shard:

    ALCHEMIST_PS_SHARD=<k> ALCHEMIST_PS_PORT=<port> ALCHEMIST_RUN_DIR=<run dir> \\
        python -m alchemist_jobs.runtime.parameter_server

and every worker gets ALCHEMIST_PS_ADDRS=host:port,... in shard order. That environment and
the run directory are all a server needs, on any stack (a cluster runs the shards as extra
indexes of the job, on ports CLUSTER_BASE_PORT + k). This module imports no torch.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alchemist_jobs.processes import popen_group, stop_groups

SERVER_MODULE = "alchemist_jobs.runtime.parameter_server"
CLUSTER_BASE_PORT = 29600


def server_count(spec: Any) -> int:
    """Parameter-server shards the job needs (0: none)."""
    algo = spec.algorithm
    if algo.name == "async":
        return algo.servers
    if algo.name == "easgd" and algo.variant == "async":
        return 1
    return 0


def server_env(run_dir: Path | str, shard: int, port: int | str) -> dict[str, str]:
    return {"ALCHEMIST_RUN_DIR": str(run_dir), "ALCHEMIST_PS_SHARD": str(shard),
            "ALCHEMIST_PS_PORT": str(port)}


def addrs(hosts_ports: list[tuple[str, int | str]]) -> str:
    """The workers' ALCHEMIST_PS_ADDRS value."""
    return ",".join(f"{h}:{p}" for h, p in hosts_ports)


@dataclass
class ServerProcess:
    """One shard's process as the local stack starts it. `port` None: picked at start."""

    shard: int
    env: dict[str, str]
    cwd: str
    log: Path
    host: str = "127.0.0.1"
    port: int | None = None
    prefix: list[str] = field(default_factory=list)  # e.g. `ip netns exec NS` (netns.py)

    @property
    def argv(self) -> list[str]:
        return [*self.prefix, sys.executable, "-m", SERVER_MODULE]

    def shell(self) -> str:
        env = dict(self.env, ALCHEMIST_PS_PORT=str(self.port or f"PS_PORT{self.shard}"))
        return (f"cd {shlex.quote(self.cwd)} && "
                + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
                + " " + shlex.join(self.argv))


def server_processes(spec: Any, run: Any, base_env: dict[str, str], cwd: str) -> list[ServerProcess]:
    """The local stack's server processes for this job ([] if it needs none)."""
    return [ServerProcess(shard=k, cwd=cwd, log=run.logs / f"server-{k}.launcher.log",
                          env={**base_env, **server_env(run.path, k, f"PS_PORT{k}"),
                               "ALCHEMIST_PS_BIND": "127.0.0.1"})
            for k in range(server_count(spec))]


def placeholder_addrs(servers: list[ServerProcess]) -> str:
    return addrs([(s.host, s.port or f"PS_PORT{s.shard}") for s in servers])


class LocalServers:
    """Start the shards, restart one that dies (up to max_restarts each), stop them all.
    Their pids are recorded in run.json (`servers`) so `alchemist cancel` finds them."""

    def __init__(self, servers: list[ServerProcess], run: Any, max_restarts: int):
        self.servers, self.run, self.max_restarts = servers, run, max_restarts
        self.procs: list[subprocess.Popen | None] = [None] * len(servers)
        self.restarts = [0] * len(servers)

    def start(self) -> None:
        from alchemist_jobs.local_backend import free_port

        for s in self.servers:
            if s.port is None:
                s.port = free_port()
        for k in range(len(self.servers)):
            self._spawn(k)

    def _spawn(self, k: int) -> None:
        s = self.servers[k]
        env = {**os.environ, **s.env, "ALCHEMIST_PS_PORT": str(s.port),
               "ALCHEMIST_PS_RESTART": str(self.restarts[k])}
        with open(os.open(s.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as log:
            self.procs[k] = popen_group(s.argv, cwd=s.cwd, env=env, stdout=log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        from alchemist_jobs.local_backend import record_procs

        record_procs(self.run, servers=self.pids)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None]

    def worker_env(self) -> dict[str, str]:
        return {"ALCHEMIST_PS_ADDRS": addrs([(s.host, s.port) for s in self.servers])}

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
            print(f"alchemist: parameter server {k} exited with {code}; restart "
                  f"{self.restarts[k]}/{self.max_restarts}", file=sys.stderr, flush=True)
            self._spawn(k)
        return True

    def stop(self, grace: float = 5.0) -> None:
        stop_groups(self.procs, grace)
