"""Which framework a script task trains with, and what its workers are told on a cluster.

A `script:` or `module:` task says `framework: torch | tensorflow | jax`. Every framework runs
under the same launcher (one torchrun agent per node: placement, logs, restarts); only the
variables a worker starts with differ:

* torch: torchrun's own (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`...), nothing more.
* tensorflow: `TF_CONFIG` = {cluster: {worker: [host:port of every worker]}, task: {type:
  worker, index: i}}, what `tf.distribute.MultiWorkerMirroredStrategy()` reads.
* jax: `JAX_COORDINATOR_ADDRESS` (worker 0's host:port), `JAX_NUM_PROCESSES`,
  `JAX_PROCESS_ID`, what `jax.distributed.initialize()` resolves with no arguments
  (alchemist_jobs/runtime/framework_env.py says how).

On a cluster, worker i = pod index x procs_per_node + local rank, at the pod's stable JobSet
host name and port FRAMEWORK_BASE_PORT + local rank: the cluster part is known when the
manifests are written (so `--dry-run` shows it) and the worker adds its own index. Locally,
workers bind a free loopback port each and swap addresses through the rendezvous's store.
Each framework is a class here, collected in FRAMEWORKS: the spec's `task.framework`, the
manifests, the worker (runtime/framework_env.py) and scripts/lockfile.py ask it, never the name;
`python -m alchemist_jobs.frameworks --optional` prints the extras for the shell scripts
(scripts/setup, images/build). This module imports neither framework.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Literal

from alchemist_jobs import environment as E

# Cluster stacks: a TensorFlow worker of local rank l listens on FRAMEWORK_BASE_PORT + l (its
# gRPC server); a JAX job's coordinator (process 0, on pod 0) on FRAMEWORK_BASE_PORT. Between
# the parameter servers' ports (29600 + shard, at most 64) and nothing else of a pod's.
FRAMEWORK_BASE_PORT = 29700


class Framework:
    """What a framework needs of Alchemist; the defaults are torch's (torchrun's own variables,
    nothing more). A new framework is a subclass below, added to FRAMEWORKS: the spec's
    `task.framework`, the lock's sections, the image build and the worker all ask it."""

    name: ClassVar[str]
    # What a worker imports to check it has the framework.
    module: ClassVar[str]
    # The pyproject extra that installs it, which is also its requirements.lock section and its
    # value in the training image's FRAMEWORKS build argument (`images/build --frameworks`);
    # None: in the runtime section, in every image.
    extra: ClassVar[str | None] = None
    # A script of it brings its own loop, optimizer and checkpoints: the built-in trainer's
    # sections are refused when set (spec.unhonoured), and the bootstrap prepares its variables.
    own_loop: ClassVar[bool] = True
    # The spec's algorithms a script of it can run (None: every one; torch's own loop and
    # alchemist_jobs.prepare), and which of their fields it honours (the rest are refused at
    # their defaults' other values: spec.unhonoured).
    algorithms: ClassVar[tuple[str, ...] | None] = ("sync",)
    algorithm_fields: ClassVar[frozenset[str]] = frozenset()
    # The variable a cluster's manifests set (cluster_env): present, the worker adds only its
    # own index; absent (a local run), the workers swap their addresses first. The worker
    # rewrites it even when set.
    cluster_var: ClassVar[str | None] = None

    def ports(self, procs_per_node: int) -> list[tuple[str, int]]:
        """(name, port) of what a worker pod listens on for the run's own traffic."""
        return []

    def cluster_env(self, hosts: list[str], procs_per_node: int) -> dict[str, str]:
        """The cluster part every worker pod starts with; `hosts`: the pods in index order."""
        return {}

    def worker_vars(self, env: Mapping[str, str], addresses: list[str] | None, index: int) -> dict[str, str]:
        """This worker's variables: `addresses` every worker's host:port in rank order (a local
        run's swap) or None (a cluster: `env` holds cluster_env's); `index` its place."""
        return {}

    def import_vars(self) -> dict[str, str]:
        """What the framework reads once, when it is imported (a value the job's env gives wins)."""
        return {}

    def gpu_vars(self, env: Mapping[str, str], share: list[int], gpus: int) -> dict[str, str]:
        """What tells it this worker's share of the node's GPUs (positions among the visible
        ones), when a node runs several workers."""
        return {}

    def after_import(self, gpus: int) -> None:
        """Once it is imported in the worker, before the user's program."""


class Torch(Framework):
    name = "torch"
    module = "torch"
    own_loop = False
    algorithms = None


class TensorFlow(Framework):
    """TF_CONFIG, what `tf.distribute.MultiWorkerMirroredStrategy()` reads; worker local rank l
    listens on FRAMEWORK_BASE_PORT + l (its gRPC server)."""

    name = "tensorflow"
    module = "tensorflow"
    extra = "tensorflow"
    cluster_var = "TF_CONFIG"

    def ports(self, procs_per_node: int) -> list[tuple[str, int]]:
        return [(f"tf-{r}", FRAMEWORK_BASE_PORT + r) for r in range(procs_per_node)]

    def cluster_env(self, hosts: list[str], procs_per_node: int) -> dict[str, str]:
        workers = [f"{h}:{FRAMEWORK_BASE_PORT + r}" for h in hosts for r in range(procs_per_node)]
        return {"TF_CONFIG": json.dumps({"cluster": {"worker": workers}}, separators=(",", ":"))}

    def worker_vars(self, env: Mapping[str, str], addresses: list[str] | None, index: int) -> dict[str, str]:
        out: dict[str, str] = {}
        config = json.loads(env.get("TF_CONFIG") or "{}")
        if "task" in config:  # the user's own TF_CONFIG (spec.env): theirs wins
            return out
        if addresses is not None:
            config = {"cluster": {"worker": addresses}}
        config["task"] = {"type": "worker", "index": index}
        out["TF_CONFIG"] = json.dumps(config, separators=(",", ":"))
        threads = env.get("OMP_NUM_THREADS")
        if threads:  # TensorFlow sizes its pools by the machine, not by OMP_NUM_THREADS
            out["TF_NUM_INTRAOP_THREADS"] = threads
            out["TF_NUM_INTEROP_THREADS"] = threads
        return out

    def gpu_vars(self, env: Mapping[str, str], share: list[int], gpus: int) -> dict[str, str]:
        visible = env.get("CUDA_VISIBLE_DEVICES")
        devices = visible.split(",") if visible else [str(i) for i in range(gpus)]
        return {"CUDA_VISIBLE_DEVICES": ",".join(devices[i % len(devices)] for i in share)}


class Jax(Framework):
    """JAX_COORDINATOR_ADDRESS (worker 0's host:port, on pod 0 at FRAMEWORK_BASE_PORT),
    JAX_NUM_PROCESSES, JAX_PROCESS_ID: what `jax.distributed.initialize()` resolves with no
    arguments (runtime/framework_env.py's register_jax_cluster says how); beside them
    Kubeflow training-operator v1's JAXJob names (pkg/controller.v1/jax/envvar.go): the
    coordinator's host and port apart, the process count, PROCESS_ID."""

    name = "jax"
    module = "jax"
    extra = "jax"
    cluster_var = "JAX_COORDINATOR_ADDRESS"
    # bmuf and easgd through alchemist_jobs.jax_averaging (its docstring: the fields it reads)
    algorithms = ("sync", "bmuf", "easgd")
    algorithm_fields = frozenset({"tau", "block_momentum", "block_lr", "nesterov", "reset_momentum", "alpha"})

    def ports(self, procs_per_node: int) -> list[tuple[str, int]]:
        return [("jax-coordinator", FRAMEWORK_BASE_PORT)]

    def cluster_env(self, hosts: list[str], procs_per_node: int) -> dict[str, str]:
        count = str(len(hosts) * procs_per_node)
        return {
            "JAX_COORDINATOR_ADDRESS": f"{hosts[0]}:{FRAMEWORK_BASE_PORT}",
            "JAX_NUM_PROCESSES": count,
            "COORDINATOR_ADDRESS": hosts[0],
            "COORDINATOR_PORT": str(FRAMEWORK_BASE_PORT),
            "NUM_PROCESSES": count,
        }

    def worker_vars(self, env: Mapping[str, str], addresses: list[str] | None, index: int) -> dict[str, str]:
        out: dict[str, str] = {}
        if addresses is not None:
            out["JAX_COORDINATOR_ADDRESS"] = addresses[0]
            # jax's coordinator binds [::]:port unless told: a local run stays on loopback.
            out["JAX_COORDINATOR_BIND_ADDRESS"] = addresses[0]
            out["JAX_NUM_PROCESSES"] = env["WORLD_SIZE"]
            host, _, port = addresses[0].rpartition(":")
            out["COORDINATOR_ADDRESS"], out["COORDINATOR_PORT"] = host, port
            out["NUM_PROCESSES"] = env["WORLD_SIZE"]
        out["JAX_PROCESS_ID"] = str(index)
        out["PROCESS_ID"] = out["JAX_PROCESS_ID"]
        return out

    def import_vars(self) -> dict[str, str]:
        return {
            # Cross-process collectives on CPU: gloo over the coordinator's key-value store
            # (jax's default at 0.10.2; said here so a later default cannot leave them out).
            "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
            # jax.distributed.initialize() otherwise starts XLA's preemption notifier, whose
            # SIGTERM handler only logs ("SIGTERM caught"): a group stop then waits out
            # torchrun's 30 s grace. Here a stop is a restart from the job's checkpoints.
            "JAX_ENABLE_PREEMPTION_SERVICE": "false",
        }

    def gpu_vars(self, env: Mapping[str, str], share: list[int], gpus: int) -> dict[str, str]:
        # One GPU each: jax's local process id does it (register_jax_cluster).
        if len(share) > 1 and "JAX_LOCAL_DEVICE_IDS" not in env:
            return {"JAX_LOCAL_DEVICE_IDS": ",".join(map(str, share))}
        return {}

    def after_import(self, gpus: int) -> None:
        register_jax_cluster(gpus)


def register_jax_cluster(gpus: int = 0) -> None:
    """Make `jax.distributed.initialize()` find this job's process count and id (see the
    module's docstring): a ClusterEnv for JAX_* variables, first in jax's list."""
    from jax._src import clusters

    class AlchemistCluster(clusters.ClusterEnv):
        name = "alchemist"

        @classmethod
        def is_env_present(cls) -> bool:
            return all(
                k in os.environ for k in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")
            )

        @classmethod
        def get_coordinator_address(cls, timeout_secs, override_coordinator_port=None) -> str:
            return os.environ["JAX_COORDINATOR_ADDRESS"]

        @classmethod
        def get_process_count(cls) -> int:
            return int(os.environ["JAX_NUM_PROCESSES"])

        @classmethod
        def get_process_id(cls) -> int:
            return int(os.environ["JAX_PROCESS_ID"])

        @classmethod
        def get_local_process_id(cls) -> int | None:
            # With one GPU per process, its local rank's; one process per node sees them all
            # (None), several per node get JAX_LOCAL_DEVICE_IDS (gpu_vars); on CPU, jax's one
            # CPU device.
            if not gpus or int(os.environ.get("LOCAL_WORLD_SIZE", gpus)) != gpus:
                return None
            return int(os.environ.get("LOCAL_RANK", 0))

    types = clusters.ClusterEnv._cluster_types
    types[:] = [AlchemistCluster] + [t for t in types if t.name != AlchemistCluster.name]


# Every framework by its name: a new one is its class above, added here.
FRAMEWORKS: dict[str, Framework] = {fw.name: fw for fw in (Torch(), TensorFlow(), Jax())}
NAMES = tuple(FRAMEWORKS)
if TYPE_CHECKING:
    FrameworkName = str
else:  # the spec's `task.framework`: a Literal of the registry's names
    FrameworkName = Literal[NAMES]
# Derived for callers that hold a name: what a worker imports, and the extra that installs it.
MODULES = {name: fw.module for name, fw in FRAMEWORKS.items()}
EXTRAS = {name: fw.extra for name, fw in FRAMEWORKS.items() if fw.extra}


def get(name: str) -> Framework:
    """The registry's framework of that name (KeyError: one line naming the accepted)."""
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise KeyError(f"task.framework: {name!r}; accepted: {', '.join(FRAMEWORKS)}") from None


# The spec's sections only the built-in trainer (or, for a torch script, alchemist_jobs.prepare)
# acts on. A TensorFlow or JAX script brings its own loop and optimizer: a value other than
# the default there would be accepted and do nothing, so it is refused. (`algorithm.name`
# other than the framework's `algorithms` is refused by JobSpec itself; a JAX script's bmuf and
# easgd fields are honoured by alchemist_jobs.jax_averaging.) `checkpoint` is honoured through the
# checkpoint helpers (alchemist_jobs.tf_checkpoint, alchemist_jobs.jax_checkpoint).
IGNORED_BY_OWN_FRAMEWORK = {
    "algorithm": "torch's options (DDP, compression, accumulation, overlap); do them in the script",
    "hyper": "the script sets its own (pass them in task.args)",
    "precision": "the script sets its own precision",
    "curve": "the built-in trainer's learning curve",
}


def install_hint(framework: str) -> str:
    """How to get a framework into the worker's Python: the extra, or the image's build arg."""
    extra = EXTRAS[framework]
    return (
        f"pip install 'alchemist[{extra}]' (scripts/setup installs it), or for a cluster "
        f"build the image with `images/build --frameworks {extra}`"
    )


def ports(framework: str, procs_per_node: int) -> list[tuple[str, int]]:
    """(name, port) of what a worker pod's framework listens on: the run's own traffic."""
    return get(framework).ports(procs_per_node)


def cluster_env(framework: str, hosts: list[str], procs_per_node: int) -> dict[str, str]:
    """The variables every worker pod of a cluster run starts with; `hosts` are the worker
    pods' DNS names in index order. The bootstrap adds each worker's own index."""
    fw = get(framework)
    if not fw.own_loop:
        return {}
    return {**E.FRAMEWORK.entry(framework), **fw.cluster_env(hosts, procs_per_node)}


def main(argv: list[str]) -> int:
    """`--optional`: the extras of the frameworks besides torch, one a line, in the registry's
    order (scripts/setup's lock sections, images/build's accepted --frameworks)."""
    if argv != ["--optional"]:
        print(f"alchemist_jobs.frameworks: arguments {argv}; accepted: --optional", file=sys.stderr)
        return 2
    print("\n".join(EXTRAS.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
