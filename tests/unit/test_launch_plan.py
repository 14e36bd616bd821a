"""The launch plan: one neutral description of a run (roles, commands, env, ports, mounts,
secrets, sizes) that the Kubernetes and the local backends both materialise."""

from __future__ import annotations

from pathlib import Path

import pytest

from alchemist_jobs import environment as E
from alchemist_jobs import launch_plan as lp
from alchemist_jobs.contract import METRICS_BASE_PORT, metrics_port_name
from alchemist_jobs.kubernetes import manifests as mf
from alchemist_jobs.spec import load_spec
from tests.k8s_stacks import stack

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RUN = "digits-20260101-120000-ab12"
ASYNC = ["algorithm.name=async", "algorithm.servers=2", "nodes=2", "procs_per_node=2"]


def _target(**kw: object) -> lp.Target:
    base: dict = dict(stack="s", shared_root="/shared", run_dir="/shared/runs/r")
    return lp.Target(**{**base, **kw})


def test_workers_run_the_bootstrap_with_the_tasks_words_on_every_replica():
    spec = load_spec(EXAMPLES / "script.yaml", ["nodes=3", "procs_per_node=2", "max_restarts=5"])
    plan = lp.build(spec, RUN, _target())
    (w,) = plan.roles
    assert (w.name, w.replicas, w.procs_per_replica) == ("worker", 3, 2)
    assert (w.module, w.args) == (lp.WORKER_MODULE, tuple(spec.task.worker_args()))
    assert w.max_restarts == 5 and plan.servers is None and plan.run_id == plan.name == RUN
    assert [m.path for m in w.mounts] == ["/shared", "/dev/shm"]
    assert w.resources == lp.Resources(spec.resources.cpu, spec.resources.memory, spec.resources.gpu)
    assert [p.name for p in w.ports] == [metrics_port_name(0), metrics_port_name(1), "rdzv"]
    assert w.port(metrics_port_name(1)) == METRICS_BASE_PORT + 1


def test_the_jobs_env_wins_and_secrets_stay_references(tmp_path: Path):
    spec_path = tmp_path / "job.yaml"
    spec_path.write_text(
        (EXAMPLES / "digits.yaml").read_text()
        + "env: {OMP_NUM_THREADS: '7', MINE: x}\n"
        + "secret_env: {TOKEN: {secret: s, key: k}}\n"
    )
    spec = load_spec(spec_path)
    w = lp.build(spec, RUN, _target(extra_env={"FROM_STACK": "1"})).workers
    assert w.env["OMP_NUM_THREADS"] == "7" and w.env["MINE"] == "x" and w.env["FROM_STACK"] == "1"
    assert list(w.env)[-1] == "MINE"  # the job's own come last: set after, they win
    assert "TOKEN" not in w.env
    assert (w.secrets["TOKEN"].secret, w.secrets["TOKEN"].key) == ("s", "k")
    assert w.env[E.RUN_DIR.name] == "/shared/runs/r" and w.env[E.STACK.name] == "s"


def test_the_server_role_has_one_replica_per_shard_where_the_stack_placed_it():
    spec = load_spec(EXAMPLES / "digits.yaml", ASYNC)
    servers = (("h0", 4000), ("h1", 4001))
    plan = lp.build(spec, RUN, _target(servers=servers, server_bind="127.0.0.1"))
    ps = plan.servers
    assert ps is not None and ps.replicas == 2 and ps.module == "alchemist_jobs.runtime.parameter_server"
    assert plan.workers.env[E.PS_ADDRS.name] == "h0:4000,h1:4001"
    assert [dict(e) for e in ps.replica_env] == [
        {E.RUN_DIR.name: "/shared/runs/r", E.PS_SHARD.name: str(k), E.PS_PORT.name: str(4000 + k),
         E.PS_BIND.name: "127.0.0.1"}
        for k in range(2)
    ]  # fmt: skip
    assert [p.port for p in ps.ports] == [4000, 4001, METRICS_BASE_PORT]
    assert ps.resources.gpus == 0 and ps.resources == lp.server_resources(spec)
    with pytest.raises(ValueError, match=r"target.servers: 1 addresses for 2 server shards"):
        lp.build(spec, RUN, _target(servers=servers[:1]))


def test_a_servers_size_is_a_shard_not_a_worker_process():
    spec = load_spec(EXAMPLES / "digits.yaml", [*ASYNC, "resources.cpu=40", "resources.memory=160Gi"])
    assert lp.server_resources(spec) == lp.Resources(cpu=lp.SERVER_CPU, memory="4096Mi")
    small = load_spec(EXAMPLES / "digits.yaml", [*ASYNC, "resources.cpu=1", "resources.memory=1Gi"])
    assert lp.server_resources(small) == lp.Resources(cpu=0.5, memory="512Mi")


def test_where_the_stack_names_the_hosts_the_framework_gets_its_cluster():
    spec = load_spec(EXAMPLES / "tf_digits.yaml", ["nodes=2"])
    named = lp.build(spec, RUN, _target(worker_hosts=("a", "b"))).workers
    assert "TF_CONFIG" in named.env and named.env[E.FRAMEWORK.name] == "tensorflow"
    swapped = lp.build(spec, RUN, _target()).workers  # local: the workers swap addresses
    assert "TF_CONFIG" not in swapped.env and swapped.env[E.FRAMEWORK.name] == "tensorflow"
    assert {p.name for p in named.ports} > {"rdzv"}


def test_the_kubernetes_manifests_are_the_plans_roles():
    """Every replicatedJob is a role of the plan: its pods, command words, env and ports."""
    spec = load_spec(EXAMPLES / "script.yaml", ASYNC)
    s = stack("dev").output
    plan = mf.plan(spec, s, RUN)
    jobset = mf.build(spec, s, RUN)[-1]
    for role, rjob in zip(plan.roles, jobset["spec"]["replicatedJobs"], strict=True):
        job = rjob["template"]["spec"]
        (c,) = job["template"]["spec"]["containers"]
        assert (rjob["name"], job["completions"]) == (role.name, role.replicas)
        values = {e["name"]: e["value"] for e in c["env"] if "value" in e}
        assert {k: values[k] for k in role.env} == dict(role.env)
        assert [(p["name"], p["containerPort"]) for p in c["ports"]] == [(p.name, p.port) for p in role.ports]
        assert f"-m {role.module}" in c["command"][2]
    assert jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "command"
    ][4:] == list(plan.workers.args)


@pytest.mark.parametrize("example", ["script.yaml", "tf_digits.yaml"])
def test_the_local_and_kubernetes_backends_launch_the_same_roles_from_one_plan(example, tmp_path):
    """The same spec on the local stack and on a cluster: the same roles, command words and
    job variables, each backend's processes carrying its plan's env exactly; only the stack's
    own variables (paths, addresses, stores) differ."""
    from alchemist_jobs.local_backend import LocalScheduler

    overrides = ASYNC if example == "script.yaml" else ["nodes=2"]
    spec_path = tmp_path / example
    spec_path.write_text((EXAMPLES / example).read_text() + "env: {MINE: x}\n")
    for py in EXAMPLES.glob("*.py"):
        (tmp_path / py.name).write_text(py.read_text())
    spec = load_spec(spec_path, overrides)
    local = LocalScheduler(tmp_path / "home").dryrun(spec, tmp_path, run_id=RUN)
    cluster = mf.plan(spec, stack("dev").output, RUN)
    assert local.plan is not None
    shape = [(r.name, r.replicas, r.procs_per_replica, r.module, r.args, r.max_restarts, r.resources)
             for r in cluster.roles]  # fmt: skip
    assert [(r.name, r.replicas, r.procs_per_replica, r.module, r.args, r.max_restarts, r.resources)
            for r in local.plan.roles] == shape  # fmt: skip
    stack_vars = {E.RUN_DIR.name, E.SHARED_ROOT.name, E.STACK.name, E.PS_ADDRS.name, E.METRICS_PORT.name,
                  E.LOG_TO_CONSOLE.name, E.STORE_DIR.name, "GLOO_SOCKET_IFNAME", "PYTHONPATH",
                  "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", E.CONFIG_ERROR_FILE.name, E.METRICS_ADDR.name,
                  "TF_CONFIG", E.FRAMEWORK.name}  # fmt: skip
    for mine, theirs in zip(local.plan.roles, cluster.roles, strict=True):
        job = {k: v for k, v in mine.env.items() if k not in stack_vars}
        assert job == {k: v for k, v in theirs.env.items() if k not in stack_vars}
        assert job["MINE"] == "x" and "OMP_NUM_THREADS" in job
        assert mine.env.get(E.FRAMEWORK.name) == theirs.env.get(E.FRAMEWORK.name)
    # Each backend materialises its plan: the agents' argv and env, the pods' command and env.
    workers = local.plan.workers
    for proc in local.processes:
        assert proc.argv[-len(workers.args) - 2 :] == ["-m", workers.module, *workers.args]
        assert f"--nnodes={workers.replicas}" in proc.argv
        assert {k: proc.env[k] for k in workers.env} == dict(workers.env)
    for k, server in enumerate(local.servers):
        ps = local.plan.servers
        assert ps is not None and server.env == {**ps.env, **ps.replica_env[k]}
    (pod,) = mf.build(spec, stack("dev").output, RUN)[-1]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["spec"]["containers"]
    assert pod["command"][4:] == list(cluster.workers.args) == list(workers.args)
