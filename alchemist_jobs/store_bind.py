"""Keep a run's c10d stores away from everyone but the run: in its private directory on the
local stack, on one address where they must listen.

torch's rendezvous unpickles what its store holds, and a TCPStore answers anyone who reaches
its port: on a shared machine, loopback is not private. `apply()` (called by the agent and
every worker's bootstrap) chooses by the environment; unset (a cluster pod), nothing changes:

- ALCHEMIST_STORE_DIR (the local stack): every TCPStore this process opens is a FileStore in
  the run's private stores/ directory. The MASTER_PORT torchrun hands the workers names the
  store file; each rendezvous round starts with fresh files, so a restarted group never
  reads the last attempt's keys.
- ALCHEMIST_STORE_ADDR: every TCPStore server listens only on that address.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable

from alchemist_jobs import environment as E

RENDEZVOUS_FILE = "rendezvous"


def store_file(directory: str, port: int) -> str:
    """The file standing for the TCPStore at `port` of this run."""
    return os.path.join(directory, f"store-{port}")


def reserve_port(directory: str, free_port: Callable[[], int] | None = None) -> int:
    """A free port whose store file did not exist yet, created empty here (0600): the
    store of one rendezvous round, never an earlier round's. `free_port` picks candidates
    (torch's get_free_port by default; the light agent, which never imports torch, passes
    its own)."""
    if free_port is None:
        from torch.distributed.elastic.utils.distributed import get_free_port

        free_port = get_free_port
    while True:
        port = free_port()
        try:
            os.close(os.open(store_file(directory, port), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            return port
        except FileExistsError:
            continue


def new_round(directory: str, free_port: Callable[[], int] | None = None) -> int:
    """Rank 0's agent, once every agent has stopped the last round's workers (torchrun stops
    them before it rejoins, and no worker of this round starts before this returns): the
    last round's stores go, and this round's is reserved."""
    for name in os.listdir(directory):
        if name.startswith("store-"):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass
    return reserve_port(directory, free_port)


def apply() -> bool:
    """Put every later TCPStore of this process where the run allows; False when neither
    variable is set."""
    directory, addr = E.STORE_DIR.get(), E.STORE_ADDR.get()
    if directory:
        mode = ("dir", directory)
    elif addr:
        mode = ("addr", addr)
    else:
        return False
    import torch.distributed as dist

    original = dist.TCPStore
    if getattr(original, "_alchemist_mode", None) == mode:
        return True
    base = getattr(original, "_alchemist_original", original)
    kind, where = mode
    replacement = _file_store_class(base, where) if kind == "dir" else _bound_store_class(base, where)
    # Modules that did `from torch.distributed import TCPStore` hold the class itself.
    for name, module in list(sys.modules.items()):
        if name == "torch.distributed" or name.startswith("torch.distributed."):
            if getattr(module, "TCPStore", None) in (original, base):
                vars(module)["TCPStore"] = replacement
    if directory:
        # torchrun's rank-0 agent picks MASTER_PORT with rendezvous.api's get_free_port
        # (RendezvousStoreInfo.build, torch 2.13), once per round: here it starts the round.
        from torch.distributed.elastic.rendezvous import api

        api.get_free_port = lambda: new_round(directory)
    return True


def _file_store_class(base: type, directory: str) -> type:
    from torch.distributed import FileStore

    class RunFileStore(FileStore):
        """Stands for `TCPStore(host, port, ...)`: the FileStore of that port in the run's
        private directory. Same arguments; only the timeout matters to a file."""

        _alchemist_mode = ("dir", directory)
        _alchemist_original = base

        def __init__(self, host_name, port, world_size=None, is_master=False, *args, **kw):
            port = int(port)
            if is_master and port == 0:  # a server on "any free port"
                port = reserve_port(directory)
            path = store_file(directory, port)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))  # torch's FileStore: 0644
            super().__init__(path, -1)  # -1: never deleted while a late reader may need it
            timeout = kw.get("timeout", args[0] if args else None)
            if timeout is not None:
                self.set_timeout(timeout)
            self._host, self._port = host_name, port

        host = property(lambda self: self._host)
        port = property(lambda self: self._port)
        libuvBackend = property(lambda self: False)

    return RunFileStore


def _bound_store_class(base: type, addr: str) -> type:
    class BoundTCPStore(base):
        _alchemist_mode = ("addr", addr)
        _alchemist_original = base

        def __init__(self, host_name, port, world_size=None, is_master=False, *args, **kw):
            if is_master and kw.get("master_listen_fd") is None and len(args) < 4:
                sock = listen_socket(addr, int(port))
                port = sock.getsockname()[1]
                kw["master_listen_fd"] = sock.detach()  # the store owns the descriptor now
            elif not is_master:
                wait_listening(host_name, int(port), _timeout_s(args, kw))
            super().__init__(host_name, port, world_size, is_master, *args, **kw)

    return BoundTCPStore


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
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=1.0).close()
            return
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(every_s)
