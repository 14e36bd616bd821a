"""Make every c10d TCPStore server this process starts listen on one address, not all.

torch's TCPStore server binds every interface (`*:PORT`) whatever host name it is given,
and torch's dynamic rendezvous unpickles what its store holds: anyone who can reach the
agent's rendezvous store, or rank 0's worker store, can run code in the job. A local run
sets ALCHEMIST_STORE_ADDR=127.0.0.1 for its agents and workers, and both call `apply()`
before torch starts a store: each store server then listens on a socket this module binds
to that address, handed to TCPStore through its `master_listen_fd` argument. Unset (a
cluster pod), nothing changes. Standard library only until `apply()` finds the variable.
"""

from __future__ import annotations

import os
import socket
import sys

ENV = "ALCHEMIST_STORE_ADDR"
# Local `nodes > 1`: node 0's agent hosts the rendezvous store on a port the kernel picks at
# its bind, and writes that port to the file RDZV_PORT_OUT names; the other agents read it
# from RDZV_PORT_IN before torchrun starts (alchemist_jobs/agent.py). A port chosen free by
# the launcher and bound seconds later by the agent could be another socket's by then.
RDZV_PORT_OUT = "ALCHEMIST_RDZV_PORT_OUT"
RDZV_PORT_IN = "ALCHEMIST_RDZV_PORT_IN"


def apply() -> bool:
    """Bind every later TCPStore server to $ALCHEMIST_STORE_ADDR; False when it is unset."""
    addr = os.environ.get(ENV)
    if not addr:
        return False
    import torch.distributed as dist

    original = dist.TCPStore
    if getattr(original, "_alchemist_bound", None) == addr:
        return True
    base = getattr(original, "_alchemist_original", original)

    class BoundTCPStore(base):  # type: ignore[misc, valid-type]
        _alchemist_bound = addr
        _alchemist_original = base

        def __init__(self, host_name, port, world_size=None, is_master=False, *args, **kw):
            if is_master and kw.get("master_listen_fd") is None and len(args) < 4:
                sock = listen_socket(addr, int(port))
                chosen = int(port) == 0
                port = sock.getsockname()[1]
                kw["master_listen_fd"] = sock.detach()  # the store owns the descriptor now
                out = os.environ.pop(RDZV_PORT_OUT, None) if chosen else None
                if out:  # the first store this agent hosts is its rendezvous store
                    write_port(out, port)
            elif not is_master:
                wait_listening(host_name, int(port), _timeout_s(args, kw))
            super().__init__(host_name, port, world_size, is_master, *args, **kw)

    # Modules that did `from torch.distributed import TCPStore` hold the class itself.
    for name, module in list(sys.modules.items()):
        if name == "torch.distributed" or name.startswith("torch.distributed."):
            if getattr(module, "TCPStore", None) in (original, base):
                setattr(module, "TCPStore", BoundTCPStore)
    return True


def listen_socket(addr: str, port: int) -> socket.socket:
    """A listening TCP socket on addr:port (port 0: any free one)."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr, port))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    return sock


def write_port(path: str, port: int) -> None:
    """Publish a port whole or not at all: readers never see a partial number."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        fh.write(f"{port}\n")
    os.replace(tmp, path)


def read_port(path: str, timeout_s: float, every_s: float = 0.02) -> int | None:
    """The port written to path, once it is there; None after timeout_s."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with open(path) as fh:
                return int(fh.read())
        except (FileNotFoundError, ValueError):
            if time.monotonic() >= deadline:
                return None
            time.sleep(every_s)


def _timeout_s(args: tuple, kw: dict) -> float:
    timeout = kw.get("timeout", args[0] if args else None)
    return timeout.total_seconds() if timeout is not None else 300.0


def wait_listening(host: str, port: int, timeout_s: float, every_s: float = 0.01) -> None:
    """Return once host:port accepts a connection (or after timeout_s: torch then reports).

    A worker store's clients start at the same moment as the rank that serves it, and torch's
    client answers a refused connection by backing off for up to a second before it retries:
    half a second of a short job's start-up, measured. Polling every 10 ms here is cheap, and
    the probe connection is closed before the store's own handshake begins.
    """
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=1.0).close()
            return
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(every_s)
