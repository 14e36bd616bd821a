"""Issue 41, item 2: a TensorFlow or JAX job with one process per node uses every GPU of the
node (the frameworks' usual layout); several processes per node split the node's GPUs; torch
keeps one process per GPU. Checked on the real manifests of a GPU stack (onprem-lab, 8 GPUs a
node), what the bootstrap adds in each pod, and jax's own detection at the pinned version."""

from __future__ import annotations

import pytest

from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.runtime import framework_env
from alchemist_jobs.runtime.devices import plan_local_devices
from alchemist_jobs.spec import load_spec
from tests.conftest import EXAMPLES
from tests.k8s_stacks import stack
from tests.unit.test_frameworks import RUN, _pod_env, _worker

EXAMPLE = {"tensorflow": "tf_digits.yaml", "jax": "jax_digits.yaml"}


def _gpu_pod(framework: str, ppn: int, gpus: int = 8) -> tuple[dict, dict[str, str]]:
    spec = load_spec(
        EXAMPLES / EXAMPLE[framework], [f"procs_per_node={ppn}", f"resources.gpu={gpus}", "nodes=2"]
    )
    objs = KubernetesScheduler(stack("onprem-lab").output).dryrun(spec, EXAMPLES, run_id=RUN).manifests
    train = _worker(objs)
    return train, {e["name"]: e["value"] for e in train["env"] if "value" in e}


def _jax_local_devices(env: dict[str, str], gpus: int, monkeypatch) -> list[int] | None:
    """local_device_ids as jax.distributed.initialize() resolves them (jax/_src/distributed.py
    reads JAX_LOCAL_DEVICE_IDS, then the cluster detection's local process id)."""
    from jax._src import clusters

    monkeypatch.setattr(clusters.ClusterEnv, "_cluster_types", list(clusters.ClusterEnv._cluster_types))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("JAX_LOCAL_DEVICE_IDS", raising=False)
    env = {**env, **framework_env.framework_vars("jax", env)}  # + this worker's JAX_PROCESS_ID
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    framework_env.register_jax_cluster(gpus)
    if "JAX_LOCAL_DEVICE_IDS" in env:
        return [int(i) for i in env["JAX_LOCAL_DEVICE_IDS"].split(",")]
    return clusters.ClusterEnv.auto_detect_unset_distributed_params(None, None, None, None, None, 10)[3]


@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
def test_one_process_per_node_sees_every_gpu_of_the_node(framework, monkeypatch):
    train, env = _gpu_pod(framework, ppn=1)
    assert train["resources"]["limits"]["nvidia.com/gpu"] in (8, "8")
    assert "CUDA_VISIBLE_DEVICES" not in env  # the pod sees its 8 GPUs
    pod = _pod_env(env, pod=1, local_rank=0, ppn=1)
    added = framework_env.gpu_vars(framework, pod, 8)
    assert "CUDA_VISIBLE_DEVICES" not in added and "JAX_LOCAL_DEVICE_IDS" not in added, added
    if framework == "jax":
        assert _jax_local_devices({**pod, **added}, 8, monkeypatch) is None  # all of them


@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
def test_two_processes_per_node_split_the_node_s_gpus(framework, monkeypatch):
    _, env = _gpu_pod(framework, ppn=2)
    pod = _pod_env(env, pod=0, local_rank=1, ppn=2)
    added = framework_env.gpu_vars(framework, pod, 8)
    if framework == "tensorflow":
        assert added == {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    else:
        assert _jax_local_devices({**pod, **added}, 8, monkeypatch) == [4, 5, 6, 7]


@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
def test_one_process_per_gpu_keeps_its_own(framework, monkeypatch):
    _, env = _gpu_pod(framework, ppn=8)
    pod = _pod_env(env, pod=0, local_rank=3, ppn=8)
    added = framework_env.gpu_vars(framework, pod, 8)
    if framework == "tensorflow":
        assert added == {"CUDA_VISIBLE_DEVICES": "3"}
    else:
        assert _jax_local_devices({**pod, **added}, 8, monkeypatch) == [3]


def test_locally_a_one_process_node_gets_its_node_s_slice_and_keeps_it():
    """The local plan gives each simulated node its slice; its one worker keeps all of it."""
    plan = plan_local_devices(4, 2, 1, [str(i) for i in range(8)])
    assert plan == ["0,1,2,3", "4,5,6,7"]
    env = {"CUDA_VISIBLE_DEVICES": plan[1], "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    assert framework_env.gpu_vars("tensorflow", env, 4) == {}
    two = dict(env, LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    assert framework_env.gpu_vars("tensorflow", two, 4) == {"CUDA_VISIBLE_DEVICES": "6,7"}
