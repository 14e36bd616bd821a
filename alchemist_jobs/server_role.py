"""The parameter-server role of a job, the same on every stack: which servers it needs and
what each one is told (local supervision of them is in local_servers.py).

A job whose algorithm needs a parameter server (`async`, `easgd` with variant async) gets
one server process per shard:

    ALCHEMIST_PS_SHARD=<k> ALCHEMIST_PS_PORT=<port> ALCHEMIST_RUN_DIR=<run dir> \\
        python -m alchemist_jobs.runtime.parameter_server

and every worker gets ALCHEMIST_PS_ADDRS=host:port,... in shard order. That environment and
the run directory are all a server needs, on any stack (a cluster runs the shards as extra
indexes of the job, on ports CLUSTER_BASE_PORT + k). This module imports no torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alchemist_jobs import environment as E

SERVER_MODULE = "alchemist_jobs.runtime.parameter_server"
CLUSTER_BASE_PORT = 29600


def server_count(spec: Any) -> int:
    """Parameter-server shards the job needs (0: none)."""
    return spec.algorithm.server_shards


def server_env(run_dir: Path | str, shard: int, port: int | str) -> dict[str, str]:
    return {**E.RUN_DIR.entry(run_dir), **E.PS_SHARD.entry(shard), **E.PS_PORT.entry(port)}


def addrs(hosts_ports: list[tuple[str, int | str]]) -> str:
    """The workers' ALCHEMIST_PS_ADDRS value."""
    return ",".join(f"{h}:{p}" for h, p in hosts_ports)
