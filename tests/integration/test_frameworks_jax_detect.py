"""jax's own initialize() resolving a JAX worker's variables with the pinned jax
(importing jax takes over a second)."""

from __future__ import annotations

import pytest

from alchemist_jobs.runtime import framework_env


def test_jax_initialize_resolves_the_variables_with_the_pinned_jax(monkeypatch):
    """jax's own auto-detection (jax/_src/clusters/cluster.py at the pinned version) finds
    the process count and id, ahead of its Kubernetes detection on a pod."""
    from jax._src import clusters

    monkeypatch.setattr(clusters.ClusterEnv, "_cluster_types", list(clusters.ClusterEnv._cluster_types))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for k, v in {
        "JAX_COORDINATOR_ADDRESS": "job-worker-0-0.job:29700",
        "JAX_NUM_PROCESSES": "4",
        "JAX_PROCESS_ID": "3",
        "LOCAL_RANK": "1",
    }.items():
        monkeypatch.setenv(k, v)
    before = clusters.ClusterEnv.auto_detect_unset_distributed_params(None, None, None, None, None, 10)
    assert before[1:3] == (None, None)  # jax alone reads only the coordinator address
    # Every pod has this variable; jax's Kubernetes detection then asks the API server
    # (here, with the `kubernetes` package installed and no in-cluster config, it raises).
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    with pytest.raises(Exception, match="Service host/port is not set"):
        clusters.ClusterEnv.auto_detect_unset_distributed_params(None, None, None, None, None, 10)
    framework_env.register_jax_cluster(gpus=0)
    framework_env.register_jax_cluster(gpus=0)  # idempotent: one entry
    assert [t.name for t in clusters.ClusterEnv._cluster_types].count("alchemist") == 1
    got = clusters.ClusterEnv.auto_detect_unset_distributed_params(None, None, None, None, None, 10)
    assert got == ("job-worker-0-0.job:29700", 4, 3, None)
    framework_env.register_jax_cluster(gpus=2)  # with GPUs: the local rank's device
    assert clusters.ClusterEnv.auto_detect_unset_distributed_params(None, None, None, None, None, 10)[3] == [
        1
    ]
