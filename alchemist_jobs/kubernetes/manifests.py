"""A job spec on a stack becomes Kubernetes manifests: pure, printable, the same on every stack.

    build(spec, stack output, run id, code snapshot) -> [ConfigMap, NetworkPolicy, JobSet]

* ConfigMap: the resolved spec and the code tarball; every pod's init container (`pod_setup`)
  writes them onto the shared file system, idempotently, before the workers start.
* NetworkPolicy: a run's pods reach each other both ways on every port (rendezvous,
  NCCL/gloo, parameter servers), and nothing else reaches them (torchrun's store on pod 0
  unpickles what it reads); the platform's policies add Prometheus, DNS and the object store.
* JobSet (kubernetes-sigs/jobset v0.12.0): one replicatedJob `worker` (an Indexed Job, one
  pod per node, torchrun with c10d rendezvous at pod 0, `<name>-worker-0-0.<name>` by
  JobSet's own headless Service) and, for `async`, one replicatedJob `ps` whose pods run
  the parameter server on CPU and memory only. Created suspended with the Kueue queue label:
  Kueue admits all pods at once. Losing any pod fails its Job (backoffLimit 0) and JobSet's
  failurePolicy recreates every Job: the group restarts from the newest checkpoint, at most
  `max_restarts` times. A pod stopped from outside (SIGTERM: Kueue preemption, eviction,
  drain) exits PREEMPTED_EXIT_CODE and restarts the group without spending a restart; a pod
  that cannot run as configured (no GPU, no NCCL net plugin) exits CONFIG_ERROR_EXIT_CODE and
  fails the run at once.

Only the stack-specific fields (namespace, queue, image, volume claim, mount path, GPU
resource, node selector, tolerations, scrape labels, stack name) differ between stacks.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Mapping
from typing import Any

from alchemist_jobs import environment as E
from alchemist_jobs import launch_plan as lp
from alchemist_jobs import server_role
from alchemist_jobs.contract import (
    MANAGED_BY_LABEL,
    METRICS_BASE_PORT,
    RUN_LABEL,
    StackOutput,
)
from alchemist_jobs.data.pods import pod_patch
from alchemist_jobs.errors import UserError
from alchemist_jobs.job_env import JobLock
from alchemist_jobs.kubernetes.code_assets import CodeSnapshot
from alchemist_jobs.rundir import MAX_RUN_ID
from alchemist_jobs.runtime.config_error import CONFIG_ERROR_EXIT_CODE
from alchemist_jobs.spec import MAX_NODES, JobSpec, SecretRef

# The launch plan's (launch_plan.py), named here as the manifests' tests and tools know them.
RDZV_PORT = lp.RDZV_PORT
quantity_bytes, SERVER_CPU, SERVER_MEMORY = lp.quantity_bytes, lp.SERVER_CPU, lp.SERVER_MEMORY
PS_BASE_PORT = server_role.CLUSTER_BASE_PORT  # parameter-server shard k listens on this + k
CONTAINER = "train"
SETUP_CONTAINER = "setup"
CONFIG_MOUNT = "/etc/alchemist"
SPEC_KEY, CODE_KEY = "spec.yaml", "code.tar.gz"
# The images' `alchemist` user (images/Dockerfile.*); pods run as the stack's team identity
# (shared_fs.uid/gid, which owns the team's subtree), 1000:1000 by default.
RUN_AS_UID = 1000
# Finished Jobs (and, through owner references, their Service and ConfigMap) are garbage-
# collected after this long; results stay on the shared file system.
TTL_AFTER_FINISHED_S = 3 * 24 * 3600
# JobSet (apiVersion, the replicatedJobs): pod i of the workers is `<name>-worker-0-<i>`.
JOBSET_API = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
WORKER_RJOB, PS_RJOB = lp.WORKER, lp.SERVER
RJOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
# What the pod script exits with when stopped from outside (SIGTERM from the kubelet: Kueue
# preemption, eviction, drain): 128 + 15, as a shell killed by SIGTERM would report.
PREEMPTED_EXIT_CODE = 143
# The container's termination message (the kubelet creates it mode 0666 and reports it as
# `state.terminated.message`): where a worker's configuration error goes (config_error.py).
TERMINATION_LOG = "/dev/termination-log"
# /dev/shm is tmpfs: its pages count against the pod's memory limit, so it gets a share of
# that limit, not all of it (shm_size).
SHM_FRACTION = 4
# The Prometheus of the platform runs in this namespace (infra/labels.py).
MONITORING_NAMESPACE = "monitoring"
# torchrun prefixes every worker line with its global rank; `alchemist logs --rank` filters on it.
LOG_PREFIX_TEMPLATE = "[rank${rank}]: "
NAME_LABEL = "alchemist.io/name"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
WORKERS_ANNOTATION = "alchemist.io/workers"
NODES_ANNOTATION = "alchemist.io/nodes"
PROCS_ANNOTATION = "alchemist.io/procs-per-node"
SERVERS_ANNOTATION = "alchemist.io/parameter-servers"
MAX_RESTARTS_ANNOTATION = "alchemist.io/max-restarts"
CODE_ANNOTATION = "alchemist.io/code"
REQUIREMENTS_ANNOTATION = "alchemist.io/requirements"  # the job's lock's sha256 (job_env.py)
REQUIREMENTS_KEY = "requirements.lock"  # the ConfigMap's copy of the job's resolved lock
DEPS_CONTAINER = "deps"  # the init container that installs it (once per lock)
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
# JobSet v0.12.0 (pkg/webhooks/jobset_webhook.go, ValidateCreate) refuses a JobSet whose
# longest pod name `<name>-<replicatedJob>-<job index>-<pod index>-abcde` exceeds 63
# characters; the workers' pod index goes up to MAX_NODES - 1.
MAX_NAME = 63 - len("-abcde") - len(f"-{WORKER_RJOB}-0-") - len(str(MAX_NODES - 1))


def object_name(run_id: str) -> str:
    """The JobSet's (and its Service's and ConfigMap's) name: the run id itself, so the
    admission policy can tell that the run label is the object's own (`r-` in front of an id
    that starts with a digit: a DNS-1035 label starts with a letter). new_run_id keeps ids
    short enough; a longer one is refused here, never shortened into another run's label."""
    name = run_id if run_id[:1].isalpha() else f"r-{run_id}"
    if len(run_id) > MAX_RUN_ID or len(name) > MAX_NAME:
        raise UserError(
            f"run id {run_id[:80]!r}: {len(run_id)} characters; accepted: at most "
            f"{MAX_RUN_ID} (a run id names the run's JobSet, whose pod names "
            "JobSet limits to 63 characters)"
        )
    return name


def parameter_servers(spec: JobSpec) -> int:
    """Pods beyond the workers that run the parameter server (server_role decides, for
    every backend: the one place launch code looks at the algorithm)."""
    return server_role.server_count(spec)


def image_for(spec: JobSpec, stack: StackOutput) -> str:
    image = spec.image or stack.images.train
    if not image:
        raise UserError(
            f"image: the spec sets none and stack {stack.stack} exports no images.train; "
            "accepted: an image reference in the spec's `image` field, or a stack whose "
            "images are built (`pulumi up` builds them)"
        )
    return image


def check_fits(spec: JobSpec, stack: StackOutput) -> None:
    """What the stack cannot give this spec, as one UserError line; nothing is created."""
    gpus, per_node = spec.resources.gpu, stack.gpu.per_node
    if gpus > per_node:
        have = (
            f"the {per_node} GPUs per node of stack {stack.stack}"
            if per_node
            else f"stack {stack.stack}, which has no GPU nodes"
        )
        raise UserError(
            f"resources.gpu: {gpus} GPUs per node is more than {have}; accepted: resources.gpu <= {per_node}"
        )
    if gpus and spec.procs_per_node > gpus:
        raise UserError(
            f"procs_per_node: {spec.procs_per_node} workers per node cannot each "
            f"have a GPU with resources.gpu: {gpus}; accepted: procs_per_node <= {gpus}"
        )
    image_for(spec, stack)


def _cpu(q: float) -> str:
    return str(int(q)) if float(q).is_integer() else f"{int(round(q * 1000))}m"


def _labels(spec: JobSpec, run_id: str) -> dict[str, str]:
    return {MANAGED_BY_LABEL[0]: MANAGED_BY_LABEL[1], RUN_LABEL: run_id, NAME_LABEL: spec.name}


def shared_paths(stack: StackOutput, run_id: str) -> tuple[str, str]:
    """(shared root, run directory) as every pod sees them."""
    root = stack.shared_fs.mount_path.rstrip("/") or "/"
    return root, f"{root.rstrip('/')}/runs/{run_id}"


def pod_host(name: str, rjob: str, index: int) -> str:
    """The DNS name JobSet gives a pod: `<jobset>-<replicatedJob>-<job index>-<pod index>`
    under the subdomain `<jobset>` (jobset v0.12.0 pkg/util/placement GenJobName, plus the
    Indexed Job's `<job>-<index>` hostname)."""
    return f"{name}-{rjob}-0-{index}.{name}"


def pod_command(plan: lp.LaunchPlan, workers: lp.Role, run_dir: str) -> list[str]:
    """The worker container's command: torchrun, with c10d rendezvous at pod 0.

    A small shell script, because one pod template serves every index: it reads the index
    the Job controller gives each pod (JOB_COMPLETION_INDEX). The task's arguments follow the
    script as positional parameters, so they never pass through shell quoting. SIGTERM is
    passed on to torchrun and the script then exits PREEMPTED_EXIT_CODE, so the failure
    policies tell a pod stopped from outside from a failed run.
    """
    lines = [
        "set -e",
        'i="${JOB_COMPLETION_INDEX:?not an Indexed Job pod}"',
        # Pod 0 hosts the rendezvous store; saying so spares torchrun guessing it from
        # DNS, which may not resolve yet when pod 0 starts.
        'if [ "$i" -eq 0 ]; then host=1; else host=0; fi',
    ]
    timeout = plan.rendezvous_timeout_s
    torchrun = [
        "torchrun",
        f"--nnodes={workers.replicas}",
        f"--nproc-per-node={workers.procs_per_replica}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={pod_host(plan.name, workers.name, 0)}:{workers.port('rdzv')}",
        # Restarts are JobSet's (the whole group, from the newest checkpoint): one count.
        f"--rdzv-id={plan.run_id}",
        "--max-restarts=0",
    ]
    # read_timeout is the c10d store's connect and read timeout
    # (torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py, _create_tcp_store;
    # default 60 s): it, not join_timeout, decides how late pod 0 may start.
    lines.append(
        " ".join(shlex.quote(a) for a in torchrun)
        + f' "--rdzv-conf=is_host=$host,join_timeout={timeout},read_timeout={timeout}"'
        # Worker output goes to the pod log (prefixed with the rank) and to files
        # on the shared file system.
        + " --tee=3 "
        + shlex.quote(f"--log-dir={run_dir}/logs/torchrun")
        + f' -m {workers.module} "$@" &'
    )
    lines += [
        "pid=$!",
        "stopped=",
        "trap 'stopped=1; kill -TERM $pid 2>/dev/null' TERM",
        "set +e",
        "wait $pid; rc=$?",
        # `wait` returns early when the trap runs: wait for torchrun itself.
        'if [ -n "$stopped" ]; then wait $pid; exit ' + str(PREEMPTED_EXIT_CODE) + "; fi",
        # torchrun exits 1 whatever its worker's code: a worker that wrote a
        # configuration error (config_error.py) gets its own code back, which fails
        # the run instead of restarting it.
        f'if [ "$rc" -ne 0 ] && [ -s "${{{E.CONFIG_ERROR_FILE.name}:-/nonexistent}}" ]; '
        f"then exit {CONFIG_ERROR_EXIT_CODE}; fi",
        "exit $rc",
    ]
    return ["/bin/sh", "-c", "\n".join(lines) + "\n", "alchemist", *workers.args]


def ps_command(servers: lp.Role) -> list[str]:
    """The parameter-server container's command: shard k = the pod's completion index. One pod
    template serves every shard, so the plan's per-shard variables (shard k listens on
    PS_BASE_PORT + k, as `target` placed it) are computed from the index in the pod."""
    for k, extra in enumerate(servers.replica_env):
        assert extra[E.PS_PORT.name] == str(PS_BASE_PORT + k), extra  # target() placed it so
    script = (
        'k="${JOB_COMPLETION_INDEX:?not an Indexed Job pod}"\n'
        f"export {E.PS_SHARD.name}=$k {E.PS_PORT.name}=$(({PS_BASE_PORT} + k))\n"
        f"exec python -m {servers.module}\n"
    )
    return ["/bin/sh", "-c", script]


def _fabric_env(spec: JobSpec, stack: StackOutput) -> dict[str, str]:
    """What the stack's network fabric says NCCL needs (`gpu.fabric.nccl_env`, the provider's
    words), in GPU pods, and the worker told to check that NCCL's network plugin loads before
    NCCL starts (runtime/nccl_net.py: without it NCCL would fall back to TCP without a word)."""
    fabric = stack.gpu.fabric
    if not (spec.resources.gpu and fabric):
        return {}
    return {**fabric.nccl_env, E.NCCL_NET_PLUGIN.name: "required"}


def target(spec: JobSpec, stack: StackOutput, run_id: str) -> lp.Target:
    """What this stack tells the launch plan: the shared file system's mount, the pods' stable
    host names (JobSet's `<name>-<replicatedJob>-0-<index>.<name>`), shard k of the parameter
    servers on PS_BASE_PORT + k, workers printing to the pod log (prefixed with the rank) and
    serving metrics from METRICS_BASE_PORT, and NCCL's settings where the stack has a network
    fabric."""
    name = object_name(run_id)
    root, run_dir = shared_paths(stack, run_id)
    return lp.Target(
        stack=stack.stack,
        shared_root=root,
        run_dir=run_dir,
        worker_hosts=tuple(pod_host(name, WORKER_RJOB, i) for i in range(spec.nodes)),
        servers=tuple((pod_host(name, PS_RJOB, k), PS_BASE_PORT + k) for k in range(parameter_servers(spec))),
        metrics_port=METRICS_BASE_PORT,
        log_to_console=True,
        log_prefix_template=LOG_PREFIX_TEMPLATE,
        extra_env=_fabric_env(spec, stack),
    )


def plan(spec: JobSpec, stack: StackOutput, run_id: str) -> lp.LaunchPlan:
    """The run's launch plan on this stack (what build materialises)."""
    return lp.build(spec, run_id, target(spec, stack, run_id), name=object_name(run_id))


def _env(role: lp.Role, stack: StackOutput) -> list[dict]:
    """A container's environment: the role's variables, with what only a pod can say (its own
    name, JobSet's restart attempt) from the downward API, the kubelet's termination log as
    the configuration-error file, and secrets as Secret key references."""
    values = dict(role.env)
    env: list[dict] = []
    if E.NODE.name not in values:  # the pod's name: where a worker runs
        env.append({"name": E.NODE.name, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    if E.RESTART_ATTEMPT.name not in values:  # which group restart this pod belongs to
        env.append(restart_attempt_env())
    values.setdefault(E.CONFIG_ERROR_FILE.name, TERMINATION_LOG)
    env += [{"name": k, "value": v} for k, v in values.items()]
    return env + secret_env(role.secrets, stack)


def restart_attempt_env() -> dict:
    """The JobSet restart attempt, which JobSet v0.12.0 writes on every pod it creates as
    both label and annotation `jobset.sigs.k8s.io/restart-attempt` (= status.restarts;
    pkg/controllers/jobset_controller.go labelAndAnnotateObject), through the downward
    API: torchrun runs with --max-restarts=0, so only this tells a worker it restarted."""
    return {
        "name": E.RESTART_ATTEMPT.name,
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{RESTART_ATTEMPT_LABEL}']"}},
    }


def shm_size(memory: str) -> str:
    """/dev/shm's sizeLimit for a pod with this memory limit: a quarter of it (2 GiB of an
    8Gi pod, where a runtime's default is 64 MiB). tmpfs pages count against the pod's
    memory limit (Kubernetes' emptyDir docs, `medium: Memory`), so the processes keep three
    quarters whatever /dev/shm holds; DataLoader workers' prefetched batches and NCCL's
    shared-memory transport live there (docs/kubernetes.md)."""
    # quantity_bytes, not the kubernetes package's parser: a dry run imports no cluster library.
    return f"{max(1, int(quantity_bytes(memory)) // (SHM_FRACTION * 2**20))}Mi"


def secret_env(secrets: Mapping[str, SecretRef], stack: StackOutput) -> list[dict]:
    """`secret_env` as Secret key references: the value stays in the cluster's Secret and is
    never in a manifest, a dry run or a log."""
    out = []
    for var, ref in sorted(secrets.items()):
        if not (ref.secret and ref.key):
            raise UserError(
                f"secret_env.{var}: no `secret` and `key` for stack {stack.stack}; "
                "accepted: {secret: <Secret in namespace "
                f"{stack.namespace}>, key: <key in it>}} on cluster stacks"
            )
        out.append({"name": var, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}})
    return out


def security_contexts(uid: int = RUN_AS_UID, gid: int = RUN_AS_UID) -> tuple[dict, dict]:
    """(pod, container) security contexts: the team's uid/gid, non-root, no privilege
    escalation, no capabilities, the runtime's default seccomp profile (Pod Security
    Standard `restricted`)."""
    pod = {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": gid,
        "fsGroup": gid,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    return pod, container


def resources(cpu: float, memory: str, gpus: int, stack: StackOutput, fabric: bool = False) -> dict:
    requests: dict[str, Any] = {"cpu": _cpu(cpu), "memory": memory}
    # Memory limit = request: a worker that outgrows it is stopped, not its neighbours. No
    # CPU limit: throttling a collective stalls every worker.
    limits: dict[str, Any] = {"memory": memory}
    if gpus:
        requests[stack.gpu.resource] = gpus
        limits[stack.gpu.resource] = gpus
        if fabric and stack.gpu.fabric:  # every fabric device of the node: NCCL uses them all
            requests[stack.gpu.fabric.resource] = stack.gpu.fabric.per_node
            limits[stack.gpu.fabric.resource] = stack.gpu.fabric.per_node
    return {"requests": requests, "limits": limits}


def pull_secrets(stack: StackOutput) -> dict:
    """`imagePullSecrets` naming the stack's registry login (`images.pull_secret`, a Secret the
    platform puts in every team namespace), for every pod the job library makes; nothing
    when the registry needs no login. Without it the kubelet pulls anonymously and the pod
    sits in ImagePullBackOff while Kueue holds its quota."""
    if not stack.images.pull_secret:
        return {}
    return {"imagePullSecrets": [{"name": stack.images.pull_secret}]}


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


def build(
    spec: JobSpec,
    stack: StackOutput,
    run_id: str,
    code: CodeSnapshot | None = None,
    deps: JobLock | None = None,
    launch: lp.LaunchPlan | None = None,
) -> list[dict]:
    """[ConfigMap, NetworkPolicy, JobSet] for one run; UserError if the stack cannot run it.
    `deps`: the job's resolved packages (job_env.py), installed by `with_requirements`.
    `launch`: the run's plan on this stack, if made already (`plan`)."""
    check_fits(spec, stack)
    run = launch or plan(spec, stack, run_id)
    workers, servers = run.workers, run.servers
    name, ns = run.name, stack.namespace
    labels = _labels(spec, run_id)
    annotations = {
        WORKERS_ANNOTATION: str(workers.replicas * workers.procs_per_replica),
        NODES_ANNOTATION: str(workers.replicas),
        PROCS_ANNOTATION: str(workers.procs_per_replica),
        SERVERS_ANNOTATION: str(servers.replicas if servers else 0),
        MAX_RESTARTS_ANNOTATION: str(workers.max_restarts),
    }
    if code is not None:
        annotations[CODE_ANNOTATION] = code.digest

    config_map: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
        "immutable": True,
        "data": {SPEC_KEY: spec.to_yaml()},
    }
    if code is not None:
        config_map["binaryData"] = {CODE_KEY: base64.b64encode(code.tarball).decode()}

    rjobs = [
        _replicated_job(workers, _worker_pod(spec, stack, run, workers, code), stack, labels, annotations)
    ]
    if servers:
        rjobs.append(_replicated_job(servers, _ps_pod(spec, stack, run, servers), stack, labels, annotations))
    jobset = {
        "apiVersion": f"{JOBSET_API[0]}/{JOBSET_API[1]}",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {**labels, QUEUE_LABEL: stack.queue},
            "annotations": annotations,
        },
        "spec": {
            # JobSet's headless Service `<name>`: pod DNS names exist as soon as the pods do,
            # before they are ready (the rendezvous starts before readiness is known).
            "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
            "replicatedJobs": rjobs,
            # The run succeeds when the workers do; parameter servers are stopped then.
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [workers.name]},
            "failurePolicy": {
                "maxRestarts": workers.max_restarts,
                # Every Job of the old attempt is gone before the new ones start: one pod
                # per hostname, and no old worker still holding the rendezvous port.
                "restartStrategy": "BlockingRecreate",
                "rules": [
                    {
                        # A pod that cannot run as configured (no GPU, no NCCL net plugin: the
                        # Job's podFailurePolicy turns exit CONFIG_ERROR_EXIT_CODE into reason
                        # PodFailurePolicy): a restart gets the same pod, so fail the run now.
                        "name": "ConfigurationError",
                        "action": "FailJobSet",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                        "onJobFailureMessagePatterns": [
                            f"exit code {CONFIG_ERROR_EXIT_CODE} matching FailJob rule"
                        ],
                    },
                    {
                        # Stopped from outside (the worker Job's podFailurePolicy turns exit
                        # PREEMPTED_EXIT_CODE into reason PodFailurePolicy with this message):
                        # restart without spending one of max_restarts.
                        "name": "StoppedFromOutside",
                        "action": "RestartJobSetAndIgnoreMaxRestarts",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                        "onJobFailureMessagePatterns": [
                            f"exit code {PREEMPTED_EXIT_CODE} matching FailJob rule"
                        ],
                    },
                ],  # anything else: RestartJobSet (the default action), counted
            },
            "suspend": True,  # Kueue admits the whole group at once, then unsuspends it
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
        },
    }
    if deps is not None:
        with_requirements(config_map, jobset, deps, workers, stack)
    return [config_map, network_policy(spec, stack, run_id, name), jobset]


def with_requirements(
    config_map: dict, jobset: dict, deps: JobLock, workers: lp.Role, stack: StackOutput
) -> None:
    """The job's own packages on a cluster: the resolved lock travels in the ConfigMap, and
    an init container of each worker pod installs it once per lock into
    `<shared root>/deps/envs/<lock hash>/site` on the shared file system (job_env.ensure_site:
    a file lock, a temporary directory renamed into place), which every later run with the
    same lock finds there; the workers add it after the image's own packages. Chosen over an
    image per lock because it needs no image builder or registry credentials where `alchemist
    run` is typed, and is the same on every stack (each has a shared file system)."""
    root, _ = shared_paths(stack, "-")
    config_map["data"][REQUIREMENTS_KEY] = deps.text
    jobset["metadata"]["annotations"][REQUIREMENTS_ANNOTATION] = deps.sha256
    # pip inside the pod reads the same mirror settings the spec gives its workers.
    pip_env = [{"name": k, "value": v} for k, v in workers.env.items() if k.startswith("PIP_")]
    for rjob in jobset["spec"]["replicatedJobs"]:
        if rjob["name"] != workers.name:
            continue  # parameter servers import no job code
        template = rjob["template"]["spec"]["template"]
        template["metadata"]["annotations"][REQUIREMENTS_ANNOTATION] = deps.sha256
        pod = template["spec"]
        setup = pod["initContainers"][0]
        pod["initContainers"].append(
            {
                **setup,
                "name": DEPS_CONTAINER,
                "command": [
                    "python",
                    "-m",
                    "alchemist_jobs.job_env",
                    "install",
                    "--lock",
                    f"{CONFIG_MOUNT}/{REQUIREMENTS_KEY}",
                    "--root",
                    root,
                ],
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
                **({"env": pip_env} if pip_env else {}),
            }
        )
        site = f"{root.rstrip('/')}/deps/envs/{deps.short}/site"
        for c in pod["containers"]:
            c.setdefault("env", []).append({"name": E.JOB_SITE.name, "value": site})


def _replicated_job(
    role: lp.Role, pod_spec: dict, stack: StackOutput, labels: dict, annotations: dict
) -> dict:
    """One role as a replicatedJob: an Indexed Job of one pod per replica."""
    return {
        "name": role.name,
        "replicas": 1,
        "template": {
            "spec": {
                "completionMode": "Indexed",
                "completions": role.replicas,
                "parallelism": role.replicas,
                # Any lost pod fails its Job at once; JobSet then restarts the whole group.
                "backoffLimit": 0,
                "podFailurePolicy": {
                    "rules": [
                        {
                            "action": "FailJob",
                            "onExitCodes": {
                                "containerName": CONTAINER,
                                "operator": "In",
                                "values": [PREEMPTED_EXIT_CODE],
                            },
                        },
                        {
                            "action": "FailJob",
                            "onExitCodes": {
                                "containerName": CONTAINER,
                                "operator": "In",
                                "values": [CONFIG_ERROR_EXIT_CODE],
                            },
                        },
                    ]
                },
                # A replacement pod starts only once the old one is gone: one pod per hostname.
                "podReplacementPolicy": "Failed",
                "template": {
                    "metadata": {
                        "labels": {**labels, **stack.monitoring.pod_monitor_labels},
                        "annotations": dict(annotations),
                    },
                    "spec": pod_spec,
                },
            }
        },
    }


def _pod_spec(
    spec: JobSpec,
    stack: StackOutput,
    run: lp.LaunchPlan,
    train: dict,
    code: CodeSnapshot | None,
    gpus: int,
) -> dict:
    root, run_dir = shared_paths(stack, run.run_id)
    name = run.name
    pod_sc, container_sc = security_contexts(stack.shared_fs.uid, stack.shared_fs.gid)
    setup_args = [
        "python",
        "-m",
        "alchemist_jobs.kubernetes.pod_setup",
        "--run-dir",
        run_dir,
        "--spec",
        f"{CONFIG_MOUNT}/{SPEC_KEY}",
    ]
    if code is not None:
        setup_args += ["--code", f"{CONFIG_MOUNT}/{CODE_KEY}", "--code-dir", code.path_under(root)]
    setup = {
        "name": SETUP_CONTAINER,
        "image": image_for(spec, stack),
        "imagePullPolicy": "IfNotPresent",
        "command": setup_args,
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": container_sc,
        "volumeMounts": [
            {"name": "shared", "mountPath": root},
            {"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True},
        ],
    }
    data = pod_patch(spec, stack)  # datasets: the store's identity and endpoint, the node cache
    train.setdefault("env", []).extend(data["env"])
    if data["env_from"]:
        train["envFrom"] = data["env_from"]
    train.setdefault("volumeMounts", []).extend(data["volume_mounts"])
    account = {"serviceAccountName": data["service_account"]} if data["service_account"] else {}
    return {
        **account,
        "restartPolicy": "Never",  # restarts are JobSet's, not the kubelet's
        "priorityClassName": f"alchemist-{spec.priority}",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,  # workers never talk to the API server
        "securityContext": pod_sc,
        "initContainers": [setup],
        "containers": [train],
        "volumes": [
            {"name": "shared", "persistentVolumeClaim": {"claimName": stack.shared_fs.pvc}},
            {"name": "config", "configMap": {"name": name}},
            # Shared memory for DataLoader workers and NCCL; the default 64 MiB is too small.
            # A share of this container's own limit (a parameter server's is its own size).
            {
                "name": "dshm",
                "emptyDir": {
                    "medium": "Memory",
                    "sizeLimit": shm_size(train["resources"]["limits"]["memory"]),
                },
            },
            *data["volumes"],
        ],
        **gpu_placement(gpus, stack),
        **pull_secrets(stack),
    }


def _mounts(role: lp.Role) -> list[dict]:
    return [{"name": m.name, "mountPath": m.path} for m in role.mounts]


def _ports(role: lp.Role) -> list[dict]:
    return [{"name": p.name, "containerPort": p.port, "protocol": "TCP"} for p in role.ports]


def _worker_pod(
    spec: JobSpec, stack: StackOutput, run: lp.LaunchPlan, workers: lp.Role, code: CodeSnapshot | None
) -> dict:
    root, run_dir = shared_paths(stack, run.run_id)
    size = workers.resources
    train = {
        "name": CONTAINER,
        "image": image_for(spec, stack),
        "imagePullPolicy": "IfNotPresent",
        "command": pod_command(run, workers, run_dir),
        "env": _env(workers, stack),
        "terminationMessagePath": TERMINATION_LOG,
        "ports": _ports(workers),
        "resources": resources(size.cpu, size.memory, size.gpus, stack, fabric=True),
        "securityContext": security_contexts()[1],
        "volumeMounts": _mounts(workers),
    }
    if code is not None:  # the workers run from the snapshot: exactly the submitted code
        train["workingDir"] = code.path_under(root)
    return _pod_spec(spec, stack, run, train, code, size.gpus)


def server_size(spec: JobSpec) -> tuple[str, str]:
    """(cpu, memory) requests of one parameter-server pod (launch_plan.server_resources)."""
    size = lp.server_resources(spec)
    return _cpu(size.cpu), size.memory


def _ps_pod(spec: JobSpec, stack: StackOutput, run: lp.LaunchPlan, servers: lp.Role) -> dict:
    """Parameter servers: CPU and memory only (their own size, launch_plan.server_resources),
    on any node with room: beside the workers on the GPU nodes (a GPU job's servers tolerate
    their taint but do not select them, and ask for no GPU) or on a node without GPUs where
    the stack has one."""
    size = servers.resources
    cpu = _cpu(size.cpu)
    train = {
        "name": CONTAINER,
        "image": image_for(spec, stack),
        "imagePullPolicy": "IfNotPresent",
        "command": ps_command(servers),
        "env": _env(servers, stack),
        "ports": _ports(servers),
        "resources": {"requests": {"cpu": cpu, "memory": size.memory}, "limits": {"memory": size.memory}},
        "securityContext": security_contexts()[1],
        "volumeMounts": _mounts(servers),
    }
    pod = _pod_spec(spec, stack, run, train, None, 0)
    tolerations = gpu_placement(run.workers.resources.gpus, stack).get("tolerations")
    return {**pod, **({"tolerations": tolerations} if tolerations else {})}


def network_policy(spec: JobSpec, stack: StackOutput, run_id: str, name: str) -> dict:
    """This run's pods reach each other, both ways, on every port, and nothing else.

    Both directions: the team namespace's `default-deny` isolates every pod for Ingress and
    Egress, so a connection needs the sender's egress and the receiver's ingress. Every port:
    the rendezvous store and parameter servers listen on fixed ports, but NCCL's socket
    transport and gloo connect to ports the kernel hands out (ephemeral), which no rule can
    name in advance. The only peers are pods carrying this run's label, which the admission
    policy lets no other object carry (infra/admission.py); the platform's own policies add
    Prometheus on the metrics ports, DNS and the object store (docs/platform.md)."""
    run = {RUN_LABEL: run_id}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": stack.namespace, "labels": _labels(spec, run_id)},
        "spec": {
            "podSelector": {"matchLabels": dict(run)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": dict(run)}}]}],
            "egress": [{"to": [{"podSelector": {"matchLabels": dict(run)}}]}],
        },
    }


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
