"""The environment every worker starts with, on every stack: one typed definition of the
ALCHEMIST_* variables (and the torch and thread settings beside them) that the local and
the Kubernetes backends both render. Workers read these; nothing else tells a worker about
its run. `spec.env` is applied on top (the user's word wins)."""

from __future__ import annotations

import os
from dataclasses import dataclass


def threads_per_worker(cpu: float, procs_per_node: int) -> int:
    """`resources` is per node (a pod, or a local simulated node): its workers share it."""
    return max(1, int(cpu // procs_per_node))


@dataclass(frozen=True)
class WorkerEnv:
    run_dir: str  # ALCHEMIST_RUN_DIR: the run's directory on the shared file system
    shared_root: str  # ALCHEMIST_SHARED_ROOT: the shared file system's root (data sets)
    stack: str  # ALCHEMIST_STACK: the stack's name (`local` binds metrics to loopback)
    threads: int  # OMP_NUM_THREADS: threads_per_worker(resources.cpu, procs_per_node)
    ps_addrs: str | None = None  # ALCHEMIST_PS_ADDRS: host:port of each server shard
    metrics_port: int | None = None  # ALCHEMIST_METRICS_PORT: base port (+ local rank)
    log_to_console: bool = False  # ALCHEMIST_LOG_TO_CONSOLE: pod logs instead of rank-N.log
    store_addr: str | None = None  # ALCHEMIST_STORE_ADDR: where c10d stores listen (store_bind)
    store_dir: str | None = None  # ALCHEMIST_STORE_DIR: c10d stores as files here (store_bind)
    gloo_ifname: str | None = None  # GLOO_SOCKET_IFNAME: the interface gloo's pairs use
    log_prefix_template: str | None = None  # TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE
    pythonpath: str | None = None  # PYTHONPATH: where the job package is (local stack)
    framework: str = "torch"  # ALCHEMIST_FRAMEWORK: task.framework (frameworks.py); torch: unset

    def as_dict(self) -> dict[str, str]:
        env = {
            "ALCHEMIST_RUN_DIR": self.run_dir,
            "ALCHEMIST_SHARED_ROOT": self.shared_root,
            "ALCHEMIST_STACK": self.stack,
            "PYTHONUNBUFFERED": "1",
            # Workers get their own store per attempt: with the agent's shared TCPStore, a
            # restarted group reads the last attempt's keys and hangs in init_process_group
            # (pytorch/pytorch#135712; reproduced with torch 2.13 and gloo).
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
            "OMP_NUM_THREADS": str(self.threads),
        }
        optional = {
            "ALCHEMIST_PS_ADDRS": self.ps_addrs,
            "ALCHEMIST_METRICS_PORT": None if self.metrics_port is None else str(self.metrics_port),
            "ALCHEMIST_LOG_TO_CONSOLE": "1" if self.log_to_console else None,
            "ALCHEMIST_STORE_ADDR": self.store_addr,
            "ALCHEMIST_STORE_DIR": self.store_dir,
            "GLOO_SOCKET_IFNAME": self.gloo_ifname,
            "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": self.log_prefix_template,
            "PYTHONPATH": self.pythonpath,
            "ALCHEMIST_FRAMEWORK": None if self.framework == "torch" else self.framework,
        }
        env.update({k: v for k, v in optional.items() if v is not None})
        return env


# A cluster pod's group restart: the JobSet restart attempt its pod carries (the
# `jobset.sigs.k8s.io/restart-attempt` annotation, passed in through the downward API).
RESTART_ATTEMPT_ENV = "ALCHEMIST_RESTART_ATTEMPT"


def restarts(environ: dict[str, str] | None = None) -> int:
    """How often this worker's group has restarted: torchrun's own count (local runs, where
    the agent restarts its workers) plus the cluster's group restarts (JobSet recreates every
    pod and torchrun runs with --max-restarts=0, so its own count stays 0 there)."""
    env = os.environ if environ is None else environ

    def _int(name: str) -> int:
        try:
            return max(0, int(env.get(name) or 0))
        except ValueError:
            return 0
    return _int("TORCHELASTIC_RESTART_COUNT") + _int(RESTART_ATTEMPT_ENV)
