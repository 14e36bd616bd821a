"""task.framework (issue 28): the spec field; what a TensorFlow or JAX worker is told, locally
and from the real manifests of a cluster stack; the cluster ports it listens on; `--dry-run`
showing the variables; and a worker without its framework stopping with one line. (Its
one-line errors through `alchemist run` and jax's own `initialize()` are integration tests.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from alchemist_jobs import cli
from alchemist_jobs.errors import UserError
from alchemist_jobs.frameworks import FRAMEWORK_BASE_PORT
from alchemist_jobs.kubernetes import manifests as mf
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
from alchemist_jobs.runtime import framework_env
from alchemist_jobs.spec import load_spec
from tests.conftest import EXAMPLES
from tests.k8s_stacks import stack

RUN = "fw-20260101-120000-ab12"


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    p = tmp_path / "job.yaml"
    p.write_text(text)
    return p


def test_framework_defaults_to_torch_and_torch_adds_nothing(tmp_path):
    spec = load_spec(_write(tmp_path, "name: t\ntask: {script: train.py}\n"))
    assert spec.task.framework == "torch"
    objs = KubernetesScheduler(stack("dev").output).dryrun(spec, tmp_path, run_id=RUN).manifests
    env = {e["name"] for e in _worker(objs)["env"]}
    assert not env & {"ALCHEMIST_FRAMEWORK", "TF_CONFIG", "JAX_COORDINATOR_ADDRESS"}


def _worker(objs: list[dict]) -> dict:
    js = next(o for o in objs if o["kind"] == "JobSet")
    rj = next(r for r in js["spec"]["replicatedJobs"] if r["name"] == mf.WORKER_RJOB)
    (train,) = rj["template"]["spec"]["template"]["spec"]["containers"]
    return train


def _cluster(example: str, *sets: str) -> tuple[dict[str, str], dict[str, int], str]:
    """(worker env, declared ports by name, JobSet name) of an example on the dev stack."""
    spec = load_spec(EXAMPLES / example, list(sets))
    objs = KubernetesScheduler(stack("dev").output).dryrun(spec, EXAMPLES, run_id=RUN).manifests
    train = _worker(objs)
    env = {e["name"]: e["value"] for e in train["env"] if "value" in e}
    ports = {p["name"]: p["containerPort"] for p in train["ports"]}
    return env, ports, mf.object_name(RUN)


def _pod_env(env: dict[str, str], pod: int, local_rank: int, ppn: int) -> dict[str, str]:
    """What the kubelet and torchrun add in pod `pod` for local rank `local_rank`: the Job's
    completion index (Indexed Job) and torchrun's local variables. The global RANK is the
    rendezvous's choice, not the pod's index: deliberately another value here."""
    return dict(
        env,
        JOB_COMPLETION_INDEX=str(pod),
        LOCAL_RANK=str(local_rank),
        LOCAL_WORLD_SIZE=str(ppn),
        RANK=str(99),
    )


def test_a_cluster_tensorflow_worker_is_its_own_pods_host_and_a_declared_port():
    env, ports, name = _cluster("tf_digits.yaml", "nodes=3")  # 3 pods x 2 workers
    assert env["ALCHEMIST_FRAMEWORK"] == "tensorflow"
    workers = json.loads(env["TF_CONFIG"])["cluster"]["worker"]
    assert len(workers) == 6 and "task" not in json.loads(env["TF_CONFIG"])
    seen = set()
    for pod in range(3):
        for local in range(2):
            got = framework_env.framework_vars("tensorflow", _pod_env(env, pod, local, 2))
            config = json.loads(got["TF_CONFIG"])
            index = config["task"]["index"]
            assert config["task"]["type"] == "worker" and config["cluster"]["worker"] == workers
            host, port = workers[index].rsplit(":", 1)
            assert host == mf.pod_host(name, mf.WORKER_RJOB, pod)  # JobSet's stable name
            assert int(port) in ports.values() and int(port) == FRAMEWORK_BASE_PORT + local
            seen.add(index)
    assert seen == set(range(6))  # every worker a distinct place


def test_a_cluster_jax_job_has_its_coordinator_on_pod_zero_at_a_declared_port():
    env, ports, name = _cluster("jax_digits.yaml", "nodes=2")
    host, port = env["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)
    assert host == mf.pod_host(name, mf.WORKER_RJOB, 0) and ports["jax-coordinator"] == int(port)
    assert env["JAX_NUM_PROCESSES"] == "4"
    ids = {
        (pod, local): framework_env.framework_vars("jax", _pod_env(env, pod, local, 2))
        for pod in range(2)
        for local in range(2)
    }
    assert ids[(0, 0)]["JAX_PROCESS_ID"] == "0"  # the process that starts the coordinator
    assert sorted(int(v["JAX_PROCESS_ID"]) for v in ids.values()) == [0, 1, 2, 3]
    assert all(v["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] == "gloo" for v in ids.values())
    assert all("JAX_COORDINATOR_BIND_ADDRESS" not in v for v in ids.values())  # pod: [::]


def test_local_workers_take_the_swapped_addresses_in_rank_order():
    addresses = ["127.0.0.1:41000", "127.0.0.1:41001"]
    env = {"RANK": "1", "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"}
    tf = framework_env.framework_vars("tensorflow", env, addresses)
    assert json.loads(tf["TF_CONFIG"]) == {
        "cluster": {"worker": addresses},
        "task": {"type": "worker", "index": 1},
    }
    assert tf["TF_NUM_INTRAOP_THREADS"] == "1"
    jax = framework_env.framework_vars("jax", env, addresses)
    assert jax["JAX_COORDINATOR_ADDRESS"] == jax["JAX_COORDINATOR_BIND_ADDRESS"] == addresses[0]
    assert (jax["JAX_NUM_PROCESSES"], jax["JAX_PROCESS_ID"]) == ("2", "1")
    # The user's own TF_CONFIG (spec.env) with a task is left as it is.
    mine = json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})
    assert "TF_CONFIG" not in framework_env.framework_vars("tensorflow", dict(env, TF_CONFIG=mine))


@pytest.mark.parametrize(
    "example,wanted",
    [
        ("tf_digits.yaml", ["ALCHEMIST_FRAMEWORK", "TF_CONFIG"]),
        ("jax_digits.yaml", ["ALCHEMIST_FRAMEWORK", "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES"]),
    ],
)
def test_dry_run_on_a_cluster_stack_shows_the_frameworks_variables(example, wanted, run_cli):
    import yaml

    from tests.unit.k8s.conftest import outputs

    code, out, err = run_cli(
        "run", f"examples/{example}", "--dry-run", "--stack", "dev", "--outputs", outputs("dev")
    )
    assert code == 0, err
    js = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "JobSet")
    (train,) = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in train["env"]}
    for k in wanted:
        assert env.get(k), (k, env)
    host = mf.pod_host(js["metadata"]["name"], mf.WORKER_RJOB, 0)
    assert host in out and str(FRAMEWORK_BASE_PORT) in out


@pytest.fixture
def run_cli(capsys, monkeypatch):
    from tests.unit.k8s.conftest import REPO

    monkeypatch.chdir(REPO)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = cli.main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
def test_a_missing_framework_is_one_line_naming_the_extra(framework, monkeypatch, tmp_path):
    # Python's own way to make an import fail: None in sys.modules.
    monkeypatch.setitem(sys.modules, framework, None)
    with pytest.raises(framework_env.FrameworkMissing) as e:
        framework_env.require(framework)
    line = str(e.value)
    assert "\n" not in line and f"alchemist[{framework}]" in line
    assert f"--frameworks {framework}" in line
    # The local launcher, which starts workers with this very Python, refuses first.
    from alchemist_jobs.local_backend import LocalScheduler

    spec = load_spec(EXAMPLES / f"{'tf' if framework == 'tensorflow' else 'jax'}_digits.yaml")
    with pytest.raises(UserError) as e:
        LocalScheduler(tmp_path).dryrun(spec, EXAMPLES)
    assert str(e.value).startswith("task.framework: ") and f"alchemist[{framework}]" in str(e.value)
    assert not any(tmp_path.iterdir())
