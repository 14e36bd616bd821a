"""A job's neutral launch plan: the roles, commands, environment, ports, mounts, secrets and
sizes every backend materialises, built once from a validated JobSpec.

    plan = launch_plan.build(spec, run_id, Target(...what the stack says...))
    plan.role("worker"), plan.role("ps")   # each: replicas, module + args, env, ports, ...

Modelled on TorchX's `torchx.specs.AppDef` (an app is a list of `Role`s, each with
`num_replicas`, `entrypoint` + `args`, `env`, `port_map`, `mounts`, `resource` (cpu, memMB,
gpu) and `max_retries`; `macros.replica_id` stands for what differs between replicas), and
written by hand rather than taking torchx as a dependency: torchx 0.7.0 pins `urllib3<1.27`,
which breaks the `kubernetes` client this project needs, and its AppDef has no place for what
ours must carry (Secret references instead of values, the framework's cluster variables, the
parameter-server role's per-shard addresses); the part we need is these few dataclasses.

What differs between stacks is not here but in `Target`, which the backend fills from the
stack: where the shared file system is mounted, the workers' stable host names (a cluster's
pod DNS names; none locally, where the workers swap their addresses at start), where each
parameter-server shard listens, and the stack's own worker variables (stores, interfaces,
metrics). Each backend then only materialises the plan: the Kubernetes one into a JobSet's
replicatedJobs (kubernetes/manifests.py), the local one into torchrun agents and server
processes (local_backend.py, local_servers.py). What a backend adds is its own mechanism,
not the job's: the downward API and termination log of a pod, a local node's name and GPU
slice, a ConfigMap. The launcher looks at the algorithm in one place only: the server role.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from alchemist_jobs import environment as E
from alchemist_jobs import frameworks, server_role
from alchemist_jobs.contract import METRICS_BASE_PORT, metrics_port_name
from alchemist_jobs.spec import JobSpec, SecretRef
from alchemist_jobs.worker_env import WorkerEnv, threads_per_worker

WORKER, SERVER = "worker", "ps"  # the roles' names (and the JobSet's replicatedJobs')
WORKER_MODULE = "alchemist_jobs.runtime.bootstrap"  # each worker process: python -m this ARGS
RDZV_PORT = 29500  # torchrun's c10d rendezvous store on worker replica 0 (a cluster's)
SHARED_MOUNT, SHM_MOUNT = "shared", "dshm"  # the mounts' names (a pod's volume names)
SHM_PATH = "/dev/shm"
# What one parameter-server process asks for at most: a server holds one shard of the model's
# parameters and optimizer state (the job's optimizer runs on it) and answers the workers' pulls
# and pushes of that shard, so two cores and a few GiB serve a model of hundreds of millions of
# parameters split across the servers (a 500M-parameter model with Adam is 8 GB, 2 GB a shard
# over 4 servers) with room for the pushes in flight. A larger model asks for more servers.
SERVER_CPU = 2.0
SERVER_MEMORY = "4Gi"


@dataclass(frozen=True)
class Port:
    """A named port a role's processes listen on (TorchX `port_map`)."""

    name: str
    port: int


@dataclass(frozen=True)
class Mount:
    """A file system a role's processes see at `path` (TorchX `mounts`): the shared file system
    (SHARED_MOUNT, the run directory beneath it) or the shared-memory tmpfs (SHM_MOUNT)."""

    name: str
    path: str


@dataclass(frozen=True)
class Resources:
    """What one replica asks for (TorchX `Resource`): cpu cores, memory as a quantity of the
    spec's grammar (`2Gi`), GPUs."""

    cpu: float
    memory: str
    gpus: int = 0


@dataclass(frozen=True)
class Role:
    """One kind of replica (TorchX `Role`): `replicas` of them, each running
    `procs_per_replica` processes of `python -m module *args`."""

    name: str
    replicas: int
    procs_per_replica: int
    module: str
    args: tuple[str, ...]
    # Every replica's variables, in the order they are set (the job's `env` last: it wins).
    env: Mapping[str, str]
    # What each replica adds (TorchX's macros.replica_id, resolved): index k's variables.
    replica_env: tuple[Mapping[str, str], ...] = ()
    # secret_env as references (a Secret's key, a file, a variable): never a value.
    secrets: Mapping[str, SecretRef] = field(default_factory=dict)
    ports: tuple[Port, ...] = ()
    mounts: tuple[Mount, ...] = ()
    resources: Resources = Resources(cpu=1.0, memory="1Gi")
    # Restarts of the whole group (every role) before the run fails.
    max_restarts: int = 0

    def port(self, name: str) -> int:
        return next(p.port for p in self.ports if p.name == name)


@dataclass(frozen=True)
class Target:
    """What the stack tells the plan: the only inputs besides the spec and the run id.

    `worker_hosts`: each worker replica's stable host name in index order (a cluster's pod
    DNS names), or None where the workers swap their addresses at start (local). `servers`:
    (host as a worker reaches it, port it listens on) of each parameter-server shard, in
    shard order. The rest are the stack's own worker variables (worker_env.WorkerEnv)."""

    stack: str
    shared_root: str
    run_dir: str
    worker_hosts: tuple[str, ...] | None = None
    servers: tuple[tuple[str, int], ...] = ()
    server_bind: str | None = None  # the address a server binds (None: every interface)
    metrics_port: int | None = None
    log_to_console: bool = False
    log_prefix_template: str | None = None
    store_dir: str | None = None
    gloo_ifname: str | None = None
    pythonpath: str | None = None
    config_error_file: str | None = None
    job_site: str | None = None
    # Stack facts as variables, after the worker's own (NCCL's network-fabric settings, a local metrics
    # bind address): before the framework's and the job's.
    extra_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchPlan:
    """A run's roles (TorchX `AppDef`): the workers, then the parameter servers if any."""

    run_id: str
    name: str
    roles: tuple[Role, ...]
    # How long the workers wait for each other to join (the spec's rendezvous_timeout_s).
    rendezvous_timeout_s: int = 900

    def role(self, name: str) -> Role | None:
        return next((r for r in self.roles if r.name == name), None)

    @property
    def workers(self) -> Role:
        return self.roles[0]

    @property
    def servers(self) -> Role | None:
        return self.role(SERVER)


_SUFFIX: dict[str, int | Fraction] = {
    "": 1,
    "m": Fraction(1, 1000),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def quantity_bytes(q: str) -> Fraction:
    """A memory quantity of the spec's grammar (`2Gi`, `1.5G`, `512Mi`), exactly, in bytes."""
    number = q.rstrip("kmMGTPEi")
    return Fraction(number) * _SUFFIX[q[len(number) :]]


def server_resources(spec: JobSpec) -> Resources:
    """One parameter server's size: SERVER_CPU and SERVER_MEMORY, or one worker process's share
    of a node (resources / procs_per_node) where that is less (a small job's shard is small).
    Sized by what a server holds, not by the node: a server as large as a worker process
    (10 CPUs / 40 GiB of a g5.12xlarge worker) fitted only an empty GPU node, so an `async`
    job took a GPU node for its servers and left its GPUs idle (issue 36.7)."""
    procs = spec.procs_per_node
    share = quantity_bytes(spec.resources.memory) / procs
    mib = math.ceil(min(share, quantity_bytes(SERVER_MEMORY)) / 2**20)
    return Resources(cpu=max(min(spec.resources.cpu / procs, SERVER_CPU), 0.001), memory=f"{mib}Mi")


def _env(spec: JobSpec, target: Target) -> dict[str, str]:
    """The variables every process of the run starts with (worker_env.py's, the stack's, the
    framework's cluster part, then the job's own, which win)."""
    ps_addrs = server_role.addrs(list(target.servers)) if target.servers else None
    own = WorkerEnv(
        run_dir=target.run_dir,
        shared_root=target.shared_root,
        stack=target.stack,
        threads=threads_per_worker(spec.resources.cpu, spec.procs_per_node),
        ps_addrs=ps_addrs,
        metrics_port=target.metrics_port,
        log_to_console=target.log_to_console,
        log_prefix_template=target.log_prefix_template,
        store_dir=target.store_dir,
        gloo_ifname=target.gloo_ifname,
        pythonpath=target.pythonpath,
        # Where the stack names the workers' hosts, the framework's cluster part (below) names
        # the framework too; elsewhere the worker variable does.
        framework=spec.task.framework if target.worker_hosts is None else "torch",
        config_error_file=target.config_error_file,
        job_site=target.job_site,
    ).as_dict()
    env = {**own, **target.extra_env}
    if target.worker_hosts is not None:  # TF_CONFIG's cluster or JAX's coordinator
        env.update(
            frameworks.cluster_env(spec.task.framework, list(target.worker_hosts), spec.procs_per_node)
        )
    return {**env, **spec.env}


def build(spec: JobSpec, run_id: str, target: Target, name: str | None = None) -> LaunchPlan:
    """The plan of one run of a validated spec on the stack `target` describes. `name`: the
    run's object name where the stack needs one other than the run id."""
    shards = server_role.server_count(spec)
    if len(target.servers) != shards:
        raise ValueError(f"target.servers: {len(target.servers)} addresses for {shards} server shards")
    env = _env(spec, target)
    secrets = dict(spec.secret_env)  # in the spec's order (a backend may sort)
    mounts = (Mount(SHARED_MOUNT, target.shared_root), Mount(SHM_MOUNT, SHM_PATH))
    procs = spec.procs_per_node
    ports = [Port(metrics_port_name(r), METRICS_BASE_PORT + r) for r in range(procs)]
    ports.append(Port("rdzv", RDZV_PORT))
    # What the framework's workers listen on (TensorFlow's gRPC servers, JAX's coordinator).
    ports += [Port(n, p) for n, p in frameworks.ports(spec.task.framework, procs)]
    workers = Role(
        name=WORKER,
        replicas=spec.nodes,
        procs_per_replica=procs,
        module=WORKER_MODULE,
        args=tuple(spec.task.worker_args()),
        env=env,
        secrets=secrets,
        ports=tuple(ports),
        mounts=mounts,
        resources=Resources(cpu=spec.resources.cpu, memory=spec.resources.memory, gpus=spec.resources.gpu),
        max_restarts=spec.max_restarts,
    )
    roles = [workers]
    if shards:
        bind = {} if target.server_bind is None else {E.PS_BIND.name: target.server_bind}
        roles.append(
            Role(
                name=SERVER,
                replicas=shards,
                procs_per_replica=1,
                module=server_role.SERVER_MODULE,
                args=(),
                env=env,
                replica_env=tuple(
                    {**server_role.server_env(target.run_dir, k, port), **bind}
                    for k, (_, port) in enumerate(target.servers)
                ),
                secrets=secrets,
                ports=(
                    *(Port(f"ps-{k}", port) for k, (_, port) in enumerate(target.servers)),
                    Port(metrics_port_name(0), METRICS_BASE_PORT),
                ),
                mounts=mounts,
                resources=server_resources(spec),
                max_restarts=spec.max_restarts,
            )
        )
    return LaunchPlan(
        run_id=run_id,
        name=name or run_id,
        roles=tuple(roles),
        rendezvous_timeout_s=spec.rendezvous_timeout_s,
    )
