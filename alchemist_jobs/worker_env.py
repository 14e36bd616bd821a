"""The environment every worker starts with, on every stack: the variables of
environment.py (and the torch and thread settings beside them) that the local and the
Kubernetes backends both render. Workers read these; nothing else tells a worker about
its run. `spec.env` is applied on top (the user's word wins)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from alchemist_jobs import environment as E


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
    config_error_file: str | None = None  # ALCHEMIST_CONFIG_ERROR_FILE (runtime/config_error.py)
    job_site: str | None = None  # ALCHEMIST_JOB_SITE: the job's own packages (job_env.py)

    def as_dict(self) -> dict[str, str]:
        env = {
            E.RUN_DIR.name: self.run_dir,
            E.SHARED_ROOT.name: self.shared_root,
            E.STACK.name: self.stack,
            "PYTHONUNBUFFERED": "1",
            # Workers get their own store per attempt: with the agent's shared TCPStore, a
            # restarted group reads the last attempt's keys and hangs in init_process_group
            # (pytorch/pytorch#135712; reproduced with torch 2.13 and gloo).
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
            "OMP_NUM_THREADS": str(self.threads),
        }
        optional = {
            E.PS_ADDRS.name: self.ps_addrs,
            E.METRICS_PORT.name: None if self.metrics_port is None else str(self.metrics_port),
            E.LOG_TO_CONSOLE.name: "1" if self.log_to_console else None,
            E.STORE_ADDR.name: self.store_addr,
            E.STORE_DIR.name: self.store_dir,
            "GLOO_SOCKET_IFNAME": self.gloo_ifname,
            "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": self.log_prefix_template,
            "PYTHONPATH": self.pythonpath,
            E.FRAMEWORK.name: None if self.framework == "torch" else self.framework,
            E.CONFIG_ERROR_FILE.name: self.config_error_file,
            E.JOB_SITE.name: self.job_site,
        }
        env.update({k: v for k, v in optional.items() if v is not None})
        return env


def restarts(environ: Mapping[str, str] | None = None) -> int:
    """How often this worker's group has restarted: torchrun's own count (local runs, where
    the agent restarts its workers) plus the cluster's group restarts (JobSet recreates every
    pod and torchrun runs with --max-restarts=0, so its own count stays 0 there)."""
    env = os.environ if environ is None else environ

    def _int(name: str) -> int:
        try:
            return max(0, int(env.get(name) or 0))
        except ValueError:
            return 0

    return _int("TORCHELASTIC_RESTART_COUNT") + _int(E.RESTART_ATTEMPT.name)
