"""A job's own packages on cluster stacks (issue 38): the resolved lock travels in the
ConfigMap, a `deps` init container of each worker pod installs it once per lock on the shared
file system (`python -m alchemist_jobs.job_env install`), and the workers find it through
ALCHEMIST_JOB_SITE; the manifests stay valid for the real Kubernetes and JobSet schemas on
every stack. The lock is a real JobLock (the resolver is the integration tier's)."""

from __future__ import annotations

import pytest

from alchemist_jobs import environment as E
from alchemist_jobs.job_env import JobLock
from alchemist_jobs.kubernetes import manifests as mf
from alchemist_jobs.kubernetes.job_state import run_status
from alchemist_jobs.spec import load_spec
from tests.k8s_stacks import stack_outputs
from tests.unit.k8s.conftest import EXAMPLES
from tests.unit.k8s.test_k8s_manifests import RUN, _job, _jobset, validate

LOCK = JobLock("# resolved\ntomli-w==1.2.0 \\\n    --hash=sha256:" + "ab" * 32 + "\n")


@pytest.mark.parametrize("case", stack_outputs(), ids=lambda c: c.name)
def test_the_lock_reaches_every_worker_pod_through_the_shared_file_system(case):
    spec = load_spec(EXAMPLES / "script.yaml", ["algorithm.name=async", "algorithm.servers=1",
                                                "env.PIP_INDEX_URL=https://mirror.example/simple"])
    objs = mf.build(spec, case.output, RUN, deps=LOCK)
    for obj in objs:
        validate(obj, case.kubernetes)
    config_map = next(o for o in objs if o["kind"] == "ConfigMap")
    assert config_map["data"][mf.REQUIREMENTS_KEY] == LOCK.text
    assert _jobset(objs)["metadata"]["annotations"][mf.REQUIREMENTS_ANNOTATION] == LOCK.sha256
    root = case.output.shared_fs.mount_path.rstrip("/")
    pod = _job(objs)["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == [mf.SETUP_CONTAINER, mf.DEPS_CONTAINER]
    deps = pod["initContainers"][1]
    assert deps["command"] == ["python", "-m", "alchemist_jobs.job_env", "install", "--lock",
                               f"{mf.CONFIG_MOUNT}/{mf.REQUIREMENTS_KEY}", "--root", root or "/"]
    assert {"name": "PIP_INDEX_URL", "value": "https://mirror.example/simple"} in deps["env"]
    assert {m["mountPath"] for m in deps["volumeMounts"]} == {root or "/", mf.CONFIG_MOUNT}
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env[E.JOB_SITE.name] == f"{root}/deps/envs/{LOCK.short}/site"
    # Parameter servers run no job code: no install, no site.
    ps = _job(objs, "ps")["spec"]["template"]["spec"]
    assert [c["name"] for c in ps["initContainers"]] == [mf.SETUP_CONTAINER]
    assert E.JOB_SITE.name not in {e["name"] for e in ps["containers"][0]["env"]}


def test_without_requirements_nothing_changes():
    case = stack_outputs()[0]
    spec = load_spec(EXAMPLES / "digits.yaml")
    assert mf.build(spec, case.output, RUN) == mf.build(spec, case.output, RUN, deps=None)
    objs = mf.build(spec, case.output, RUN)
    assert mf.REQUIREMENTS_KEY not in next(o for o in objs if o["kind"] == "ConfigMap")["data"]


def test_a_cluster_runs_status_names_its_locks_hash():
    """`status --json` on a cluster stack: the hash the JobSet carries (the lock is in the
    run's ConfigMap and its run directory's spec)."""
    case = stack_outputs()[0]
    spec = load_spec(EXAMPLES / "script.yaml")
    with_lock, without = (_jobset(mf.build(spec, case.output, RUN, deps=d)) for d in (LOCK, None))
    assert run_status(with_lock, [], case.name).as_json()["requirements"] == {"sha256": LOCK.sha256}
    assert run_status(without, [], case.name).as_json()["requirements"] is None
