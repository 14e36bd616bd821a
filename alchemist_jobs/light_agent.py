"""The local stack's agent for one node of TensorFlow or JAX workers: torchrun's contract for
its workers, without torch (about 1.1 s of imports and a c10d rendezvous before the first
worker of a job that never uses torch).

    python -m alchemist_jobs.light_agent --nproc-per-node=N --max-restarts=R --run-id=ID \\
        -m MODULE ARGS...

It gives each worker the variables torchrun's LocalElasticAgent gives
(torch/distributed/elastic/agent/server/local_elastic_agent.py `_start_workers`, torch 2.13:
RANK, LOCAL_RANK, GROUP_RANK, ROLE_RANK, ROLE_NAME, LOCAL_WORLD_SIZE, WORLD_SIZE,
GROUP_WORLD_SIZE, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,
TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID, TORCHELASTIC_USE_AGENT_STORE,
TORCH_NCCL_ASYNC_ERROR_HANDLING, TORCHELASTIC_ERROR_FILE), restarts the whole group when a
worker fails, up to --max-restarts, and writes what the backend reads from torchrun's log in
torchrun's words: a `failed (exitcode: C) local_rank: L (pid: P)` line for each failed
attempt, and the `Root Cause (first observed failure):` block when the group fails for good
(failures.py). Each round starts with fresh store files in the run's private stores/
directory, MASTER_PORT naming them (store_bind.py; the workers swap their addresses through
them, runtime/framework_env.py).

Stopping a group (a failed worker, or SIGTERM/SIGINT/SIGHUP/SIGQUIT to this agent, which
torchrun handles alike): the signal to each worker's process group, then SIGCONT (a stopped
worker acts on nothing else), then SIGKILL after STOP_GRACE_S. torchrun waits 30 s there:
a JAX or TensorFlow worker that ignored SIGTERM held each restart that long. A worker dies
with this agent (PR_SET_PDEATHSIG, set here before exec and again by the bootstrap).

One node only: a run of several simulated nodes keeps torchrun's agent and its rendezvous
(local_backend.py).

Standard library only: this is the whole point.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from alchemist_jobs import environment as E
from alchemist_jobs import processes, store_bind

STOP_GRACE_S = 5.0  # SIGTERM to SIGKILL, for a group restart and for this agent's own stop
HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)  # torchrun's
ROLE = "default"  # torchrun's role name when none is given


class Signalled(Exception):
    """This agent got a signal that ends it (torchrun's SignalException)."""

    def __init__(self, sig: int):
        super().__init__(f"process {os.getpid()} got signal: {sig}")
        self.sig = signal.Signals(sig)


def _raise_signalled(sig: int, _frame: object) -> None:
    raise Signalled(sig)


def log(level: str, message: str) -> None:
    """A line in torch's logging format (`E1204 02:50:00.123456 PID file:line] message`):
    failures.py reads the time to order the failures of several agents."""
    now = time.time()
    stamp = time.strftime("%m%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1e6):06d}"
    print(
        f"{level}{stamp} {os.getpid()} alchemist_jobs/light_agent.py] {message}", file=sys.stderr, flush=True
    )


@dataclass
class Failure:
    """A worker that ended with a non-zero code (negative: the signal that ended it)."""

    local_rank: int
    rank: int
    pid: int
    exitcode: int
    timestamp: float
    error_file: str

    def signal_name(self) -> str:
        if self.exitcode >= 0:
            return ""
        try:
            return f" ({signal.Signals(-self.exitcode).name})"
        except ValueError:
            return ""

    def message(self) -> str:
        """The traceback the worker left in its error file (torch's `record`), else <N/A>."""
        try:
            with open(self.error_file) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return "<N/A>"
        msg = data.get("message") if isinstance(data, dict) else None
        if isinstance(msg, dict):
            msg = (msg.get("extraInfo") or {}).get("py_callstack") or msg.get("message")
        return str(msg or "<N/A>").replace("\n", "\n  ")

    def describe(self, idx: int) -> str:
        """torch.distributed.elastic.multiprocessing.errors' _FAILURE_FORMAT_TEMPLATE."""
        when = time.strftime("%Y-%m-%d_%H:%M:%S", time.localtime(self.timestamp))
        shown = self.error_file if os.path.exists(self.error_file) else "<N/A>"
        return (
            f"[{idx}]:\n"
            f"  time      : {when}\n"
            f"  host      : {os.uname().nodename}\n"
            f"  rank      : {self.rank} (local_rank: {self.local_rank})\n"
            f"  exitcode  : {self.exitcode} (pid: {self.pid}){self.signal_name()}\n"
            f"  error_file: {shown}\n"
            f"  traceback : {self.message() if shown != '<N/A>' else self._default()}"
        )

    def _default(self) -> str:
        if self.exitcode < 0:
            return f"Signal {-self.exitcode}{self.signal_name()} received by PID {self.pid}"
        return "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"


def failed_block(name: str, root: Failure, others: list[Failure]) -> str:
    """torch's ChildFailedError.format_msg: what failures.root_cause reads."""
    title = f"{name} FAILED"
    parts = [f.describe(i) for i, f in enumerate([root, *others])]
    width = min(60, max([len(title)] + [len(line) for p in parts for line in p.splitlines()]))
    rest = "\n".join(parts[1:]) or "  <NO_OTHER_FAILURES>"
    return (
        f"\n{'=' * width}\n{title}\n{'-' * width}\nFailures:\n{rest}\n{'-' * width}\n"
        f"Root Cause (first observed failure):\n{parts[0]}\n{'=' * width}"
    )


@dataclass
class Group:
    """One round of this node's workers (this node is node 0: one node only)."""

    restart: int
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)  # by local rank
    error_files: dict[int, str] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)

    def reap(self) -> bool:
        """Record the workers that failed since the last call; True once all have ended."""
        now = time.time()
        for local_rank, p in self.procs.items():
            if p.returncode is not None:
                continue  # seen already
            code = p.poll()
            if code is not None and code != 0:  # one node: the global rank is the local rank
                self.failures.append(
                    Failure(local_rank, local_rank, p.pid, code, now, self.error_files[local_rank])
                )
        return all(p.returncode is not None for p in self.procs.values())


class LightAgent:
    def __init__(self, nproc: int, max_restarts: int, run_id: str, entry: list[str], master_addr: str):
        self.nproc, self.max_restarts, self.run_id = nproc, max_restarts, run_id
        self.entry = entry  # [python, -m, MODULE, ARGS...]
        self.master_addr = master_addr
        self.logs_dir = tempfile.mkdtemp(prefix=f"torchelastic_{run_id}_")  # as torchrun's, 0700
        self.group: Group | None = None

    def worker_env(self, local_rank: int, restart: int, port: int, error_file: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            RANK=str(local_rank),
            LOCAL_RANK=str(local_rank),
            GROUP_RANK="0",
            ROLE_RANK=str(local_rank),
            ROLE_NAME=ROLE,
            LOCAL_WORLD_SIZE=str(self.nproc),
            WORLD_SIZE=str(self.nproc),
            GROUP_WORLD_SIZE="1",
            ROLE_WORLD_SIZE=str(self.nproc),
            MASTER_ADDR=self.master_addr,
            MASTER_PORT=str(port),
            TORCHELASTIC_RESTART_COUNT=str(restart),
            TORCHELASTIC_MAX_RESTARTS=str(self.max_restarts),
            TORCHELASTIC_RUN_ID=self.run_id,
            TORCHELASTIC_USE_AGENT_STORE="False",
            TORCH_NCCL_ASYNC_ERROR_HANDLING=os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
            TORCHELASTIC_ERROR_FILE=error_file,
        )
        return env

    def start(self, restart: int) -> Group:
        store_dir = E.STORE_DIR.get()
        port = store_bind.new_round(store_dir, processes.free_port) if store_dir else processes.free_port()
        group = Group(restart)
        self.group = group
        for local_rank in range(self.nproc):
            where = os.path.join(self.logs_dir, f"attempt_{restart}", str(local_rank))
            os.makedirs(where, mode=0o700, exist_ok=True)
            error_file = os.path.join(where, "error.json")
            group.error_files[local_rank] = error_file
            group.procs[local_rank] = subprocess.Popen(
                self.entry,
                env=self.worker_env(local_rank, restart, port, error_file),
                start_new_session=True,  # its own process group, as torchrun's workers
                preexec_fn=_die_with_agent,
            )
        return group

    def wait(self, group: Group) -> None:
        """Until every worker has ended or one has failed; woken by each worker's exit."""
        while not group.reap() and not group.failures:
            try:
                pid = _waitid_nowait()
            except ChildProcessError:
                continue  # reaped already by reap(): looked at again at the loop's head
            if pid not in {p.pid for p in group.procs.values()}:
                try:
                    os.waitpid(pid, 0)  # no child of ours but the workers; reap any other
                except ChildProcessError:
                    pass

    def stop(self, group: Group, sig: int = signal.SIGTERM) -> None:
        """`sig` to every live worker's group, SIGCONT, SIGKILL after STOP_GRACE_S."""
        live = [p for p in group.procs.values() if p.poll() is None]
        for p in live:
            processes.signal_group(p.pid, sig)
            processes.signal_group(p.pid, signal.SIGCONT)
        deadline = time.monotonic() + STOP_GRACE_S
        for p in live:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                processes.signal_group(p.pid, signal.SIGKILL)
                p.wait()

    def run(self) -> int:
        restart = 0
        while True:
            group = self.start(restart)
            self.wait(group)
            if not group.failures:
                log("I", f"[{ROLE}] worker group successfully finished.")
                return 0
            root = min(group.failures, key=lambda f: f.timestamp)
            self.stop(group)
            group.reap()
            log(
                "E",
                f"failed (exitcode: {root.exitcode}) local_rank: {root.local_rank} (pid: {root.pid}) "
                f"of binary: {self.entry[0]}",
            )
            left = self.max_restarts - restart
            if left > 0:
                log(
                    "I",
                    f"[{ROLE}] Worker group FAILED. {left}/{self.max_restarts} attempts left; will restart worker group",
                )
                restart += 1
                continue
            others = [f for f in group.failures if f is not root and f.exitcode != -signal.SIGTERM]
            name = self.entry[2] if self.entry[1:2] == ["-m"] else self.entry[1]
            print(failed_block(name, root, others), file=sys.stderr, flush=True)
            return 1

    def close(self) -> None:
        shutil.rmtree(self.logs_dir, ignore_errors=True)


def _waitid_nowait() -> int:
    """Block until some child has ended (its pid), leaving it to be reaped (Popen.poll does)."""
    res = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
    if res is None:  # only with WNOHANG
        raise ChildProcessError
    return res.si_pid


def _die_with_agent() -> None:
    processes.die_with_parent(signal.SIGKILL)


@contextmanager
def _handled_signals() -> Iterator[None]:
    old = {s: signal.signal(s, _raise_signalled) for s in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def parse(args: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m alchemist_jobs.light_agent")
    ap.add_argument("--nproc-per-node", type=int, required=True)
    ap.add_argument("--max-restarts", type=int, default=0)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--local-addr", default="127.0.0.1")
    ap.add_argument("-m", dest="module", required=True)
    ap.add_argument("args", nargs=argparse.REMAINDER)
    return ap.parse_args(args)


def main(args: list[str]) -> None:
    opts = parse(args)
    entry = [sys.executable, "-m", opts.module, *opts.args]
    agent = LightAgent(opts.nproc_per_node, opts.max_restarts, opts.run_id, entry, opts.local_addr)
    code = 1
    try:
        with _handled_signals():
            try:
                code = agent.run()
            except Signalled as e:
                # torchrun: "Received SIGTERM death signal, shutting down workers", the same
                # signal to the workers, and an exit that says the agent failed.
                log("W", f"Received {e.sig.name} death signal, shutting down workers")
                if agent.group is not None:
                    with _ignored_signals():
                        agent.stop(agent.group, e.sig)
                code = 1
    finally:
        agent.close()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


@contextmanager
def _ignored_signals() -> Iterator[None]:
    """A second SIGTERM while the workers are being stopped does not cut the stop short."""
    old = {s: signal.signal(s, signal.SIG_IGN) for s in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


if __name__ == "__main__":
    main(sys.argv[1:])
