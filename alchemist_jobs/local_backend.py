"""The `local` stack: a job runs as torchrun agents and their worker processes on this machine
(a TensorFlow or JAX job on one node: one light agent, light_agent.py, with torchrun's
contract for its workers and no torch).

One torchrun agent per node (`nodes` > 1 simulates several nodes; their c10d rendezvous is a
file store in the run's private directory, which no other account can open), each starting `procs_per_node` workers through the bootstrap. torchrun gives the
semantics: rendezvous, `RANK`/`WORLD_SIZE`..., restarts up to `max_restarts`. The run
directory under the local shared-file-system root holds everything about the run.
"""

from __future__ import annotations

import builtins
import functools
import importlib.util
import json
import os
import pwd
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

import alchemist_jobs
from alchemist_jobs import environment as E
from alchemist_jobs import (
    job_env,
    launch_plan,
    local_servers,
    private_net,
    run_index,
    server_role,
    store_bind,
)
from alchemist_jobs.errors import UserError
from alchemist_jobs.failures import AttemptFailure, GroupFailures, attempt_failure, exit_text, failure_record
from alchemist_jobs.frameworks import MODULES, install_hint
from alchemist_jobs.processes import (
    alive,
    environ_has,
    owned_pids,
    popen_group,
    record_procs,
    start_time,
    still_same,
    stop_groups,
    stop_pids,
)
from alchemist_jobs.run_files import Progress, Result, RunRecord
from alchemist_jobs.rundir import (
    RUN_REF,
    RunDir,
    all_runs,
    match_runs,
    new_run_id,
    read_json,
    runs_root,
    write_private,
)
from alchemist_jobs.runtime import framework_env
from alchemist_jobs.runtime.devices import DeviceError, plan_local_devices, visible_devices
from alchemist_jobs.scheduler import (
    CANCELLED,
    FAILED,
    FINAL_STATES,
    LOG_CHUNK_BYTES,
    LOST,
    RESTARTING,
    RUNNING,
    SUCCEEDED,
    Artifacts,
    Listed,
    Placement,
    Request,
    RunStatus,
    Scheduler,
    listing_order,
)
from alchemist_jobs.spec import JobSpec, SecretRef
from alchemist_jobs.stack_kinds import THIS_MACHINE

if TYPE_CHECKING:
    from alchemist_jobs.warm_agent import WarmAgent

CANCEL_GRACE_S = 10.0
AGENT_MODULE = "alchemist_jobs.agent"  # torch.distributed.run with its stores bound
LIGHT_AGENT_MODULE = "alchemist_jobs.light_agent"  # one node of TF/JAX workers, without torch
_PKG_PARENT = str(Path(alchemist_jobs.__file__).resolve().parent.parent)


def read_secrets(secrets: Mapping[str, SecretRef], spec_dir: Path) -> dict[str, str]:
    """secret_env values for a local run (the launch plan's references): each from its `file`
    (relative to the spec, one trailing newline dropped) or the launching environment's
    `from_env`. A problem names the variable and the source, never a value."""
    values = {}
    for name, ref in secrets.items():
        where = f"secret_env.{name}"
        if ref.file:
            path = spec_dir / Path(ref.file).expanduser()
            try:
                text = _read_secret_file(path, where)
            except (OSError, UnicodeDecodeError) as e:
                raise UserError(
                    f"{where}: cannot read file {path} "
                    f"({getattr(e, 'strerror', None) or type(e).__name__}); "
                    "accepted: a readable UTF-8 file holding the value"
                ) from None
            values[name] = text[:-1] if text.endswith("\n") else text
        elif ref.from_env:
            if ref.from_env not in os.environ:
                raise UserError(
                    f"{where}: ${ref.from_env} is not set in this environment; "
                    "accepted: export it before `alchemist run`, or use `file`"
                )
            values[name] = os.environ[ref.from_env]
        else:
            raise UserError(
                f"{where}: names a Kubernetes Secret, which the local stack cannot "
                "read; accepted: `file: PATH` or `from_env: VARIABLE` for local runs"
            )
        if "\0" in values[name]:
            raise UserError(f"{where}: the value holds a NUL character; accepted: text")
    return values


def _account(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _read_secret_file(path: Path, where: str) -> str:
    """A secret_env file's text, refused if every account on the machine may read or change it
    (as ssh refuses an UNPROTECTED PRIVATE KEY FILE), if another account owns it (or the link
    that leads to it) or its group may change it: its value would be another account's choice.
    A file its group may read gets a warning."""
    link = os.lstat(path)
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())  # of the file read, not of a path checked before
        mode = st.st_mode
        mine = (os.geteuid(), 0)  # the user's, or root's (a secret an administrator placed)
        for what, owner in (("file", st.st_uid), ("link", link.st_uid)):
            if owner not in mine and (what == "file" or stat.S_ISLNK(link.st_mode)):
                raise UserError(
                    f"{where}: {what} {path} belongs to {_account(owner)}, not to you, "
                    "so its value is theirs to choose; accepted: a file you own, "
                    "only you can write (chmod 600)"
                )
        if mode & 0o020:
            raise UserError(
                f"{where}: file {path} may be changed by its group (mode "
                f"{stat.S_IMODE(mode):04o}), so its value is theirs to choose; "
                f"accepted: a file only you can write (chmod 600 {path})"
            )
        if mode & 0o007:
            raise UserError(
                f"{where}: file {path} is open to every account on this machine (mode "
                f"{stat.S_IMODE(mode):04o}), so its secret is not one; accepted: a file "
                f"only you can read (chmod 600 {path}), then replace the secret"
            )
        if mode & 0o070:
            print(
                f"warning: {where}: file {path} is open to its group (mode "
                f"{stat.S_IMODE(mode):04o}); chmod 600 {path} keeps it yours",
                file=sys.stderr,
            )
        return f.read().decode()


MAX_CODE_BYTES = 256 << 20
WARN_CODE_BYTES = 16 << 20


def code_of(spec: JobSpec, spec_dir: Path, home: Path) -> tuple[Path | None, list[str]]:
    """What a script or module task runs from: the spec's directory, as a cluster run ships
    it (honouring .gitignore and .alchemistignore), without the stack's home if it lies
    inside (earlier runs and data are not code); (None, []) for a built-in task."""
    if spec.task.builtin:
        return None, []
    from alchemist_jobs.kubernetes.code_assets import shipped_files  # pure: no kubernetes client

    root = spec_dir.resolve()
    # A secret_env file never travels with the code, wherever it lies.
    secret_files = {(root / Path(r.file).expanduser()).resolve() for r in spec.secret_env.values() if r.file}
    files = shipped_files(root, [home], spec.ship_secrets, leave_out=secret_files)
    for name, rel in (("task.script", spec.task.script), ("task.entry", spec.task.entry_file)):
        if rel and rel not in files:  # the run executes its copy only
            raise UserError(
                f"{name}: {rel!r} is not in the run's copy of {root} (ignored by "
                ".gitignore or .alchemistignore, or held back as a secret); "
                "accepted: a file of that directory that is copied"
            )
    sizes = {f: (root / f).stat().st_size for f in files}
    size = sum(sizes.values())
    if size > MAX_CODE_BYTES:
        raise UserError(
            f"task: code directory {root} holds {size >> 20} MiB; accepted: at most "
            f"{MAX_CODE_BYTES >> 20} MiB of code (list data and outputs in "
            ".alchemistignore: data belongs on the shared file system)"
        )
    if size > WARN_CODE_BYTES:  # copied into every run: say so, naming what weighs most
        big = max(sizes, key=sizes.__getitem__)
        print(
            f"warning: task: code directory {root} holds {size >> 20} MiB ({big}: "
            f"{sizes[big] >> 20} MiB), copied into every run; list data and outputs in "
            ".alchemistignore (data belongs on the shared file system)",
            file=sys.stderr,
        )
    return root, files


def copy_code(root: Path, files: list[str], dest: Path) -> None:
    """The run's own copy of its code: later edits of the source tree do not reach it."""
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)  # the workers' directory, files or not
    for rel in files:
        target = dest / rel
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copyfile(root / rel, target)
        os.chmod(target, 0o700 if os.access(root / rel, os.X_OK) else 0o600)


MIN_FREE_BYTES = 1 << 20


def disk_full(path: Path) -> str:
    """'no space left on <mount point>' when the file system holding `path` has less than
    MIN_FREE_BYTES left for the run, else ''."""
    try:
        st = os.statvfs(path)
    except OSError:
        return ""
    free = st.f_bavail * st.f_frsize
    if free >= MIN_FREE_BYTES:
        return ""
    mount, dev = Path(path), os.stat(path).st_dev
    while mount.parent != mount and os.stat(mount.parent).st_dev == dev:
        mount = mount.parent
    return (
        f"no space left on {mount} ({free // 1024} KiB free); a restart cannot help: "
        "free some space and run the job again"
    )


def config_error_path(run: RunDir) -> Path:
    """Where a local worker writes the line of a configuration error (config_error.py)."""
    return run.path / "config-error"


def config_error(run: RunDir) -> str:
    """The first configuration error a worker wrote (no restart can mend it), else ''."""
    try:
        with open(config_error_path(run), encoding="utf-8", errors="replace") as f:
            return f.readline(1000).strip()
    except OSError:
        return ""


def _restarts(run: RunDir) -> int:
    """How often the group restarted: each worker records its attempt's restart count."""
    counts = [r.get("restart") for r in run.worker_records()]
    return max([c for c in counts if isinstance(c, int) and not isinstance(c, bool)] + [0])


def _workers(run: RunDir) -> list[dict]:
    return [r for r in run.worker_records() if r.get("role", "worker") == "worker"]


def group_restarted(run: RunDir, restarts: int, world: int) -> bool:
    """Every worker of the group's attempt after `restarts` restarts has started (each
    records its attempt's restart count as it starts)."""
    counts = [r.get("restart") for r in _workers(run)]
    return len(counts) >= world and all(isinstance(c, int) and c >= restarts for c in counts)


class GroupRestarts:
    """The worker group's failures while a local run goes on, told as they happen. Each
    restart is recorded in run.json: `restarts`, a line in `restart_events` (which the CLI
    prints as it comes) and `message` until the new attempt's workers have all started
    (meanwhile `status` says restarting). A failure that repeats the previous attempt's
    exactly (rank, exit code, exception line, step) ends the retries with one line, since
    every further attempt would fail alike."""

    def __init__(self, run: RunDir, spec: JobSpec):
        self.run, self.spec = run, spec
        self.watch = GroupFailures(run.logs)
        self.failures: list[AttemptFailure] = []
        self.events: list[str] = []
        self.pending = False  # a restart whose workers have not all started yet
        self.repeated: AttemptFailure | None = None

    def poll(self) -> str:
        """'' while the run may go on; the line that says why it must stop otherwise."""
        for node, code, local_rank, pid in self.watch.new():
            stop = self._failed(node, code, local_rank, pid)
            if stop:
                return stop
        if self.pending and group_restarted(self.run, len(self.events), self.spec.world_size):
            self.pending = False
            self.run.update_state(message="")
        return ""

    def _failed(self, node: int, code: int, local_rank: int, pid: int) -> str:
        spec = self.spec
        rec = next((r for r in _workers(self.run) if r.get("pid") == pid), None)
        attempt = len(self.failures) + 1
        if rec is not None and isinstance(rec.get("restart"), int):
            attempt = rec["restart"] + 1
        if any(f.attempt == attempt for f in self.failures):
            return ""  # another node's workers, failing because that one did
        rank = rec.get("rank") if rec is not None else node * spec.procs_per_node + local_rank
        step = rec.get("step") if rec is not None else None
        if rec is None:  # read late: the next attempt's bootstrap has rewritten the record
            now = next((r for r in _workers(self.run) if r.get("rank") == rank), None) or {}
            step = (now.get("earlier_steps") or {}).get(str(attempt - 1))
        if not isinstance(step, int):  # a script that reports on rank 0 only: rank 0's step
            prog = Progress.lenient(self.run.progress() or {})
            step = prog.step if prog.restarts == attempt - 1 else None
        failure = attempt_failure(self.run.logs, attempt, rank if isinstance(rank, int) else None, code, step)
        before = self.failures[-1] if self.failures else None
        self.failures.append(failure)
        if attempt > spec.max_restarts:
            return ""  # the last attempt: the run's outcome tells it
        if before is not None and before.attempt == attempt - 1 and failure.same_as(before):
            self.repeated = failure
            at = f", at step {failure.step}" if failure.step is not None else ""
            who = f"rank {failure.rank}" if failure.rank is not None else "a worker"
            line = (
                f"{who} failed the same way on attempts {before.attempt} and {attempt} "
                f"({failure.what()}{at}); not restarting again"
            )
            self.run.update_state(restart_events=self.events + [line])
            return line
        line = f"{failure.describe()}; restarting {attempt}/{spec.max_restarts}"
        self.events.append(line)
        self.pending = True
        self.run.update_state(restarts=len(self.events), restart_events=self.events, message=line)
        return ""


def _spec_algorithm(run: RunDir) -> str | None:
    """algorithm.name of a run recorded before run.json kept it: from its spec.yaml."""
    try:
        raw = yaml.safe_load(run.spec.read_text()) or {}
        name = (raw.get("algorithm") or {}).get("name", "sync")
    except (OSError, ValueError, AttributeError, yaml.YAMLError):
        return None
    return name if isinstance(name, str) else None


def agents_message(procs: list[subprocess.Popen], codes: list[int | None], light: bool = False) -> str:
    """What a signal that ended a node's agent (torchrun's, or the light agent of a one-node
    TF/JAX job) says: a killed agent takes its workers with it, and torchrun's own report
    never says that the agent itself died."""
    agent = "agent" if light else "torchrun agent"
    for node, (proc, code) in enumerate(zip(procs, codes)):
        if code is not None and code < 0:
            return (
                f"the {agent} of node {node} (pid {proc.pid}) was killed by "
                f"{exit_text(code).split('(')[-1].rstrip(')')}; its workers were stopped "
                "with it"
            )
    return ""


def check_framework(spec: JobSpec) -> None:
    """Local workers run this very Python: a framework it lacks is one line before any start."""
    fw = spec.task.framework
    if fw != "torch" and importlib.util.find_spec(MODULES[fw]) is None:
        raise UserError(
            f"task.framework: {fw} is not installed in {sys.executable}; "
            f"accepted: torch, or install the '{fw}' extra: {install_hint(fw)}"
        )


def uses_light_agent(spec: JobSpec) -> bool:
    """A TensorFlow or JAX job on one node starts its workers through light_agent.py (no torch,
    no rendezvous); torch jobs, and several simulated nodes (whose agents meet in torchrun's
    c10d rendezvous), through torchrun's agent."""
    return spec.task.framework in ("tensorflow", "jax") and spec.nodes == 1


@dataclass
class LocalProcess:
    """One torchrun agent (one simulated node)."""

    node: int
    argv: list[str]
    env: dict[str, str]
    cwd: str
    log: Path

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return f"cd {shlex.quote(self.cwd)} && {env} {shlex.join(self.argv)}"


@dataclass
class LocalRequest(Request):
    run_id: str
    run: RunDir
    spec: JobSpec
    processes: list[LocalProcess]
    servers: list[local_servers.ServerProcess] = field(default_factory=list)  # parameter servers
    # secret_env values, read at launch: given to the agents' environment, never printed.
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    deps: job_env.JobLock | None = None  # the job's resolved packages (job_env.py)
    # A script or module task's code: files of `code_source` copied to the run's code/ at
    # schedule, which is the workers' working directory (as a cluster run's snapshot is).
    code_source: Path | None = None
    code_files: list[str] = field(default_factory=list)
    # The job in a network namespace of its own (private_net.py); False where its processes
    # are placed in networks already (the tests' simulated hosts, tests/netns.py).
    private_network: bool = True
    # What the processes above materialise (launch_plan.py): the same plan a cluster's
    # manifests are made from, with this machine as the target.
    plan: launch_plan.LaunchPlan | None = None

    def describe(self) -> str:
        head = [
            f"# run {self.run_id} on stack local: {self.spec.nodes} node(s) x "
            f"{self.spec.procs_per_node} worker(s), run directory {self.run.path}"
        ]
        if self.code_source is not None:
            head.append(
                f"# code: {len(self.code_files)} file(s) of {self.code_source} copied to "
                f"{self.run.path / 'code'}, the workers' working directory"
            )
        if self.deps is not None:
            head.append(
                f"# requirements: lock sha256:{self.deps.sha256} "
                f"({', '.join(self.deps.packages())}), environment {self.deps.short}"
            )
        head += [
            f"# secret {name} from {'file ' + ref.file if ref.file else '$' + str(ref.from_env)}"
            " (value not shown)"
            for name, ref in self.spec.secret_env.items()
        ]
        head += framework_env.dry_run_lines(  # each TF/JAX worker's variables, TF_CONFIG's task too
            self.spec.task.framework,
            self.spec.nodes,
            self.spec.procs_per_node,
            self.processes[0].env if self.processes else {},
            local=True,
        )
        return "\n".join(head + [s.shell() for s in self.servers] + [p.shell() for p in self.processes])

    def as_json(self) -> dict:
        """`--dry-run --json`: the run and each process (agent or server) it would start;
        secret_env appears by name and source only."""
        procs = [
            dict(role="agent", node=p.node, argv=p.argv, env=p.env, cwd=p.cwd, log=str(p.log))
            for p in self.processes
        ]
        procs += [
            dict(role="parameter-server", shard=s.shard, argv=s.argv, env=s.env, cwd=s.cwd, log=str(s.log))
            for s in self.servers
        ]
        secrets = {
            name: ({"file": ref.file} if ref.file else {"from_env": ref.from_env})
            for name, ref in self.spec.secret_env.items()
        }
        return dict(
            run_id=self.run_id,
            stack="local",
            run_dir=str(self.run.path),
            nodes=self.spec.nodes,
            procs_per_node=self.spec.procs_per_node,
            processes=procs,
            secret_env=secrets,
            requirements=None if self.deps is None else self.deps.as_json(),
        )


@dataclass
class LocalRun:
    request: LocalRequest
    procs: list[subprocess.Popen] = field(default_factory=list)
    servers: local_servers.LocalServers | None = None
    net: private_net.PrivateNet | None = None  # the job's own network namespace

    @property
    def run(self) -> RunDir:
        return self.request.run


def _node_devices(spec: JobSpec) -> list[str | None]:
    """Each local node's CUDA_VISIBLE_DEVICES (None: leave as is). Local nodes share one
    machine and each restarts LOCAL_RANK at 0, so each gets its own slice of the visible GPUs;
    a spec asking for more than the machine has is one line (or CPU, with gpu_fallback)."""
    try:
        return plan_local_devices(spec.resources.gpu, spec.nodes, spec.procs_per_node, visible_devices())
    except DeviceError as e:
        if spec.resources.gpu_fallback:
            return [None] * spec.nodes
        raise UserError(str(e)) from None


class LocalScheduler(Scheduler[LocalRequest, LocalRun]):
    stack = "local"
    capabilities = THIS_MACHINE  # the agents are the CLI's children (see `run --detach`)

    def run_id(self, handle: LocalRun) -> str:
        return handle.request.run_id

    def __init__(self, root: Path):
        self.root = Path(root)

    # -- dryrun / schedule --------------------------------------------------------------------

    def dryrun(self, spec: JobSpec, spec_dir: Path, run_id: str | None = None) -> LocalRequest:
        """The run's processes (agents, and servers where the algorithm has them) as command
        lines and environments; creates nothing."""
        run_id = run_id or new_run_id(spec.name)
        run = RunDir(runs_root(self.root) / run_id)
        code_source, code_files = code_of(spec, Path(spec_dir), self.root)
        cwd = str(run.path / "code") if code_source is not None else str(Path(spec_dir).resolve())
        pythonpath = os.pathsep.join(
            [_PKG_PARENT] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
        )
        # The c10d stores of a local run (the agents' rendezvous, rank 0's worker store) are
        # files in its private stores/ directory, never loopback ports: another account on
        # this machine could write to a port, and torch unpickles the rendezvous state
        # (store_bind.py). gloo's pairs bind loopback only.
        stores = str(run.stores)
        check_framework(spec)
        assert not isinstance(spec.requirements, str)  # parse_spec has read a file's lines
        deps = job_env.resolve(spec.requirements, self.root) if spec.requirements else None
        # The parameter-server role, for algorithms that have one: each shard on a free
        # loopback port, bound to loopback only.
        shard_ports = local_servers.server_ports(server_role.server_count(spec))
        plan = launch_plan.build(
            spec,
            run_id,
            launch_plan.Target(
                stack="local",
                shared_root=str(self.root),
                run_dir=str(run.path),
                servers=tuple((local_servers.HOST, port) for port in shard_ports),
                server_bind=local_servers.HOST,
                store_dir=stores,
                gloo_ifname="lo",
                pythonpath=pythonpath,
                config_error_file=str(config_error_path(run)),
                job_site=None if deps is None else str(job_env.site_dir(deps, self.root)),
                # A local rank's /metrics binds loopback only, unless the user's environment
                # says otherwise (runtime/metrics.py binds every interface where nothing is set).
                extra_env=E.METRICS_ADDR.entry(E.METRICS_ADDR.get(default="127.0.0.1")),
            ),
        )
        workers = plan.workers
        servers = local_servers.server_processes(plan.servers, run, cwd) if plan.servers else []
        devices = _node_devices(spec)
        procs = []
        rdzv_conf = "store_type=file" + (",join_timeout=120" if workers.replicas > 1 else "")
        light = uses_light_agent(spec)
        for node in range(workers.replicas):
            if light:  # one node: no rendezvous to hold
                argv = [
                    sys.executable,
                    "-m",
                    LIGHT_AGENT_MODULE,
                    f"--nproc-per-node={workers.procs_per_replica}",
                    f"--max-restarts={workers.max_restarts}",
                    f"--run-id={plan.run_id}",
                    "--local-addr=127.0.0.1",
                ]
            else:
                argv = [
                    sys.executable,
                    "-m",
                    AGENT_MODULE,
                    f"--nnodes={workers.replicas}",
                    f"--nproc-per-node={workers.procs_per_replica}",
                    f"--max-restarts={workers.max_restarts}",
                    "--rdzv-backend=c10d",
                    f"--rdzv-id={plan.run_id}",
                    f"--rdzv-endpoint={os.path.join(stores, store_bind.RENDEZVOUS_FILE)}",
                    f"--rdzv-conf={rdzv_conf}",
                    "--local-addr=127.0.0.1",
                ]
            argv += ["-m", workers.module, *workers.args]
            host = socket.gethostname()
            env = {
                **workers.env,
                **E.NODE.entry(f"{host}-node{node}" if workers.replicas > 1 else host),
            }
            gpus = devices[node]
            if gpus is not None:  # this node's own GPUs: LOCAL_RANK indexes into them
                env["CUDA_VISIBLE_DEVICES"] = gpus
            procs.append(LocalProcess(node=node, argv=argv, env=env, cwd=cwd, log=run.agent_log(node)))
        return LocalRequest(
            run_id=run_id,
            run=run,
            spec=spec,
            processes=procs,
            servers=servers,
            secrets=read_secrets(workers.secrets, Path(spec_dir)),
            code_source=code_source,
            code_files=code_files,
            deps=deps,
            plan=plan,
        )

    def schedule(self, request: LocalRequest, warm: WarmAgent | None = None) -> LocalRun:
        """Start the run. `warm`, if given, is an agent interpreter the CLI started early
        (alchemist_jobs/warm_agent.py): node 0's agent becomes that process."""
        run, spec = request.run, request.spec
        if request.deps is not None:  # built once per lock; a later run finds it in place
            job_env.ensure_site(request.deps, self.root)
        try:
            run.create(exclusive=True)
        except FileExistsError:
            raise UserError(
                f"run {request.run_id}: its directory {run.path} exists already; "
                "accepted: a new run id (leave it out to get one)"
            ) from None
        write_private(run.spec, spec.to_yaml())
        if request.deps is not None:
            job_env.record(run.path, request.deps)
        run.stores.mkdir(mode=0o700)
        rendezvous = run.stores / store_bind.RENDEZVOUS_FILE  # torch's FileStore would make it 0644
        os.close(os.open(rendezvous, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        if request.code_source is not None:
            copy_code(request.code_source, request.code_files, run.path / "code")
        run.update_state(
            run_id=request.run_id,
            name=spec.name,
            stack="local",
            state=RUNNING,
            created=time.time(),
            launcher_pid=os.getpid(),
            launcher_start=start_time(os.getpid()),
            workers=spec.world_size,
            algorithm=spec.algorithm.name,
            nodes=spec.nodes,
            agents=[],
            proc_starts={},
        )
        handle = LocalRun(request)
        try:
            handle.net, warm = self._private_net(request, warm)
            join = handle.net.preexec if handle.net is not None else None
            ps_env = {}
            if request.servers:
                handle.servers = local_servers.LocalServers(
                    request.servers,
                    run,
                    spec.max_restarts,
                    preexec=join,
                    listeners=handle.net.listeners if handle.net is not None else None,
                )
                handle.servers.start()
                ps_env = handle.servers.worker_env()
            for p in request.processes:
                argv = p.argv
                env = {**os.environ, **p.env, **ps_env, **request.secrets}
                if handle.net is not None and handle.net.slirp is not None:
                    env = private_net.for_job(env)  # loopback endpoints as seen from inside
                if warm is not None and p.node == 0:
                    handle.procs.append(warm.launch(argv, env, p.cwd, str(p.log)))
                    continue
                with open(os.open(p.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as log:
                    handle.procs.append(
                        popen_group(
                            argv,
                            cwd=p.cwd,
                            env=env,
                            stdout=log,
                            preexec=join,
                            stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL,
                        )
                    )
        except BaseException:
            if warm is not None:
                warm.discard()
            self._stop(handle, grace=2.0)
            run.update_state(state=FAILED, ended=time.time(), message="could not start torchrun")
            raise
        record_procs(run, agents=[pr.pid for pr in handle.procs])
        return handle

    @staticmethod
    def _private_net(
        request: LocalRequest, warm: WarmAgent | None
    ) -> tuple[private_net.PrivateNet | None, WarmAgent | None]:
        """The job's own network namespace (private_net.py), or None where this machine has
        none to give (one warning line). A warm agent started in a namespace of its own is
        node 0's agent there; one started without (namespaces refused at its start) is
        discarded, since it could not join."""
        if not request.private_network:
            return None, warm
        why = private_net.unavailable()
        no_out = private_net.no_outbound() if why is None else None
        source = request.spec.data.source or ""
        if no_out is not None and source.startswith("s3://"):
            # Its workers download the data set themselves: without outbound they would fail
            # at staging, after the start. This network instead, and the same warning.
            why = (
                f"{no_out} and data.source {source} needs the network (install {private_net.SLIRP}"
                " for a private network with outbound)"
            )
        if why is not None:
            print(
                f"warning: local run {request.run_id} uses this machine's network: {why}; its "
                "listeners (gloo, parameter servers, coordinators, /metrics) are reachable by "
                "other accounts on loopback (docs/security.md)",
                file=sys.stderr,
            )
            if warm is not None and private_net.ns_of(warm.proc.pid, "net") not in (
                "",
                private_net.ns_of(os.getpid(), "net"),
            ):
                warm.discard()  # started in a namespace of its own: not this network
                warm = None
            return None, warm
        if no_out is not None:
            print(
                f"warning: local run {request.run_id} has no outbound network: {no_out}; "
                f"install {private_net.SLIRP}, or set {E.LOCAL_NETNS.name}=0 to run it in "
                "this machine's network (docs/security.md)",
                file=sys.stderr,
            )
        elif dns := private_net.loopback_nameservers():
            print(
                f"warning: local run {request.run_id} cannot resolve host names: /etc/resolv.conf"
                f" names only loopback nameservers ({', '.join(dns)}), which its private "
                "network does not reach; use addresses, or set "
                f"{E.LOCAL_NETNS.name}=0 (docs/security.md)",
                file=sys.stderr,
            )
        join_pid = None
        if warm is not None:
            own = private_net.ns_of(warm.proc.pid, "net")
            if own not in ("", private_net.ns_of(os.getpid(), "net")):
                join_pid = warm.proc.pid
            else:
                warm.discard()
                warm = None
        run = request.run
        pythonpath = os.pathsep.join(p for p in (_PKG_PARENT, os.environ.get("PYTHONPATH")) if p)
        net = private_net.PrivateNet(
            str(run.path),
            len(request.servers),
            str(run.logs / "private-net.log"),
            join_pid=join_pid,
            env=dict(os.environ, PYTHONPATH=pythonpath),
            outbound=no_out is None,
        )
        # The one way in from outside: read-only /metrics of each worker (commands/monitor.py).
        run.update_state(metrics_bridge=net.bridge_port)
        return net, warm

    def wait(self, handle: LocalRun, tick: Callable[[], None] | None = None, poll: float = 0.1) -> RunStatus:
        """Block until every agent exits (calling `tick` each poll); record the outcome."""
        run = handle.run
        message, stopped = "", False
        restarts = GroupRestarts(run, handle.request.spec)
        while True:
            codes = [p.poll() for p in handle.procs]
            full = disk_full(run.path) or config_error(run) or restarts.poll()
            if full:
                # Restarting cannot free space or mend a configuration, nor help a failure
                # that repeats exactly: every attempt would die the same way.
                message, stopped = full, True
                self._stop(handle, grace=CANCEL_GRACE_S)
                codes = [p.poll() for p in handle.procs]
            elif (
                any(c not in (None, 0) for c in codes)
                and any(c is None for c in codes)
                or handle.servers is not None
                and not handle.servers.poll()
            ):
                # One node (or a parameter server) failed for good: the others would wait
                # for it until timeout.
                message, stopped = (
                    agents_message(handle.procs, codes, uses_light_agent(handle.request.spec)),
                    True,
                )
                self._stop(handle, grace=CANCEL_GRACE_S)
                codes = [p.poll() for p in handle.procs]
            if all(c is not None for c in codes):
                break
            if tick:
                tick()
            live = next((p for p in handle.procs if p.poll() is None), None)
            if live is None:  # the last agent exited since `codes` was read
                continue
            try:  # wakes the moment that agent exits, not at the next poll
                live.wait(timeout=poll)
            except subprocess.TimeoutExpired:
                pass
        if tick:
            tick()
        if not stopped:  # after a stop, SIGTERM is ours: it says nothing about the cause
            message = agents_message(handle.procs, codes, uses_light_agent(handle.request.spec))
        if handle.servers is not None and not stopped and all(c == 0 for c in codes):
            handle.servers.end(grace=CANCEL_GRACE_S)  # their final checkpoints and records
        if run.state().get("state") != CANCELLED:
            ok = all(c == 0 for c in codes) and not message
            outcome: dict = dict(restarts=_restarts(run))
            if not ok:  # told from the logs now, while they are certainly complete
                outcome["failure"] = failure_record(run.logs)
                message = message or outcome["failure"]["summary"]
            if restarts.repeated is not None:  # stopped by us: torchrun named no root cause
                f = restarts.repeated
                outcome["restarts"] = len(restarts.events)
                outcome["failure"].update(rank=f.rank, exit_code=f.exit_code, summary=message)
            try:
                run.update_state(
                    state=SUCCEEDED if ok else FAILED,
                    ended=time.time(),
                    exit_codes=codes,
                    message=message,
                    **outcome,
                )
            except OSError as e:  # a full disk: the outcome still reaches the user
                message = message or f"could not record the outcome: {e.strerror}"
        if handle.servers is not None:  # they exit by themselves once every worker is done
            handle.servers.stop(grace=CANCEL_GRACE_S)
        self._close_net(handle)
        self._kill_leftover_workers(run)
        status = self.status(run.run_id)
        if message and status.message != message:
            status.state, status.message = FAILED, message
        return status

    def interrupt(self, handle: LocalRun) -> RunStatus:
        """Ctrl-C: stop every agent and worker; the run is cancelled."""
        handle.run.update_state(state=CANCELLED, ended=time.time(), message="interrupted")
        self._stop(handle, grace=CANCEL_GRACE_S)
        self._kill_leftover_workers(handle.run)
        return self.status(handle.run.run_id)

    # -- status / logs / cancel / list -----------------------------------------------------------

    def _run(self, ref: str) -> RunDir:
        matches = match_runs(self.root, ref)
        if len(matches) == 1:
            return matches[0]
        if matches:
            names = ", ".join(r.run_id for r in matches[-3:])
            raise UserError(
                f"run id {ref!r}: {len(matches)} runs match ({names}...); accepted: "
                "a part of the id that only one run has"
            )
        known = [r.run_id for r in all_runs(self.root)][-3:]
        hint = f"; recent runs: {', '.join(known)}" if known else "; there are no runs yet"
        raise UserError(f"run id {ref!r}: no such run on stack local (under {runs_root(self.root)}){hint}")

    def status(self, run_id: str) -> RunStatus:
        return self._status(self._run(run_id))

    def _status(self, run: RunDir) -> RunStatus:
        return self._status_and_record(run)[0]

    def _status_and_record(self, run: RunDir) -> tuple[RunStatus, str]:
        """The run's status, and the state its launcher recorded in run.json."""
        raw = run.state()
        rec = RunRecord.lenient(raw)
        state: str = rec.state
        # A record without start times (written before they were kept) falls back to the
        # pid alone: this only decides what is shown; signals always need both.
        launcher = (
            still_same(rec.launcher_pid, rec.launcher_start)
            if rec.launcher_start is not None
            else alive(rec.launcher_pid)
        )
        if state == RUNNING and not launcher and not owned_pids(raw, "agents"):
            state = LOST  # the launcher died without recording an outcome
        elif state == RUNNING and rec.restarts and not group_restarted(run, rec.restarts, rec.workers):
            state = RESTARTING  # a rank failed: torchrun is starting the group again
        prog = Progress.lenient(run.progress()) if run.progress_file.exists() else None
        res = Result.lenient(run.result()) if run.result_file.exists() else None
        restarts = max(res.restarts if res else prog.restarts if prog else 0, rec.restarts)
        return RunStatus(
            run_id=run.run_id,
            name=rec.name,
            stack="local",
            state=state,
            created=rec.created,
            ended=rec.ended,
            workers=rec.workers,
            restarts=restarts,
            step=prog.step if prog else None,
            total_steps=prog.total_steps if prog else None,
            message=rec.message,
            run_dir=str(run.path),
            progress=prog,
            result=res,
            exit_codes=rec.exit_codes,
            algorithm=rec.algorithm or _spec_algorithm(run),
            failure=None if rec.failure is None else rec.failure.model_dump(),
            requirements=job_env.recorded(run.path),
        ), rec.state

    def logs(
        self, run_id: str, rank: int = 0, follow: bool = False, stop: threading.Event | None = None
    ) -> Iterator[str]:
        run = self._run(run_id)
        stop = stop or threading.Event()
        path = run.rank_log(rank)
        n = RunRecord.lenient(run.state()).workers
        if not 0 <= rank < max(n, 1):
            raise UserError(f"--rank {rank}: run {run.run_id} has ranks 0..{n - 1}")
        deadline = time.time() + 30
        while not path.exists():
            if not follow or stop.is_set() or self.status(run.run_id).finished or time.time() > deadline:
                raise UserError(f"run {run.run_id}: rank {rank} has written no log yet ({path})")
            stop.wait(0.2)
        with open(path, errors="replace") as f:
            while True:
                line = f.readline()
                if line:
                    yield line
                    continue
                if not follow or stop.is_set() or self.status(run.run_id).finished:
                    rest = f.read()
                    if rest:
                        yield rest
                    return
                stop.wait(0.2)

    # -- what the dashboard shows: read from the run's directory, which is this machine's ---

    def read_log(self, status: RunStatus, rank: int, offset: int) -> tuple[int, bytes, int]:
        """Read from the rank's file at `offset`: a long log is not reread at every poll."""
        n = status.workers
        if not 0 <= rank < max(n, 1):
            raise UserError(f"rank {rank}: run {status.run_id} has ranks 0..{n - 1}")
        assert status.run_dir is not None
        path = RunDir(Path(status.run_dir)).rank_log(rank)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if offset > size:  # the log was replaced: start over
                    offset = 0
                f.seek(offset)
                return offset, f.read(LOG_CHUNK_BYTES), size
        except FileNotFoundError:  # no line written yet
            return 0, b"", 0

    def placements(self, status: RunStatus) -> list[Placement]:
        """The ranks' records (workers/rank-N.json), then the parameter-server shards'
        (workers/server-K.json, written by runtime/parameter_server.py), by shard."""
        assert status.run_dir is not None
        run = RunDir(Path(status.run_dir))
        ranks = [
            _placement(rec, status, "rank", "worker")
            for rec in run.worker_records()
            if rec.get("role", "worker") == "worker"
        ]
        servers = []
        for path in sorted(run.workers.glob("server-*.json")):
            rec = read_json(path) or {}
            if rec.get("role") == "server" and _int_or_none(rec.get("shard")) is not None:
                servers.append(_placement(rec, status, "shard", "server"))
        return ranks + sorted(servers, key=lambda p: p.index)

    def artifacts(self, status: RunStatus) -> Artifacts:
        assert status.run_dir is not None
        run = RunDir(Path(status.run_dir))
        return Artifacts(spec_file=run.spec, tensorboard_dir=run.tensorboard, checkpoints_dir=run.checkpoints)

    def sample(self, status: RunStatus) -> dict[str, Any] | None:
        """progress.json and, while it runs, rank 0's own /metrics; an ended run's final
        communication seconds from rank 0's record."""
        from alchemist_jobs.ui.series import scrape_rank0  # only the dashboard asks for samples

        assert status.run_dir is not None
        prog = {} if status.progress is None else status.progress.model_dump()
        if not status.finished:
            prog.update(scrape_rank0(Path(status.run_dir)) or {})
        elif prog:
            prog.update(_final_communication(Path(status.run_dir)))
        return prog or None

    def owner(self, status: RunStatus) -> str | None:
        try:
            return _user(os.stat(status.run_dir).st_uid)  # type: ignore[arg-type]  # None: TypeError
        except (KeyError, OSError, TypeError):
            return None

    def run_ids(self) -> list[str]:
        """The run directories' names (a name without a spec.yaml is no run yet: its status
        raises UserError)."""
        try:
            return os.listdir(runs_root(self.root))
        except FileNotFoundError:
            return []

    def cancel(self, run_id: str) -> RunStatus:
        run = self._run(run_id)
        if run.state_file.exists() and not run.state_file.is_file():
            raise UserError(
                f"run {run.run_id}: {run.state_file} is not a regular file; "
                "accepted: a run whose run.json the launcher wrote"
            )
        st = run.state()
        if st.get("state") in FINAL_STATES:
            return self.status(run.run_id)
        run.update_state(state=CANCELLED, ended=time.time(), message="cancelled")
        # torchrun stops its workers on SIGTERM; parameter servers exit on it. Only pids that
        # are still the run's own processes are signalled (a pid may have been reused).
        stop_pids(owned_pids(st, "agents") + owned_pids(st, "servers"), CANCEL_GRACE_S)
        self._kill_leftover_workers(run)
        return self.status(run.run_id)

    def remove(self, run_id: str, force: bool = False) -> RunStatus:
        """Delete the run's directory. It first moves, in one rename, to a hidden name that
        no command takes for a run, so a listing never shows a half-deleted run."""
        run = self._run(run_id)
        st = self.status(run.run_id)
        if not st.finished:
            if not force:
                raise UserError(
                    f"rm {run.run_id}: the run is {st.state}; accepted: an ended "
                    "run, or --force to cancel it first"
                )
            st = self.cancel(run.run_id)
        doomed = run.path.with_name(f".removing-{run.run_id}-{os.getpid()}")
        try:
            os.rename(run.path, doomed)
        except OSError as e:
            raise UserError(
                f"rm {run.run_id}: cannot remove {run.path}: {e.strerror or type(e).__name__}"
            ) from None
        shutil.rmtree(doomed, ignore_errors=True)
        return st

    def list(self) -> list[RunStatus]:
        """Every run, oldest first. An ended run's status comes from the index of ended runs
        while its directory is unchanged (alchemist_jobs/run_index.py); any other run's files
        are read once."""
        read, indexed = self._scan()
        out = read + run_index.statuses(indexed.values())
        return sorted(out, key=listing_order)

    def list_json(self) -> builtins.list[Listed]:
        """`list()` encoded: an indexed run's document is the index's text, never decoded."""
        read, indexed = self._scan()
        out = [Listed(s.run_id, s.state, s.created, json.dumps(s.as_json())) for s in read]
        out += [Listed(run_id, e.state, e.created, e.text) for run_id, e in indexed.items()]
        return sorted(out, key=listing_order)

    def _scan(self) -> tuple[builtins.list[RunStatus], dict[str, run_index.Entry]]:
        """(the runs read from their files, the ended runs the index answers for); the index
        is saved when that changed it."""
        base = runs_root(self.root)
        try:
            entries = list(os.scandir(base))
        except (FileNotFoundError, NotADirectoryError):
            return [], {}
        indexed = run_index.load(base)
        keep: dict[str, run_index.Entry] = {}
        hits: dict[str, run_index.Entry] = {}
        read, changed = [], False
        for entry in entries:
            if not RUN_REF.fullmatch(entry.name) or not entry.is_dir(follow_symlinks=False):
                continue
            mtime = run_index.dir_mtime(entry)  # before the files are read
            hit = indexed.get(entry.name)
            if hit is not None and hit.mtime == mtime:
                keep[entry.name] = hits[entry.name] = hit
                continue
            run = RunDir(Path(entry.path))
            if not run.spec.is_file():
                continue
            st, recorded = self._status_and_record(run)
            if recorded in (SUCCEEDED, FAILED, CANCELLED):
                keep[entry.name] = run_index.Entry.of(mtime, st)
                changed = True
            read.append(st)
        if changed or keep.keys() != indexed.keys():
            run_index.save(base, keep)
        return read, hits

    # -- process hygiene -------------------------------------------------------------------------

    def _stop(self, handle: LocalRun, grace: float) -> None:
        stop_groups(handle.procs, grace)
        if handle.servers is not None:
            handle.servers.stop(grace)
        self._close_net(handle)

    @staticmethod
    def _close_net(handle: LocalRun) -> None:
        if handle.net is not None:
            handle.net.close()
            handle.net = None

    def _kill_leftover_workers(self, run: RunDir) -> None:
        """Workers die with their agent (PDEATHSIG); this catches any that did not."""
        for rec in run.worker_records():
            pid = rec.get("pid")
            if isinstance(pid, int) and alive(pid) and environ_has(pid, f"{E.RUN_DIR.name}={run.path}"):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _int_or_none(x: Any) -> int | None:
    try:
        return int(x) if x is not None and not isinstance(x, bool) else None
    except (TypeError, ValueError):
        return None


def _float_or_none(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def _placement(rec: dict[str, Any], status: RunStatus, key: str, role: str) -> Placement:
    """A worker's or server's record (workers/*.json) as its Placement."""
    if rec.get("finished"):
        state = "finished"
    elif status.finished:
        state = status.state
    else:
        state = "running" if alive(rec.get("pid")) else "exited"
    return Placement(
        index=_int_or_none(rec.get(key)) or 0,
        state=state,
        node=str(rec.get("node", "")),
        restarts=_int_or_none(rec.get("restart")) or 0,
        pid=_int_or_none(rec.get("pid")),
        started=_float_or_none(rec.get("started")),
        updates=_int_or_none(rec.get("version")) if role == "server" else None,
        role=role,
    )


def _final_communication(run_dir: Path) -> dict[str, float]:
    """Rank 0's communication seconds at its end, from the counters it left in its record
    (`final_metrics`, as its /metrics said them last): an ended run's chart shows them."""
    final = (read_json(run_dir / "workers" / "rank-0.json") or {}).get("final_metrics") or {}
    seconds = _float_or_none(final.get("alchemist_communication_seconds_total"))
    return {} if seconds is None else {"communication_s": seconds}


@functools.lru_cache(maxsize=256)
def _user(uid: int) -> str:
    """The user name of `uid` (a home of 10,000 runs has a few owners)."""
    return pwd.getpwuid(uid).pw_name
