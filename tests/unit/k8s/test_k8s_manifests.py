"""Manifests: valid against the real Kubernetes schema (kubernetes-validate, strict) and the
upstream JobSet v0.12.0 CRD schema (tests/fixtures/crds) for every stack and example spec;
the same between stacks but for the stack-specific fields; and the shapes the issue asks
for (JobSet with Indexed Jobs, its headless Service, Kueue, security, restarts, GPUs)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import kubernetes_validate
import pytest

from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes import manifests as mf
from alchemist_jobs.kubernetes.interactive import session_pod
from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler, rank_pod_index
from alchemist_jobs.spec import load_spec
from tests.k8s_stacks import stack, stack_outputs
from tests.unit.k8s.conftest import EXAMPLES
from tests.unit.k8s.jobset_schema import validate_jobset

RUN = "digits-20260101-120000-ab12"
EXAMPLE_SPECS = sorted(EXAMPLES.glob("*.yaml"))
# Variants that exercise the parameter-server role and GPUs on every stack that has them.
VARIANTS = {
    "as-is": [],
    "async-2x2-servers-2": ["algorithm.name=async", "algorithm.servers=2", "nodes=2", "procs_per_node=2"],
    "gpu-1": ["resources.gpu=1", "procs_per_node=1"],
}


def _kinds(objs: list[dict]) -> list[str]:
    return [o["kind"] for o in objs]


def _jobset(objs: list[dict]) -> dict:
    return next(o for o in objs if o["kind"] == "JobSet")


def _job(objs: list[dict], rjob: str = "worker") -> dict:
    """The Job JobSet makes for `rjob`: the JobSet's metadata, the replicatedJob's spec."""
    js = _jobset(objs)
    rj = next(r for r in js["spec"]["replicatedJobs"] if r["name"] == rjob)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": js["metadata"],
        "spec": rj["template"]["spec"],
    }


def validate(obj: dict, version: str) -> None:
    """Strict Kubernetes schema for built-in kinds; for a JobSet the upstream CRD schema, and
    each Job template as the batch/v1 Job the JobSet controller makes from it."""
    if obj["kind"] != "JobSet":
        kubernetes_validate.validate(obj, version, strict=True)
        return
    validate_jobset(obj)
    for rj in obj["spec"]["replicatedJobs"]:
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"{obj['metadata']['name']}-{rj['name']}-0"},
            **rj["template"],
        }
        kubernetes_validate.validate(job, version, strict=True)


def _render(s, spec_path: Path, overrides=(), run_id: str = RUN) -> list[dict]:
    spec = load_spec(spec_path, list(overrides))
    return KubernetesScheduler(s.output).dryrun(spec, spec_path.parent, run_id=run_id).manifests


def test_there_are_stacks_and_examples():
    assert {s.name for s in stack_outputs()} >= {"dev", "onprem-lab", "aws-us-west-2", "aws-eu-west-1"}
    assert {p.name for p in EXAMPLE_SPECS} >= {"digits.yaml", "script.yaml"}


def test_session_pods_are_valid_for_every_stack():
    for s in stack_outputs():
        pod = session_pod(s.output, "alchemist-session-alice", gpus=s.output.gpu.per_node)
        kubernetes_validate.validate(pod, s.schema_version, strict=True)


def test_strict_validation_would_catch_a_misspelled_field():
    """The check above can fail: the same manifests with one typo are rejected."""
    s = stack("dev")
    objs = _render(s, EXAMPLES / "digits.yaml")
    js = _jobset(objs)
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["workingdir"] = (
        "/tmp"
    )
    with pytest.raises((kubernetes_validate.ValidationError, ValueError), match="workingdir"):
        validate(js, s.schema_version)
    # And a misspelled JobSet field fails the upstream CRD schema.
    js = _jobset(_render(s, EXAMPLES / "digits.yaml"))
    js["spec"]["failurePolicy"]["maxRestart"] = 3
    with pytest.raises(ValueError, match="maxRestart"):
        validate(js, s.schema_version)


# --- same spec, different stacks -----------------------------------------------------------

# Paths (with list indices and map keys as * where they vary) that may differ between stacks.
STACK_FIELDS = (
    "*.metadata.namespace",
    "JobSet.metadata.labels.kueue.x-k8s.io/queue-name",
    "JobSet.spec.replicatedJobs.*.template.spec.template.spec.initContainers.*.image",
    "JobSet.spec.replicatedJobs.*.template.spec.template.spec.containers.*.image",
    "JobSet.spec.replicatedJobs.*.template.spec.template.spec.volumes.0.persistentVolumeClaim.claimName",
    "JobSet.spec.replicatedJobs.*.template.spec.template.spec.containers.*.env.*.value",
    "JobSet.spec.replicatedJobs.*.template.spec.template.metadata.labels.*",  # PodMonitor's
    "JobSet.spec.replicatedJobs.*.template.spec.template.spec.nodeSelector.*",
    "JobSet.spec.replicatedJobs.*.template.spec.template.spec.tolerations.*",
)


def _flatten(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _flatten(v, f"{prefix}.{i}")
    else:
        yield prefix, obj


def _allowed(path: str) -> bool:
    parts = path.split(".")
    for pattern in STACK_FIELDS:
        pp = pattern.split(".")
        # map keys with dots in them (label names) are matched by the trailing *
        if (
            len(parts) >= len(pp)
            and all(a == "*" or a == b for a, b in zip(pp, parts))
            and (len(parts) == len(pp) or pp[-1] == "*")
        ):
            return True
    return False


def _by_path(objs):
    return {f"{o['kind']}.{p}": v for o in objs for p, v in _flatten(o)}


@pytest.mark.parametrize(
    "spec_name,overrides",
    [("digits.yaml", []), ("script.yaml", []), ("digits.yaml", ["resources.gpu=1", "procs_per_node=1"])],
)
def test_one_spec_differs_between_stacks_only_in_stack_fields(spec_name, overrides):
    rendered = {
        s.name: _by_path(_render(s, EXAMPLES / spec_name, overrides))
        for s in stack_outputs()
        if (1 if overrides else 0) <= s.output.gpu.per_node
    }
    names = sorted(rendered)
    assert len(names) >= 3
    base = rendered[names[0]]
    for other in names[1:]:
        cur = rendered[other]
        differing = {p for p in base.keys() | cur.keys() if base.get(p) != cur.get(p)}
        assert differing, f"{names[0]} and {other} render identically: stack fields are lost"
        fabrics = [f for n in (names[0], other) if (f := stack(n).output.gpu.fabric) and overrides]
        devices = {f.resource for f in fabrics}
        stray = sorted(
            p for p in differing if not _allowed(p) and ".env." not in p and not any(d in p for d in devices)
        )
        assert not stray, f"{names[0]} vs {other}: non-stack fields differ: {stray}"
        # Environments, by name: ALCHEMIST_STACK is the one value that differs, plus what the
        # network fabric says NCCL needs where one of the stacks has one (a stack fact too).
        for prefix in {p.split(".env.")[0] for p in base.keys() | cur.keys() if ".env." in p}:
            env_a, env_b = _env_at(base, prefix), _env_at(cur, prefix)
            changed = {k for k in env_a.keys() | env_b.keys() if env_a.get(k) != env_b.get(k)}
            expected = {"ALCHEMIST_STACK"} | {k for f in fabrics for k in f.nccl_env}
            expected |= {"ALCHEMIST_NCCL_NET_PLUGIN"} if fabrics else set()
            assert changed <= expected and "ALCHEMIST_STACK" in changed, (prefix, changed)
        # Fabric devices exist only where the stack says the GPU nodes have them.
        if not fabrics:
            every = {f.resource for s in stack_outputs() if (f := s.output.gpu.fabric)}
            assert every and not any(d in p for d in every for p in differing)


def _env_at(flat: dict, prefix: str) -> dict:
    """The container env under `prefix` of a flattened manifest set, by variable name."""
    out, k = {}, 0
    while f"{prefix}.env.{k}.name" in flat:
        value = {p.rsplit(".", 1)[1]: v for p, v in flat.items() if p.startswith(f"{prefix}.env.{k}.")}
        out[flat[f"{prefix}.env.{k}.name"]] = value
        k += 1
    return out


# --- shapes ---------------------------------------------------------------------------------


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_jobset_with_its_headless_service_and_rendezvous_at_pod_0():
    s = stack("aws-us-west-2")
    objs = _render(s, EXAMPLES / "digits.yaml", ["nodes=3", "procs_per_node=2", "max_restarts=5"])
    cm, policy, js = objs
    job = _job(objs)
    name = js["metadata"]["name"]
    # JobSet v0.12.0: the whole group restarts on any Job failure, at most max_restarts
    # times; Kueue admits it (suspended, queue label); DNS hostnames by its network config.
    assert js["spec"]["suspend"] is True
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == s.output.queue
    assert js["spec"]["network"] == {
        "enableDNSHostnames": True,
        "subdomain": name,
        "publishNotReadyAddresses": True,
    }
    fp = js["spec"]["failurePolicy"]
    assert fp["maxRestarts"] == 5
    # A configuration error fails the run; a pod stopped from outside restarts it uncounted;
    # anything else restarts it, counted (JobSet's default action).
    assert [(r["name"], r["action"]) for r in fp["rules"]] == [
        ("ConfigurationError", "FailJobSet"),
        ("StoppedFromOutside", "RestartJobSetAndIgnoreMaxRestarts"),
    ]
    assert all(r["onJobFailureReasons"] == ["PodFailurePolicy"] for r in fp["rules"])
    assert js["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["worker"]}
    assert js["spec"]["ttlSecondsAfterFinished"] > 0
    from alchemist_jobs.runtime.config_error import CONFIG_ERROR_EXIT_CODE

    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 3
    assert spec["backoffLimit"] == 0  # any lost pod fails the Job: JobSet restarts the group
    assert spec["podFailurePolicy"]["rules"] == [
        {"action": "FailJob", "onExitCodes": {"containerName": "train", "operator": "In", "values": [code]}}
        for code in (mf.PREEMPTED_EXIT_CODE, CONFIG_ERROR_EXIT_CODE)
    ]
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["priorityClassName"] == "alchemist-batch"
    labels = spec["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "alchemist"
    assert labels["alchemist.io/run"] == RUN
    for k, v in s.output.monitoring.pod_monitor_labels.items():
        assert labels[k] == v
    script = pod["containers"][0]["command"][2]
    torchrun = shlex.split(next(line for line in script.splitlines() if "torchrun" in line))
    assert torchrun[0] == "torchrun" and torchrun[-1] == "&"
    for flag in (
        "--nnodes=3",
        "--nproc-per-node=2",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={name}-worker-0-0.{name}:29500",
        f"--rdzv-id={RUN}",
        "--max-restarts=0",
    ):
        assert flag in torchrun
    assert torchrun[-4:-1] == ["-m", "alchemist_jobs.runtime.bootstrap", "$@"]
    assert "--rdzv-conf=is_host=$host,join_timeout=900,read_timeout=900" in torchrun
    assert pod["containers"][0]["command"][3:] == ["alchemist", "trainer"]
    env = _env(pod["containers"][0])
    assert env["ALCHEMIST_RUN_DIR"] == f"/shared/runs/{RUN}"
    assert env["ALCHEMIST_SHARED_ROOT"] == "/shared"
    assert env["ALCHEMIST_STACK"] == "aws-us-west-2"
    assert env["ALCHEMIST_NODE"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["ALCHEMIST_METRICS_PORT"] == "9400"
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
    ports = {p["name"]: p["containerPort"] for p in pod["containers"][0]["ports"]}
    assert ports["metrics"] == 9400 and ports["metrics-1"] == 9401 and "metrics-2" not in ports
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["shared"] == s.output.shared_fs.mount_path
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == s.output.shared_fs.pvc
    # The run directory is made (spec.yaml from the ConfigMap) by every pod's init container.
    setup = pod["initContainers"][0]
    assert setup["command"][:3] == ["python", "-m", "alchemist_jobs.kubernetes.pod_setup"]
    assert f"/shared/runs/{RUN}" in setup["command"]
    assert "name: digits" in cm["data"]["spec.yaml"]


def test_the_rendezvous_waits_for_a_late_pod_0_as_long_as_the_spec_says():
    """torch 2.13's c10d backend connects to pod 0's store with `read_timeout` (default 60 s)
    and not `join_timeout`: both must carry the spec's rendezvous_timeout_s."""
    job = _job(_render(stack("dev"), EXAMPLES / "digits.yaml", ["rendezvous_timeout_s=1800"]))
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert '"--rdzv-conf=is_host=$host,join_timeout=1800,read_timeout=1800"' in script
    with pytest.raises(UserError, match="rendezvous_timeout_s"):
        load_spec(EXAMPLES / "digits.yaml", ["rendezvous_timeout_s=10"])


def test_interactive_priority_and_per_run_network_policy():
    objs = _render(stack("dev"), EXAMPLES / "digits.yaml", ["priority=interactive"])
    assert _job(objs)["spec"]["template"]["spec"]["priorityClassName"] == "alchemist-interactive"
    policy = objs[1]
    run = {"alchemist.io/run": RUN}
    assert policy["spec"]["podSelector"] == {"matchLabels": run}
    # Both directions: the team namespace's default-deny isolates egress too, so a policy
    # that opens only ingress drops the rendezvous, NCCL/gloo and PS traffic at the sender.
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    # Only pods of the same run, on every port (NCCL and gloo connect to ephemeral ports);
    # the platform's own policies add Prometheus, DNS and the object store, and its
    # admission policy refuses a per-run policy with any other peer (test_infra_admits_jobs).
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": run}}]}]
    assert policy["spec"]["egress"] == [{"to": [{"podSelector": {"matchLabels": run}}]}]


def test_secret_env_is_a_secret_key_reference_never_a_value(tmp_path):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(
        (EXAMPLES / "digits.yaml").read_text()
        + "secret_env:\n  WANDB_API_KEY: {secret: wandb, key: api-key}\n"
    )
    objs = _render(stack("dev"), spec_path)
    env = _job(objs)["spec"]["template"]["spec"]["containers"][0]["env"]
    (entry,) = [e for e in env if e["name"] == "WANDB_API_KEY"]
    assert entry == {
        "name": "WANDB_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}},
    }
    spec_path.write_text((EXAMPLES / "digits.yaml").read_text() + "secret_env:\n  TOKEN: {from_env: TOKEN}\n")
    with pytest.raises(UserError, match=r"^secret_env\.TOKEN: no `secret` and `key`"):
        _render(stack("dev"), spec_path)


def _gpu_worker(data: dict) -> dict:
    from alchemist_jobs.contract import StackOutput

    class _S:
        output = StackOutput.parse(data, "test")

    job = _job(_render(_S, EXAMPLES / "digits.yaml", ["resources.gpu=1", "procs_per_node=1"]))
    return job["spec"]["template"]["spec"]["containers"][0]


def test_the_fabric_the_aws_provider_describes_gives_efa_devices_and_nccl_settings():
    """The AWS provider's EFA, as its package writes it into the contract: the pod asks for
    every device and sets what NCCL over aws-ofi-nccl needs (the AWS EFA user guide)."""
    from infra.providers.aws.fabric import network_fabric

    data = stack("aws-us-west-2").output.model_dump(mode="json")
    data["gpu"]["fabric"] = network_fabric(per_node=4, rdma_read=False)
    train = _gpu_worker(data)
    assert train["resources"]["requests"]["vpc.amazonaws.com/efa"] == 4
    assert train["resources"]["limits"]["vpc.amazonaws.com/efa"] == 4
    env = _env(train)
    # The stack says whether the devices do RDMA read; without it (g5/g6) libfabric aborts
    # a process told to use device RDMA (issue 23.6).
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "0"
    data["gpu"]["fabric"] = network_fabric(per_node=4, rdma_read=True)
    assert _env(_gpu_worker(data))["FI_EFA_USE_DEVICE_RDMA"] == "1"
    # The plugin by the library name every aws-ofi-nccl build installs (its src/Makefile.am),
    # checked by the worker (tests/unit/test_nccl_net.py). No NCCL_NET: a name the plugin
    # does not have ("AWS Libfabric" against v1.16.0 and later, whose NVIDIA net is
    # "Libfabric") makes NCCL fail every communicator (nccl v2.29.7 src/plugin/net.cc).
    assert env["NCCL_NET_PLUGIN"] == "ofi" and env["ALCHEMIST_NCCL_NET_PLUGIN"] == "required"
    assert "NCCL_NET" not in env
    from alchemist_jobs.contract import StackOutput

    class _S:
        output = StackOutput.parse(data, "test")

    cpu = _job(_render(_S, EXAMPLES / "digits.yaml"))["spec"]["template"]["spec"]
    assert "vpc.amazonaws.com/efa" not in cpu["containers"][0]["resources"]["requests"]
    assert "FI_PROVIDER" not in _env(cpu["containers"][0])


def test_any_providers_fabric_is_taken_as_it_is_described():
    """The job half knows no fabric: another provider's devices and NCCL settings reach the pod
    just as written."""
    data = stack("aws-us-west-2").output.model_dump(mode="json")
    data["gpu"]["fabric"] = {
        "name": "IB",
        "resource": "example.com/rdma-hca",
        "per_node": 8,
        "gbit_per_device": 400,
        "nccl_env": {"NCCL_IB_HCA": "mlx5", "NCCL_NET_PLUGIN": "none-of-yours"},
    }
    train = _gpu_worker(data)
    assert train["resources"]["requests"]["example.com/rdma-hca"] == 8
    env = _env(train)
    assert env["NCCL_IB_HCA"] == "mlx5" and env["NCCL_NET_PLUGIN"] == "none-of-yours"
    assert env["ALCHEMIST_NCCL_NET_PLUGIN"] == "required" and "FI_PROVIDER" not in env


def test_pods_run_as_the_teams_identity():
    """The stack's shared_fs.uid/gid own the team's subtree: job pods run as them."""
    data = stack("dev").output.model_dump(mode="json")
    data["shared_fs"].update(uid=2001, gid=2002)
    data["teams"][0].update(uid=2001, gid=2002)  # the default team's entry says the same
    from alchemist_jobs.contract import StackOutput

    class _S:
        output = StackOutput.parse(data, "test")

    pod = _job(_render(_S, EXAMPLES / "digits.yaml"))["spec"]["template"]["spec"]
    sc = pod["securityContext"]
    assert (sc["runAsUser"], sc["runAsGroup"], sc["fsGroup"]) == (2001, 2002, 2002)
    session = session_pod(_S.output, "alchemist-session-a")["spec"]["securityContext"]
    assert (session["runAsUser"], session["runAsGroup"]) == (2001, 2002)


def test_security_context_is_restricted():
    job = _job(_render(stack("dev"), EXAMPLES / "digits.yaml"))
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in pod["containers"] + pod["initContainers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc.get("privileged") is False


def test_gpus_request_limit_and_land_on_the_stacks_gpu_nodes():
    s = stack("aws-us-west-2")
    job = _job(_render(s, EXAMPLES / "digits.yaml", ["resources.gpu=4", "procs_per_node=4"]))
    pod = job["spec"]["template"]["spec"]
    res = pod["containers"][0]["resources"]
    assert res["requests"]["nvidia.com/gpu"] == 4 and res["limits"]["nvidia.com/gpu"] == 4
    assert pod["nodeSelector"] == s.output.gpu.node_selector
    assert pod["tolerations"] == s.output.gpu.tolerations
    cpu_job = _job(_render(s, EXAMPLES / "digits.yaml"))
    cpu_pod = cpu_job["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in cpu_pod["containers"][0]["resources"]["requests"]
    assert "nodeSelector" not in cpu_pod and "tolerations" not in cpu_pod


def test_parameter_servers_have_their_own_cpu_only_pods():
    """10.8: nodes=4, gpu=4, 2 servers asks for 16 GPUs, not 24."""
    s = stack("aws-us-west-2")
    objs = _render(
        s,
        EXAMPLES / "digits.yaml",
        ["algorithm.name=async", "algorithm.servers=2", "nodes=4", "procs_per_node=4", "resources.gpu=4"],
    )
    name = _jobset(objs)["metadata"]["name"]
    workers, servers = _job(objs), _job(objs, "ps")
    assert workers["spec"]["completions"] == 4 and servers["spec"]["completions"] == 2
    env = _env(workers["spec"]["template"]["spec"]["containers"][0])
    assert env["ALCHEMIST_PS_ADDRS"] == f"{name}-ps-0-0.{name}:29600,{name}-ps-0-1.{name}:29601"
    gpus = 0
    for job in (workers, servers):
        pod = job["spec"]["template"]["spec"]
        gpus += job["spec"]["completions"] * pod["containers"][0]["resources"]["requests"].get(
            "nvidia.com/gpu", 0
        )
    assert gpus == 16
    ps_pod = servers["spec"]["template"]["spec"]
    assert set(ps_pod["containers"][0]["resources"]["requests"]) == {"cpu", "memory"}
    # Issue 23.7 and 36.7: their own size (at most one worker process's share of a node, and at
    # most 2 CPUs / 4 GiB), tolerating the GPU nodes without selecting them: beside the workers
    # or on a node without GPUs.
    worker = workers["spec"]["template"]["spec"]
    w = worker["containers"][0]["resources"]
    assert (w["requests"]["cpu"], w["requests"]["memory"]) == ("1", "2Gi")  # digits.yaml
    assert ps_pod["containers"][0]["resources"] == {
        "requests": {"cpu": "250m", "memory": "512Mi"},
        "limits": {"memory": "512Mi"},
    }
    assert worker["nodeSelector"] == s.output.gpu.node_selector and "nodeSelector" not in ps_pod
    assert ps_pod["tolerations"] == worker["tolerations"] == s.output.gpu.tolerations
    assert {p["name"] for p in ps_pod["containers"][0]["ports"]} >= {"ps-0", "ps-1"}


def test_cpu_parameter_servers_stay_off_the_gpu_nodes_and_split_the_node_share():
    s = stack("aws-us-west-2")
    objs = _render(
        s,
        EXAMPLES / "digits.yaml",
        [
            "algorithm.name=async",
            "algorithm.servers=2",
            "procs_per_node=3",
            "resources.cpu=2",
            "resources.memory=1.5G",
        ],
    )
    ps_pod = _job(objs, "ps")["spec"]["template"]["spec"]
    assert "nodeSelector" not in ps_pod and "tolerations" not in ps_pod
    # 2 CPUs / 3 processes; 1.5e9 bytes / 3 = 476.8 MiB, rounded up
    assert ps_pod["containers"][0]["resources"]["requests"] == {"cpu": "667m", "memory": "477Mi"}


def test_parameter_servers_take_what_a_shard_needs_not_a_worker_process_share():
    """Issue 36.7: a big worker's share (40 CPUs, 160Gi over 4 processes: 10 CPUs, 40Gi) is
    capped at 2 CPUs and 4 GiB a server."""
    objs = _render(
        stack("aws-us-west-2"),
        EXAMPLES / "digits.yaml",
        [
            "algorithm.name=async",
            "algorithm.servers=2",
            "nodes=2",
            "procs_per_node=4",
            "resources.gpu=4",
            "resources.cpu=40",
            "resources.memory=160Gi",
        ],
    )
    ps = _job(objs, "ps")["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert ps == {"requests": {"cpu": "2", "memory": "4096Mi"}, "limits": {"memory": "4096Mi"}}


def test_script_tasks_run_from_their_code_snapshot():
    objs = _render(stack("dev"), EXAMPLES / "script.yaml")
    cm, job = objs[0], _job(objs)
    digest = job["metadata"]["annotations"]["alchemist.io/code"]
    train = job["spec"]["template"]["spec"]["containers"][0]
    assert train["workingDir"] == f"/shared/code/{digest}"
    assert "code.tar.gz" in cm["binaryData"]
    setup = job["spec"]["template"]["spec"]["initContainers"][0]["command"]
    assert setup[setup.index("--code-dir") + 1] == f"/shared/code/{digest}"
    builtin = _job(_render(stack("dev"), EXAMPLES / "digits.yaml"))
    assert "workingDir" not in builtin["spec"]["template"]["spec"]["containers"][0]


def test_object_names_are_the_run_id_and_fit_jobsets_pod_names():
    from alchemist_jobs.rundir import MAX_RUN_ID, new_run_id

    assert mf.object_name(RUN) == RUN
    assert mf.object_name("3d-unet-20260101-120000-ab12") == "r-3d-unet-20260101-120000-ab12"
    for name in ("a" * 40, "9" * 40, "a-" * 19 + "a"):  # the longest names the spec accepts
        run_id = new_run_id(name)
        assert len(run_id) <= MAX_RUN_ID and run_id.startswith(name[:16].rstrip("-") + "-2")
        # JobSet v0.12.0 webhook: `<jobset>-worker-0-<max pod index>-abcde` <= 63
        assert len(f"{mf.object_name(run_id)}-worker-0-1023-abcde") <= 63
    # a longer id is refused in one line, never cut into a name that is not its run label
    with pytest.raises(UserError, match=r"run id 'a{42}': 42 characters; accepted: at most 41"):
        mf.object_name("a" * 42)


def test_rank_to_pod_follows_torchruns_host_name_order():
    # c10d ranks nodes by host name: <js>-worker-0-0, ...-0-1, ...-0-10, ...-0-11, ...-0-2
    assert [rank_pod_index(r, 12, 1) for r in range(12)] == [0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9]
    assert [rank_pod_index(r, 2, 2) for r in range(4)] == [0, 0, 1, 1]
    hosts = sorted(f"job-{i}.job.ns.svc.cluster.local" for i in range(12))
    assert [int(h.split(".")[0].split("-")[1]) for h in hosts] == [
        rank_pod_index(r, 12, 1) for r in range(12)
    ]


def test_dry_run_prints_yaml_that_parses_back_to_the_manifests(run_cli):
    import yaml

    from tests.unit.k8s.conftest import outputs

    code, out, err = run_cli(
        "run",
        "examples/script.yaml",
        "--dry-run",
        "--stack",
        "aws-us-west-2",
        "--outputs",
        outputs("aws-us-west-2"),
    )
    assert code == 0, err
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert _kinds(docs) == ["ConfigMap", "NetworkPolicy", "JobSet"]
    s = stack("aws-us-west-2")
    for d in docs:
        validate(d, s.schema_version)
    assert "fake-secret" not in out


def test_environment_is_not_read(monkeypatch):
    """Manifests are pure: the submitting machine's environment does not leak into them."""
    monkeypatch.setenv("ALCHEMIST_HOME", "/nowhere")
    monkeypatch.setenv("PYTHONPATH", "/also/nowhere")
    objs = _render(stack("dev"), EXAMPLES / "digits.yaml")
    assert "/nowhere" not in str(objs) and os.environ["PYTHONPATH"] not in str(objs)


def test_the_preemption_rule_matches_the_job_controllers_own_message():
    """JobSet matches onJobFailureMessagePatterns (RE2) against the failed Job's condition
    message, which the Job controller writes for a FailJob rule as
    "Container %s for pod %s/%s failed with exit code %v matching %v rule at index %d"
    (kubernetes/kubernetes pkg/controller/job/pod_failure_policy.go, release-1.33). Exit
    143 (SIGTERM) matches; a crash (exit 1) would not reach this rule at all, as only 143
    has a FailJob rule, and its message would not match either."""
    import re

    objs = _render(stack("dev"), EXAMPLES / "digits.yaml")
    (rule,) = [
        r for r in _jobset(objs)["spec"]["failurePolicy"]["rules"] if r["name"] == "StoppedFromOutside"
    ]
    (pattern,) = rule["onJobFailureMessagePatterns"]
    msg = (
        "Container {} for pod research/{}-worker-0-1-x7k2p failed with exit code {} "
        "matching FailJob rule at index 0"
    )
    assert re.search(pattern, msg.format("train", RUN, 143))
    assert not re.search(pattern, msg.format("train", RUN, 1))
    job_rule = _job(objs)["spec"]["podFailurePolicy"]["rules"][0]
    assert job_rule["action"] == "FailJob" and job_rule["onExitCodes"]["values"] == [143]


# --- issue 23: configuration errors, the restart attempt, /dev/shm --------------------------


def test_the_configuration_error_rules_fail_the_run_at_once():
    """The worker Job's podFailurePolicy maps CONFIG_ERROR_EXIT_CODE of `train` to FailJob,
    and JobSet's first rule maps that Job failure (reason PodFailurePolicy, the Job
    controller's message) to FailJobSet: no restart is spent on it."""
    import re

    from alchemist_jobs.runtime.config_error import CONFIG_ERROR_EXIT_CODE

    for s in stack_outputs():
        objs = _render(s, EXAMPLES / "digits.yaml")
        rules = _jobset(objs)["spec"]["failurePolicy"]["rules"]
        assert rules[0]["name"] == "ConfigurationError" and rules[0]["action"] == "FailJobSet"
        (pattern,) = rules[0]["onJobFailureMessagePatterns"]
        msg = (
            "Container train for pod research/{}-worker-0-1-x7k2p failed with exit code {} "
            "matching FailJob rule at index 1"
        )
        assert re.search(pattern, msg.format(RUN, CONFIG_ERROR_EXIT_CODE))
        assert not re.search(pattern, msg.format(RUN, mf.PREEMPTED_EXIT_CODE))
        job_rules = _job(objs)["spec"]["podFailurePolicy"]["rules"]
        assert {
            "action": "FailJob",
            "onExitCodes": {"containerName": "train", "operator": "In", "values": [CONFIG_ERROR_EXIT_CODE]},
        } in job_rules


def _bytes(q: str) -> int:
    from kubernetes.utils.quantity import parse_quantity

    return int(parse_quantity(q))


def test_dev_shm_is_a_share_of_the_memory_limit_not_all_of_it():
    """/dev/shm is tmpfs, and tmpfs pages count against the pod's memory limit: with a
    sizeLimit equal to the limit, a full /dev/shm leaves the processes nothing. Every job
    pod and session pod keeps at least three quarters of its limit for its processes."""
    pods = []
    for s in stack_outputs():
        for overrides in (
            ["resources.memory=8Gi"],
            ["resources.memory=400Gi"],
            ["resources.memory=1Gi"],
            VARIANTS["async-2x2-servers-2"],
        ):
            objs = _render(s, EXAMPLES / "digits.yaml", overrides)
            pods += [
                _job(objs, r["name"])["spec"]["template"]["spec"]
                for r in _jobset(objs)["spec"]["replicatedJobs"]
            ]
        pods.append(session_pod(s.output, "alchemist-session-alice")["spec"])
    assert len(pods) >= 4 * 5
    for pod in pods:
        (train,) = pod["containers"]
        limit = _bytes(train["resources"]["limits"]["memory"])
        shm = next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]
        assert shm["medium"] == "Memory"
        size = _bytes(shm["sizeLimit"])
        assert limit // 4 - 2**20 < size <= limit // 4, (train["resources"], shm)
        assert {"name": "dshm", "mountPath": "/dev/shm"} in train["volumeMounts"]


def test_every_pod_lists_the_stacks_registry_login():
    """images.pull_secret (the `existing` provider's private registry) reaches every pod the
    job library makes: workers, parameter servers and the session. Without it the kubelet
    pulls anonymously and the pods sit in ImagePullBackOff."""
    base = stack("onprem-lab")
    out = base.output.model_copy(
        update={"images": base.output.images.model_copy(update={"pull_secret": "alchemist-registry"})}
    )
    objs = (
        KubernetesScheduler(out)
        .dryrun(load_spec(EXAMPLES / "digits.yaml", VARIANTS["async-2x2-servers-2"]), EXAMPLES, run_id=RUN)
        .manifests
    )
    js = _jobset(objs)
    pods = [rj["template"]["spec"]["template"]["spec"] for rj in js["spec"]["replicatedJobs"]]
    pods.append(session_pod(out, "alchemist-session-alice")["spec"])
    assert len(pods) == 3
    for pod in pods:
        assert pod["imagePullSecrets"] == [{"name": "alchemist-registry"}]
    validate(js, base.schema_version)
    # No login, no field: the kubelet's own credentials (or none) pull the image.
    plain = _jobset(_render(base, EXAMPLES / "digits.yaml"))
    assert (
        "imagePullSecrets" not in plain["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    )
    assert "imagePullSecrets" not in session_pod(base.output, "alchemist-session-alice")["spec"]
