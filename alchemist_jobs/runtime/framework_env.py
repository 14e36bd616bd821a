"""A TensorFlow or JAX worker's place in its job, told the way that framework reads it.

The bootstrap calls `prepare()` before the user's program, under torchrun like every worker:

* On a cluster the manifests already hold the cluster part (TF_CONFIG's worker list, or
  JAX_COORDINATOR_ADDRESS and JAX_NUM_PROCESSES: alchemist_jobs/frameworks.py); this worker's
  index is its pod's JOB_COMPLETION_INDEX x LOCAL_WORLD_SIZE + LOCAL_RANK, the order of that
  list, so worker 0 is on pod 0.
* Locally every worker binds a free port on loopback, and the workers swap their addresses
  through the store torchrun names for the workers (MASTER_ADDR:MASTER_PORT; on the local
  stack store_bind makes it a file in the run's private stores/ directory): index = RANK.

jax 0.10.2's `jax.distributed.initialize()` reads only the coordinator's address from the
environment; `register_jax_cluster()` adds a cluster detector (jax/_src/clusters/cluster.py)
that reads JAX_NUM_PROCESSES and JAX_PROCESS_ID, ahead of jax's Kubernetes detection.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import shlex
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from datetime import timedelta

from alchemist_jobs import environment as E
from alchemist_jobs import store_bind
from alchemist_jobs.frameworks import get, install_hint, register_jax_cluster

__all__ = ["register_jax_cluster"]  # where the bootstrap's callers and tests found it

SWAP_TIMEOUT_S = 600.0  # every worker of the group reaches the swap within torchrun's start-up
_PREFIX = "alchemist/framework"


class FrameworkMissing(Exception):
    """The worker's Python cannot import the task's framework (one line, names the extra)."""


def require(framework: str) -> None:
    """Import the framework as the program will; a failure is one line naming the extra."""
    fw = get(framework)
    try:
        importlib.import_module(fw.module)
    except ImportError as e:
        raise FrameworkMissing(
            f"task.framework is {framework}, but this worker's Python cannot import "
            f"{fw.module} ({e.__class__.__name__}: {str(e).splitlines()[0][:120]}); "
            f"install the '{fw.extra}' extra: {install_hint(framework)}"
        ) from None


def free_port(host: str) -> int:
    """A port the kernel gives now on `host`; the framework binds it moments later."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def swap_addresses(
    own: str, rank: int, world: int, master_addr: str, master_port: int, timeout_s: float = SWAP_TIMEOUT_S
) -> list[str]:
    """Every worker's address, in rank order, through a c10d store that rank 0 hosts. Rank 0
    keeps it up until every worker has read all the addresses."""
    import torch.distributed as dist

    store_bind.apply()  # the store listens only where the run allows (ALCHEMIST_STORE_ADDR)
    store = dist.TCPStore(
        master_addr,
        master_port,
        world,
        rank == 0,
        timeout=timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )
    store.set(f"{_PREFIX}/addr/{rank}", own)
    keys = [f"{_PREFIX}/addr/{r}" for r in range(world)]
    store.wait(keys)
    addresses = [store.get(k).decode() for k in keys]
    store.set(f"{_PREFIX}/read/{rank}", "1")
    if rank == 0:
        store.wait([f"{_PREFIX}/read/{r}" for r in range(world)])
    del store
    return addresses


def swap_through_files(
    directory: str,
    master_port: int,
    own: str,
    rank: int,
    world: int,
    timeout_s: float = SWAP_TIMEOUT_S,
    poll_s: float = 0.01,
) -> list[str]:
    """The local stack's swap, without torch (about 210 MB a worker): every worker writes its
    address beside the round's store file (store_bind: `store-<MASTER_PORT>`, fresh each
    round, in the run's private stores/ directory, removed with it at the next round) and
    reads the others' as they appear."""
    prefix = f"{store_bind.store_file(directory, master_port)}.addr-"
    tmp = f"{prefix}{rank}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(own)
    os.replace(tmp, f"{prefix}{rank}")  # whole or absent to a reader
    deadline = time.monotonic() + timeout_s
    addresses: list[str | None] = [None] * world
    while True:
        for r in range(world):
            if addresses[r] is None:
                try:
                    with open(f"{prefix}{r}") as f:
                        addresses[r] = f.read()
                except FileNotFoundError:
                    pass
        if all(addresses):
            return [a for a in addresses if a]
        if time.monotonic() > deadline:
            missing = [r for r in range(world) if addresses[r] is None]
            raise TimeoutError(f"workers {missing} gave no address within {timeout_s:.0f} s")
        time.sleep(poll_s)


def _index(env: Mapping[str, str]) -> int:
    """This worker's place in a cluster run's static list: pod index, then local rank (a
    TF_CONFIG without `task` given in a local run's spec.env: the rank)."""
    if "JOB_COMPLETION_INDEX" not in env:
        return int(env["RANK"])
    return int(env["JOB_COMPLETION_INDEX"]) * int(env.get("LOCAL_WORLD_SIZE", 1)) + int(
        env.get("LOCAL_RANK", 0)
    )


def framework_vars(
    framework: str, env: Mapping[str, str], addresses: list[str] | None = None
) -> dict[str, str]:
    """The variables to add for this worker. `addresses`: every worker's host:port in rank
    order (a local run's swap); None on a cluster, where the manifests hold the cluster part."""
    fw = get(framework)
    index = int(env["RANK"]) if addresses is not None else _index(env)
    out = fw.worker_vars(env, addresses, index)
    out.update(import_vars(framework, env))
    # The cluster's variable is the worker's to complete (TF_CONFIG's task); others the job's
    # env gives win.
    return {k: v for k, v in out.items() if k not in env or k == fw.cluster_var}


# A dry run of a big job shows its first workers and its last.
DRY_RUN_WORKERS = 4


def dry_run_lines(
    framework: str, nodes: int, procs_per_node: int, env: Mapping[str, str], local: bool
) -> list[str]:
    """Comment lines for a dry run: each worker's framework variables as the worker itself
    will compute them (framework_vars), TF_CONFIG's `task` included. `env`: what every
    worker starts with (a cluster's: the manifests' cluster part); a local run's workers
    pick their loopback ports when they start, shown as <port N>."""
    if not get(framework).own_loop:
        return []
    world = nodes * procs_per_node
    host = E.STORE_ADDR.get(env) or "127.0.0.1"
    addresses = [f"{host}:<port {r}>" for r in range(world)] if local else None
    shown = list(range(world))
    if world > DRY_RUN_WORKERS:
        shown = [*range(DRY_RUN_WORKERS - 1), world - 1]
    lines = []
    for i in shown:
        node, local_rank = divmod(i, procs_per_node)
        worker = dict(env, LOCAL_RANK=str(local_rank), LOCAL_WORLD_SIZE=str(procs_per_node))
        if local:
            worker.update(RANK=str(i), WORLD_SIZE=str(world))
            where = f"node {node}, ports chosen as the workers start"
        else:
            worker["JOB_COMPLETION_INDEX"] = str(node)
            where = f"pod {node}, local rank {local_rank}"
        variables = framework_vars(framework, worker, addresses)
        text = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(variables.items()))
        lines.append(f"# worker {i} ({where}): {text}")
        if i == DRY_RUN_WORKERS - 2 and world > DRY_RUN_WORKERS:
            lines.append(f"# ... workers {i + 1} to {world - 2} likewise")
    return lines


def import_vars(framework: str, env: Mapping[str, str]) -> dict[str, str]:
    """What the framework reads once, when it is imported: set before the bootstrap imports it
    (a value the job's env gives wins)."""
    return {k: v for k, v in get(framework).import_vars().items() if k not in env}


def prepare(framework: str, gpus: int = 0) -> None:
    """Set this worker's framework variables in os.environ (TF_CONFIG or JAX_*), before the
    framework is imported: some it reads only then (import_vars)."""
    env = os.environ
    addresses = None
    cluster_var = get(framework).cluster_var
    # A local run (the manifests set no cluster variable): each worker's own free port,
    # swapped through the store.
    if cluster_var is None or cluster_var not in env:
        # The run's own address: loopback on the local stack (its stores are files there).
        host = E.STORE_ADDR.get(env) or ("127.0.0.1" if E.STORE_DIR.get(env) else socket.getfqdn())
        own = f"{host}:{free_port(host)}"
        store_dir = E.STORE_DIR.get(env)
        if store_dir:  # the local stack: files, no torch in this worker
            addresses = swap_through_files(
                store_dir, int(env["MASTER_PORT"]), own, int(env["RANK"]), int(env["WORLD_SIZE"])
            )
        else:
            addresses = swap_addresses(
                own, int(env["RANK"]), int(env["WORLD_SIZE"]), env["MASTER_ADDR"], int(env["MASTER_PORT"])
            )
    env.update(framework_vars(framework, env, addresses))
    env.update(gpu_vars(framework, env, gpus))


def gpu_share(gpus: int, local_rank: int, local_world: int) -> list[int]:
    """Positions, among the node's visible GPUs, of this worker's share: the node's GPUs
    split evenly among its workers in local-rank order. One process per node (TensorFlow's
    and JAX's usual layout) gets every GPU; one process per GPU (torch's) its own."""
    per = max(1, gpus // max(1, local_world))
    return list(range(local_rank * per, min(gpus, (local_rank + 1) * per)))


def gpu_vars(framework: str, env: Mapping[str, str], gpus: int) -> dict[str, str]:
    """What tells the framework this worker's GPUs: TensorFlow's CUDA_VISIBLE_DEVICES (the
    node's entries of the share), jax's JAX_LOCAL_DEVICE_IDS (read by initialize()). Nothing
    for one worker per node: it sees all of them. One GPU each: jax's local process id does
    it (register_jax_cluster)."""
    if not gpus or "LOCAL_RANK" not in env:
        return {}
    local_world = int(env.get("LOCAL_WORLD_SIZE", gpus))
    if local_world == 1:
        return {}
    share = gpu_share(gpus, int(env["LOCAL_RANK"]), local_world)
    return get(framework).gpu_vars(env, share, gpus)


def after_import(framework: str, gpus: int = 0) -> None:
    """Once the framework is imported: jax's cluster detection told about this job, and a
    SIGTERM that stops the worker whatever the framework installs later."""
    get(framework).after_import(gpus)
    keep_sigterm_fatal()


# Native libraries whose SIGTERM handler only records the signal: TensorFlow's coordination
# service and jaxlib's preemption notifier (tsl's preemption_notifier.cc) install one when the
# strategy or jax.distributed starts, long after the bootstrap ran.
_SWALLOWERS = ("tensorflow", "jaxlib", "xla")
SIGTERM_POLL_S = 0.2


def keep_sigterm_fatal(poll_s: float = SIGTERM_POLL_S) -> threading.Thread | None:
    """A daemon thread that puts SIGTERM back to its default (the process ends at once) as
    soon as a framework's native library has replaced the handler with its own. torchrun's
    agent stops a group with SIGTERM and waits 30 s before SIGKILL: a worker that swallowed
    it cost every restart that wait. A handler the program set in Python is left alone."""
    libc = _libc()
    if libc is None:
        return None

    def handler_library() -> str:
        act = (ctypes.c_char * 256)()  # struct sigaction: the handler's address comes first
        if libc.sigaction(signal.SIGTERM, None, act) != 0:
            return ""
        address = ctypes.c_void_p.from_buffer(act).value
        if not address or address in (signal.SIG_DFL, signal.SIG_IGN):
            return ""
        info = _DlInfo()
        if not libc.dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.fname:
            return ""
        return os.path.basename(info.fname.decode(errors="replace"))

    def watch() -> None:
        while True:
            name = handler_library()
            if any(s in name.lower() for s in _SWALLOWERS):
                # libc's, not signal.signal: Python allows that in the main thread only.
                libc.signal(signal.SIGTERM, None)  # SIG_DFL
                print(
                    f"alchemist: {name} caught SIGTERM for itself; set back to the default, "
                    "so a stopped group restarts at once",
                    file=sys.stderr,
                    flush=True,
                )
            time.sleep(poll_s)

    t = threading.Thread(target=watch, name="alchemist-sigterm", daemon=True)
    t.start()
    return t


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("fname", ctypes.c_char_p),
        ("fbase", ctypes.c_void_p),
        ("sname", ctypes.c_char_p),
        ("saddr", ctypes.c_void_p),
    ]


def _libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.signal.restype = ctypes.c_void_p
        return libc
    except (OSError, AttributeError):
        return None
