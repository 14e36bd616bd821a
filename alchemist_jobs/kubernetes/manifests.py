"""A job spec on a stack becomes Kubernetes manifests: pure, printable, the same on every stack.

    build(spec, stack output, run id, code snapshot) -> [ConfigMap, Service, Job]

* ConfigMap: the resolved spec and the code tarball; every pod's init container (`pod_setup`)
  writes them onto the shared file system, idempotently, before the workers start.
* Service: headless, so pod `<job>-<i>` is reachable as `<job>-<i>.<service>`; pod 0 hosts
  torchrun's c10d rendezvous on RDZV_PORT.
* Job: Indexed, `completions = parallelism = nodes (+ parameter servers)`, created suspended
  with the Kueue queue label so Kueue admits all pods at once; restarts through torchrun's
  --max-restarts inside a pod and backoffLimit / podFailurePolicy for lost pods.

Only the stack-specific fields (namespace, queue, image, volume claim, mount path, GPU
resource, node selector, tolerations, scrape labels, stack name) differ between stacks.
"""

from __future__ import annotations

import base64
import hashlib
import shlex
from pathlib import PurePosixPath
from typing import Any

from alchemist_jobs import server_role
from alchemist_jobs.contract import (MANAGED_BY_LABEL, METRICS_BASE_PORT, RUN_LABEL, StackOutput,
                                     metrics_port_name)
from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes.code_assets import CodeSnapshot
from alchemist_jobs.spec import JobSpec
from alchemist_jobs.worker_env import WorkerEnv, threads_per_worker

RDZV_PORT = 29500
PS_BASE_PORT = server_role.CLUSTER_BASE_PORT  # parameter-server shard k listens on this + k
CONTAINER = "train"
SETUP_CONTAINER = "setup"
CONFIG_MOUNT = "/etc/alchemist"
SPEC_KEY, CODE_KEY = "spec.yaml", "code.tar.gz"
# The images' `alchemist` user (images/Dockerfile.*); the shared file system is writable by it.
RUN_AS_UID = 1000
# Finished Jobs (and, through owner references, their Service and ConfigMap) are garbage-
# collected after this long; results stay on the shared file system.
TTL_AFTER_FINISHED_S = 3 * 24 * 3600
# Pods start minutes apart (image pulls, node scale-up): wait that long for all to join.
RDZV_JOIN_TIMEOUT_S = 900
# torchrun prefixes every worker line with its global rank; `alchemist logs --rank` filters on it.
LOG_PREFIX_TEMPLATE = "[rank${rank}]: "
NAME_LABEL = "alchemist.io/name"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
WORKERS_ANNOTATION = "alchemist.io/workers"
NODES_ANNOTATION = "alchemist.io/nodes"
PROCS_ANNOTATION = "alchemist.io/procs-per-node"
SERVERS_ANNOTATION = "alchemist.io/parameter-servers"
CODE_ANNOTATION = "alchemist.io/code"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
# A pod's hostname is `<job>-<index>`, at most 63 characters: leave room for "-1087".
MAX_NAME = 63 - 5


def object_name(run_id: str) -> str:
    """The Job's (and its Service's and ConfigMap's) name: a DNS-1035 label derived from the
    run id, short enough that every pod hostname `<name>-<index>` is a valid label too."""
    name = run_id if run_id[:1].isalpha() else f"r-{run_id}"
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(run_id.encode()).hexdigest()[:6]
        name = f"{name[:MAX_NAME - 7].rstrip('-')}-{digest}"
    return name


def parameter_servers(spec: JobSpec) -> int:
    """Pods beyond the workers that run the parameter server (server_role decides, for
    every backend: the one place launch code looks at the algorithm, STYLE.md 7)."""
    return server_role.server_count(spec)


def image_for(spec: JobSpec, stack: StackOutput) -> str:
    image = spec.image or stack.images.train
    if not image:
        raise UserError(
            f"image: the spec sets none and stack {stack.stack} exports no images.train; "
            "accepted: an image reference in the spec's `image` field, or a stack whose "
            "images are built (`pulumi up` builds them)")
    return image


def check_fits(spec: JobSpec, stack: StackOutput) -> None:
    """What the stack cannot give this spec, as one UserError line; nothing is created."""
    gpus, per_node = spec.resources.gpu, stack.gpu.per_node
    if gpus > per_node:
        have = (f"the {per_node} GPUs per node of stack {stack.stack}" if per_node
                else f"stack {stack.stack}, which has no GPU nodes")
        raise UserError(f"resources.gpu: {gpus} GPUs per node is more than {have}; "
                        f"accepted: resources.gpu <= {per_node}")
    if gpus and spec.procs_per_node > gpus:
        raise UserError(f"procs_per_node: {spec.procs_per_node} workers per node cannot each "
                        f"have a GPU with resources.gpu: {gpus}; accepted: procs_per_node <= {gpus}")
    image_for(spec, stack)


def worker_target(spec: JobSpec) -> list[str]:
    """The bootstrap's arguments: the same words as on the local stack."""
    t = spec.task
    if t.builtin:
        return ["builtin"]
    if t.script:
        return ["script", PurePosixPath(t.script).as_posix(), *t.args]
    return ["module", t.module, *t.args]


def _cpu(q: float) -> str:
    return str(int(q)) if float(q).is_integer() else f"{int(round(q * 1000))}m"


def _labels(spec: JobSpec, run_id: str) -> dict[str, str]:
    return {MANAGED_BY_LABEL[0]: MANAGED_BY_LABEL[1], RUN_LABEL: run_id, NAME_LABEL: spec.name}


def shared_paths(stack: StackOutput, run_id: str) -> tuple[str, str]:
    """(shared root, run directory) as every pod sees them."""
    root = stack.shared_fs.mount_path.rstrip("/") or "/"
    return root, f"{root.rstrip('/')}/runs/{run_id}"


def pod_command(spec: JobSpec, name: str, run_id: str, run_dir: str) -> list[str]:
    """The container command: torchrun on worker pods, the parameter server on the rest.

    A small shell script, because one pod template serves every index: it reads the index
    the Job controller gives each pod (JOB_COMPLETION_INDEX). The task's arguments follow the
    script as positional parameters, so they never pass through shell quoting.
    """
    servers = parameter_servers(spec)
    lines = ["set -e", 'i="${JOB_COMPLETION_INDEX:?not an Indexed Job pod}"']
    if servers:
        lines += [
            f'if [ "$i" -ge {spec.nodes} ]; then',
            f"  export ALCHEMIST_PS_SHARD=$((i - {spec.nodes})) "
            f"ALCHEMIST_PS_PORT=$(({PS_BASE_PORT} + i - {spec.nodes}))",
            "  exec python -m alchemist_jobs.runtime.parameter_server",
            "fi",
        ]
    # Pod 0 hosts the rendezvous store; saying so spares torchrun guessing it from DNS,
    # which may not resolve yet when pod 0 starts.
    lines.append('if [ "$i" -eq 0 ]; then host=1; else host=0; fi')
    torchrun = [
        "exec", "torchrun", f"--nnodes={spec.nodes}", f"--nproc-per-node={spec.procs_per_node}",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={name}-0.{name}:{RDZV_PORT}",
        f"--rdzv-id={run_id}", f"--max-restarts={spec.max_restarts}",
    ]
    lines.append(" ".join(shlex.quote(a) for a in torchrun)
                 + f' "--rdzv-conf=is_host=$host,join_timeout={RDZV_JOIN_TIMEOUT_S}"'
                 # Worker output goes to the pod log (prefixed with the rank) and to files
                 # on the shared file system.
                 + " --tee=3 " + shlex.quote(f"--log-dir={run_dir}/logs/torchrun")
                 + ' -m alchemist_jobs.runtime.bootstrap "$@"')
    return ["/bin/sh", "-c", "\n".join(lines) + "\n", "alchemist", *worker_target(spec)]


def _env(spec: JobSpec, stack: StackOutput, name: str, run_dir: str, root: str) -> list[dict]:
    servers = parameter_servers(spec)
    ps_addrs = ",".join(f"{name}-{spec.nodes + k}.{name}:{PS_BASE_PORT + k}"
                        for k in range(servers)) if servers else None
    # Workers print to the pod log (torchrun tees it), not to rank-N.log files.
    fixed = WorkerEnv(run_dir=run_dir, shared_root=root, stack=stack.stack,
                      threads=threads_per_worker(spec.resources.cpu, spec.procs_per_node),
                      ps_addrs=ps_addrs, metrics_port=METRICS_BASE_PORT, log_to_console=True,
                      log_prefix_template=LOG_PREFIX_TEMPLATE).as_dict()
    values = {**fixed, **spec.env}
    env: list[dict] = []
    if "ALCHEMIST_NODE" not in values:  # the pod's name: where a worker runs
        env.append({"name": "ALCHEMIST_NODE",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    env += [{"name": k, "value": v} for k, v in values.items()]
    return env


def security_contexts() -> tuple[dict, dict]:
    """(pod, container) security contexts: non-root, no privilege escalation, no
    capabilities, the runtime's default seccomp profile (Pod Security Standard `restricted`)."""
    pod = {"runAsNonRoot": True, "runAsUser": RUN_AS_UID, "runAsGroup": RUN_AS_UID,
           "fsGroup": RUN_AS_UID, "fsGroupChangePolicy": "OnRootMismatch",
           "seccompProfile": {"type": "RuntimeDefault"}}
    container = {"allowPrivilegeEscalation": False, "privileged": False,
                 "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}
    return pod, container


def resources(cpu: float, memory: str, gpus: int, stack: StackOutput) -> dict:
    requests: dict[str, Any] = {"cpu": _cpu(cpu), "memory": memory}
    # Memory limit = request: a worker that outgrows it is stopped, not its neighbours. No
    # CPU limit: throttling a collective stalls every worker.
    limits: dict[str, Any] = {"memory": memory}
    if gpus:
        requests[stack.gpu.resource] = gpus
        limits[stack.gpu.resource] = gpus
    return {"requests": requests, "limits": limits}


def gpu_placement(gpus: int, stack: StackOutput) -> dict:
    """Node selector and tolerations of the stack's GPU nodes, for pods that ask for GPUs
    (CPU-only pods stay off the GPU nodes)."""
    if not gpus:
        return {}
    out: dict[str, Any] = {}
    if stack.gpu.node_selector:
        out["nodeSelector"] = dict(stack.gpu.node_selector)
    if stack.gpu.tolerations:
        out["tolerations"] = [dict(t) for t in stack.gpu.tolerations]
    return out


def build(spec: JobSpec, stack: StackOutput, run_id: str,
          code: CodeSnapshot | None = None) -> list[dict]:
    """[ConfigMap, Service, Job] for one run; raises UserError if the stack cannot run it."""
    check_fits(spec, stack)
    name, ns = object_name(run_id), stack.namespace
    root, run_dir = shared_paths(stack, run_id)
    servers = parameter_servers(spec)
    pods = spec.nodes + servers
    labels = _labels(spec, run_id)
    annotations = {WORKERS_ANNOTATION: str(spec.world_size), NODES_ANNOTATION: str(spec.nodes),
                   PROCS_ANNOTATION: str(spec.procs_per_node),
                   SERVERS_ANNOTATION: str(servers)}
    if code is not None:
        annotations[CODE_ANNOTATION] = code.digest

    config_map: dict[str, Any] = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
        "immutable": True,
        "data": {SPEC_KEY: spec.to_yaml()},
    }
    if code is not None:
        config_map["binaryData"] = {CODE_KEY: base64.b64encode(code.tarball).decode()}

    ports = [{"name": "rdzv", "port": RDZV_PORT, "targetPort": RDZV_PORT, "protocol": "TCP"}]
    ports += [{"name": f"ps-{k}", "port": PS_BASE_PORT + k, "targetPort": PS_BASE_PORT + k,
               "protocol": "TCP"} for k in range(servers)]
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
        "spec": {
            "clusterIP": "None",
            # DNS names exist as soon as pods do, before they are ready: the rendezvous
            # starts before any readiness could be known.
            "publishNotReadyAddresses": True,
            "selector": {RUN_LABEL: run_id},
            "ports": ports,
        },
    }

    pod_sc, container_sc = security_contexts()
    volume_mounts = [{"name": "shared", "mountPath": root},
                     {"name": "dshm", "mountPath": "/dev/shm"}]
    setup_args = ["python", "-m", "alchemist_jobs.kubernetes.pod_setup", "--run-dir", run_dir,
                  "--spec", f"{CONFIG_MOUNT}/{SPEC_KEY}"]
    if code is not None:
        setup_args += ["--code", f"{CONFIG_MOUNT}/{CODE_KEY}",
                       "--code-dir", code.path_under(root)]
    image = image_for(spec, stack)
    setup = {
        "name": SETUP_CONTAINER, "image": image, "imagePullPolicy": "IfNotPresent",
        "command": setup_args,
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                      "limits": {"memory": "256Mi"}},
        "securityContext": container_sc,
        "volumeMounts": [{"name": "shared", "mountPath": root},
                         {"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True}],
    }
    container_ports = [{"name": metrics_port_name(r),
                        "containerPort": METRICS_BASE_PORT + r, "protocol": "TCP"}
                       for r in range(spec.procs_per_node)]
    container_ports.append({"name": "rdzv", "containerPort": RDZV_PORT, "protocol": "TCP"})
    container_ports += [{"name": f"ps-{k}", "containerPort": PS_BASE_PORT + k, "protocol": "TCP"}
                        for k in range(servers)]
    train = {
        "name": CONTAINER, "image": image, "imagePullPolicy": "IfNotPresent",
        "command": pod_command(spec, name, run_id, run_dir),
        "env": _env(spec, stack, name, run_dir, root),
        "ports": container_ports,
        "resources": resources(spec.resources.cpu, spec.resources.memory,
                               spec.resources.gpu, stack),
        "securityContext": security_contexts()[1],
        "volumeMounts": volume_mounts,
    }
    if code is not None:  # the workers run from the snapshot: exactly the submitted code
        train["workingDir"] = code.path_under(root)
    pod_spec: dict[str, Any] = {
        "subdomain": name,  # with the Indexed Job's hostname: <job>-<i>.<service>
        "restartPolicy": "Never",  # restarts are torchrun's and the Job's, not the kubelet's
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,  # workers never talk to the API server
        "securityContext": pod_sc,
        "initContainers": [setup],
        "containers": [train],
        "volumes": [
            {"name": "shared", "persistentVolumeClaim": {"claimName": stack.shared_fs.pvc}},
            {"name": "config", "configMap": {"name": name}},
            # Shared memory for DataLoader workers and NCCL; the default 64 MiB is too small.
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.resources.memory}},
        ],
        **gpu_placement(spec.resources.gpu, stack),
    }
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {**labels, QUEUE_LABEL: stack.queue},
                     "annotations": annotations},
        "spec": {
            "completionMode": "Indexed",
            "completions": pods,
            "parallelism": pods,
            "suspend": True,  # Kueue admits the whole job at once, then unsuspends it
            "backoffLimit": spec.max_restarts,
            "podFailurePolicy": {"rules": [
                # Evicted, preempted or on a lost node: replace the pod, do not count it.
                {"action": "Ignore",
                 "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                # torchrun exits non-zero only after its own --max-restarts are spent: the
                # job has failed, and restarting the pod would multiply the restarts.
                {"action": "FailJob",
                 "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn",
                                 "values": [0]}},
            ]},
            # A replacement pod starts only once the old one is gone: one pod per hostname.
            "podReplacementPolicy": "Failed",
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
            "template": {
                "metadata": {"labels": {**labels, **stack.monitoring.pod_monitor_labels},
                             "annotations": dict(annotations)},
                "spec": pod_spec,
            },
        },
    }
    return [config_map, service, job]


def to_yaml(objs: list[dict]) -> str:
    """Manifests as a multi-document YAML stream (`kubectl apply -f -` takes it as is)."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def _str(dumper: yaml.SafeDumper, value: str):
        style = "|" if "\n" in value else None  # scripts and specs stay readable
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    return yaml.dump_all(objs, Dumper=_Dumper, sort_keys=False, width=100)
