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
This module imports neither framework.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from alchemist_jobs import environment as E

if TYPE_CHECKING:
    from alchemist_jobs.spec import JobSpec

FRAMEWORKS = ("torch", "tensorflow", "jax")
# What a worker imports to check it has the framework, and the extra that installs it
# (pyproject.toml's optional-dependencies, locked in requirements.lock's section of that name).
MODULES = {"torch": "torch", "tensorflow": "tensorflow", "jax": "jax"}
EXTRAS = {"tensorflow": "tensorflow", "jax": "jax"}
# Cluster stacks: a TensorFlow worker of local rank l listens on FRAMEWORK_BASE_PORT + l (its
# gRPC server); a JAX job's coordinator (process 0, on pod 0) on FRAMEWORK_BASE_PORT. Between
# the parameter servers' ports (29600 + shard, at most 64) and nothing else of a pod's.
FRAMEWORK_BASE_PORT = 29700


# The spec's sections only the built-in trainer (or, for a torch script, alchemist_jobs.prepare)
# acts on. A TensorFlow or JAX script brings its own loop, optimizer and checkpoints: a value
# other than the default there would be accepted and do nothing, so it is refused.
# (`algorithm.name` other than sync is refused by JobSpec itself.)
IGNORED_BY_OWN_FRAMEWORK = {
    "algorithm": "sync's options are torch's (DDP's buckets, compression, accumulation); "
    "do them in the script",
    "hyper": "the script sets its own (pass them in task.args)",
    "checkpoint.every_steps": "the script writes its own checkpoints",
    "checkpoint.keep": "the script prunes its own checkpoints",
    "precision": "the script sets its own precision",
    "curve": "the built-in trainer's learning curve",
}


def unhonoured(spec: JobSpec) -> str | None:
    """For a TensorFlow or JAX task, the first field set to something other than its default
    that such a script cannot honour, as `field: value ...; accepted: ...` (None: all fine)."""
    framework = spec.task.framework
    if framework == "torch":
        return None
    for section, why in IGNORED_BY_OWN_FRAMEWORK.items():
        top, _, only = section.partition(".")
        node = getattr(spec, top)
        default = type(node)()
        for name in type(node).model_fields:
            if name == "name" or (only and name != only):
                continue
            value, dflt = getattr(node, name), getattr(default, name)
            if value != dflt:
                return (
                    f"{top}.{name}: {value!r} is not honoured by a script of "
                    f"task.framework {framework} ({why}); accepted: the default "
                    f"({_shown_default(dflt)})"
                )
    return None


def _shown_default(value: Any) -> str:
    return "unset" if value is None else repr(value)


def install_hint(framework: str) -> str:
    """How to get a framework into the worker's Python: the extra, or the image's build arg."""
    extra = EXTRAS[framework]
    return (
        f"pip install 'alchemist[{extra}]' (scripts/setup installs it), or for a cluster "
        f"build the image with `images/build --frameworks {extra}`"
    )


def ports(framework: str, procs_per_node: int) -> list[tuple[str, int]]:
    """(name, port) of what a worker pod's framework listens on: the run's own traffic."""
    if framework == "tensorflow":
        return [(f"tf-{r}", FRAMEWORK_BASE_PORT + r) for r in range(procs_per_node)]
    if framework == "jax":
        return [("jax-coordinator", FRAMEWORK_BASE_PORT)]
    return []


def cluster_env(framework: str, hosts: list[str], procs_per_node: int) -> dict[str, str]:
    """The variables every worker pod of a cluster run starts with; `hosts` are the worker
    pods' DNS names in index order. The bootstrap adds each worker's own index."""
    if framework == "torch":
        return {}
    env = E.FRAMEWORK.entry(framework)
    if framework == "tensorflow":
        workers = [f"{h}:{FRAMEWORK_BASE_PORT + r}" for h in hosts for r in range(procs_per_node)]
        env["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers}}, separators=(",", ":"))
    elif framework == "jax":
        env["JAX_COORDINATOR_ADDRESS"] = f"{hosts[0]}:{FRAMEWORK_BASE_PORT}"
        env["JAX_NUM_PROCESSES"] = str(len(hosts) * procs_per_node)
        # Kubeflow training-operator v1's JAXJob names (pkg/controller.v1/jax/envvar.go):
        # the coordinator's host and port apart, the process count; PROCESS_ID per worker.
        env["COORDINATOR_ADDRESS"] = hosts[0]
        env["COORDINATOR_PORT"] = str(FRAMEWORK_BASE_PORT)
        env["NUM_PROCESSES"] = env["JAX_NUM_PROCESSES"]
    return env
