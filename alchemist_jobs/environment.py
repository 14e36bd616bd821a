"""Every ALCHEMIST_* environment variable, typed, in one place. Code reads and writes them
through these objects, never by their names (tests/unit/test_environment.py checks both that
and docs/environment.md, the users' list)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar, overload

T = TypeVar("T")

# Who sets a variable.
BACKEND = "backend"  # the local or Kubernetes backend, for every worker or server
USER = "user"  # the user, for the CLI or a job (`env:` in the spec)
IMAGE = "image"  # the training image's build (images/Dockerfile.train)
FAULT = "fault"  # the fault injections of the test suite and benchmarks (runtime/faults.py)


@dataclass(frozen=True)
class Var(Generic[T]):
    name: str
    parse: Callable[[str], T]
    set_by: str
    doc: str

    @overload
    def get(self, environ: Mapping[str, str] | None = None, default: None = None) -> T | None: ...
    @overload
    def get(self, environ: Mapping[str, str] | None = None, *, default: T) -> T: ...
    @overload
    def get(self, environ: Mapping[str, str] | None, default: T) -> T: ...
    def get(self, environ: Mapping[str, str] | None = None, default: T | None = None) -> T | None:
        """The value in `environ` (default: this process's), parsed; `default` when unset or
        empty. A value that does not parse is a ValueError naming the variable."""
        text = (os.environ if environ is None else environ).get(self.name)
        if not text:
            return default
        try:
            return self.parse(text)
        except ValueError as e:
            raise ValueError(f"{self.name}={text!r}: {e}") from None

    def require(self, environ: Mapping[str, str] | None = None) -> T:
        value = self.get(environ)
        if value is None:
            raise KeyError(f"{self.name} is not set; the backend sets it for every worker")
        return value

    @property
    def kind(self) -> str:
        """The accepted values, in words (docs/environment.md)."""
        return _KINDS.get(self.parse, "text")

    def entry(self, value: object) -> dict[str, str]:
        """`{name: value}`, for an environment being built."""
        return {self.name: str(value)}


def _flag(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError("accepted: 0 or 1")
    return text == "1"


def _unless_0(text: str) -> bool:
    return text != "0"


def _path(text: str) -> Path:
    return Path(text).expanduser()


_KINDS: dict[Callable, str] = {
    int: "integer",
    float: "number",
    _flag: "0 or 1",
    _unless_0: "0 or 1",
    _path: "path",
}
VARS: list[Var] = []


def _var(name: str, parse: Callable[[str], T], set_by: str, doc: str) -> Var[T]:
    v = Var(f"ALCHEMIST_{name}", parse, set_by, doc)
    VARS.append(v)
    return v


# --- every worker's run ------------------------------------------------------------------------
RUN_DIR = _var("RUN_DIR", _path, BACKEND, "the run's directory on the shared file system")
SHARED_ROOT = _var("SHARED_ROOT", _path, BACKEND, "the shared file system's root (data sets, caches)")
STACK = _var("STACK", str, BACKEND, "the stack's name (where the job was launched)")
NODE = _var("NODE", str, BACKEND, "the node the process runs on: a pod's name, a local node's label")
FRAMEWORK = _var("FRAMEWORK", str, BACKEND, "task.framework when it is not torch")
LOG_TO_CONSOLE = _var(
    "LOG_TO_CONSOLE", _flag, BACKEND, "1: log to the console (pod logs) instead of logs/rank-N.log"
)
METRICS_PORT = _var(
    "METRICS_PORT", int, BACKEND, "the /metrics base port (+ local rank); unset: any free port"
)
METRICS_ADDR = _var(
    "METRICS_ADDR", str, USER, "the address /metrics binds (default: 127.0.0.1 locally, else every interface)"
)
STORE_ADDR = _var("STORE_ADDR", str, BACKEND, "the address torch's c10d stores listen on")
STORE_DIR = _var(
    "STORE_DIR", str, BACKEND, "the directory of the run's c10d stores as files (the local stack)"
)
RESTART_ATTEMPT = _var(
    "RESTART_ATTEMPT", int, BACKEND, "a cluster pod's group restart (JobSet's restart-attempt annotation)"
)
JOB_SITE = _var(
    "JOB_SITE",
    _path,
    BACKEND,
    "the job's own packages (`requirements:`), added after the platform's site-packages",
)
CONFIG_ERROR_FILE = _var(
    "CONFIG_ERROR_FILE", _path, BACKEND, "where a worker writes the one line of a configuration error"
)
NCCL_NET_PLUGIN = _var(
    "NCCL_NET_PLUGIN",
    str,
    BACKEND,
    "`required`: the pod's NCCL network plugin must load (a network fabric's nodes)",
)
DATA_CACHE = _var("DATA_CACHE", _path, BACKEND, "the node-local data-set cache's mount")
DATA_CACHE_LIMIT = _var(
    "DATA_CACHE_LIMIT", str, USER, "bytes the data-set cache may hold (e.g. 200Gi); least recently used go"
)
DATA_LOCK_WAIT = _var(
    "DATA_LOCK_WAIT",
    float,
    USER,
    "seconds staging waits for a data-set cache lock held where this node cannot "
    "see (another node; default 3600)",
)

# --- parameter servers (algorithms async and downpour) -------------------------------------------
PS_ADDRS = _var("PS_ADDRS", str, BACKEND, "HOST:PORT of each server shard, in shard order")
PS_SHARD = _var("PS_SHARD", int, BACKEND, "this server's shard")
PS_PORT = _var("PS_PORT", int, BACKEND, "this server's port")
PS_BIND = _var("PS_BIND", str, BACKEND, "the address this server binds (default: every interface)")
PS_RESTART = _var("PS_RESTART", int, BACKEND, "how often this server has restarted")
PS_LISTEN_FD = _var(
    "PS_LISTEN_FD", int, BACKEND, "a listening socket the launcher made and holds across restarts"
)
PS_SECRET = _var("PS_SECRET", str, BACKEND, "the run's handshake secret (else the run directory's ps.secret)")
PS_CONNECT_TIMEOUT = _var(
    "PS_CONNECT_TIMEOUT", float, USER, "seconds a worker waits for the servers (default 300)"
)

# --- the CLI -----------------------------------------------------------------------------------
HOME = _var("HOME", _path, USER, "the local stack's shared-file-system root (default ~/.alchemist)")
DEFAULTS = _var("DEFAULTS", _path, USER, "the defaults file (default ~/.config/alchemist/defaults.yaml)")
PULUMI_DIR = _var("PULUMI_DIR", _path, USER, "the Pulumi project that holds the stacks")
TEAM = _var(
    "TEAM",
    str,
    USER,
    "the team of a cluster stack the CLI acts for (default: the stack's first); --team overrides it",
)
WARM_AGENT = _var(
    "WARM_AGENT", _unless_0, USER, "0: do not start torchrun's interpreter while the CLI validates the job"
)
DEPS_CACHE_GIB = _var(
    "DEPS_CACHE_GIB", float, USER, "GiB the jobs' package environments may take under the home (default 10)"
)
LOCAL_NETNS = _var(
    "LOCAL_NETNS",
    _unless_0,
    USER,
    "0: run local jobs in this machine's network, not a namespace of their own "
    "(their listeners are then reachable by every local account). With 1 (the "
    "default) a job reaches out through `slirp4netns` where it is installed (none "
    "otherwise, with one warning line), and this machine's `127.0.0.1` is "
    "`10.0.2.2` from inside: `AWS_ENDPOINT_URL[_S3]` naming loopback is rewritten "
    "for the workers, a loopback URL of your own must say `10.0.2.2` "
    "(docs/security.md)",
)
OBJECT_STORE = _var(
    "OBJECT_STORE", str, USER, "s3://BUCKET: the object store `data push` uses on the local stack"
)

# --- the training image ------------------------------------------------------------------------
TORCH_BUILD = _var("TORCH_BUILD", str, IMAGE, "the torch build in the image: cpu or cuda")
FRAMEWORKS = _var("FRAMEWORKS", str, IMAGE, "the optional frameworks in the image")
FABRIC_LIBRARIES = _var(
    "FABRIC_LIBRARIES", str, IMAGE, "1: the image holds a network fabric's libraries and NCCL's net plugin"
)

# --- fault injection (tests and benchmarks) -----------------------------------------------------
FAULT_STALL_AT_STEP = _var(
    "FAULT_STALL_AT_STEP", int, FAULT, "after optimizer step N, one rank stops making progress"
)
FAULT_STALL_SECONDS = _var(
    "FAULT_STALL_SECONDS", float, FAULT, "... for this many seconds (default: until the run is stopped)"
)
FAULT_STALL_RANK = _var("FAULT_STALL_RANK", int, FAULT, "... on this rank (default 0)")
FAULT_STALL_BUSY = _var(
    "FAULT_STALL_BUSY", _flag, FAULT, "1: the stalled rank computes (a busy loop) instead of sleeping"
)
FAULT_HOLD_FILE = _var(
    "FAULT_HOLD_FILE", _path, FAULT, "after step 1, every rank waits until this file exists"
)
SLOW_RANKS = _var("SLOW_RANKS", str, FAULT, "RANK:FACTOR,...: stretch each step of these ranks")
ALLOW_NAN = _var("ALLOW_NAN", _flag, FAULT, "1: keep training when the loss is not finite")
