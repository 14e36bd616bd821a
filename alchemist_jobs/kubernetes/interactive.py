"""Interactive sessions on a cluster stack: one pod per user with JupyterLab and a shell, from
the stack's interactive image, with the shared volume and a worker's environment.

JupyterLab listens on the pod's loopback only, reachable through `kubectl port-forward`
(guarded by the cluster's RBAC, pods/portforward), and asks for a token as well: a random
one, kept in a Secret `<session>-token` that the pod reads as JUPYTER_TOKEN, and printed once
when the session is created. The session pod has no job label, so the jobs' NetworkPolicies
do not admit it to any run's pods; the platform's `alchemist-sessions` policy lets it resolve
names (DNS), and its priority class ranks it above batch work in Kueue. The pod ends by itself after
`--hours` (activeDeadlineSeconds), so a forgotten session does not hold GPUs for ever.
"""

from __future__ import annotations

import getpass
import re
import secrets
import time

from alchemist_jobs import environment as E
from alchemist_jobs.contract import JOB_SECRET_PREFIX, StackOutput
from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes import manifests as mf
from alchemist_jobs.kubernetes.client import Cluster, ClusterError, Connector, NotFound
from alchemist_jobs.kubernetes.job_state import failure_reason, pending_reason

SESSION_LABEL = "alchemist.io/session"
SESSION_PRIORITY = "alchemist-interactive"
TOKEN_KEY = "token"
CONTAINER = "session"
JUPYTER_PORT = 8888
START_TIMEOUT_S = 900
POLL_S = 2.0


def session_name(user: str | None = None) -> str:
    """`alchemist-session-<user>`: one session per user and namespace."""
    user = re.sub(r"[^a-z0-9-]+", "-", (user or getpass.getuser()).lower()).strip("-") or "user"
    return f"alchemist-session-{user}"[:63].rstrip("-")


def session_pod(
    stack: StackOutput, name: str, gpus: int = 0, hours: float = 8.0, cpu: float = 2.0, memory: str = "8Gi"
) -> dict:
    """The session pod; one UserError line if the stack cannot give it."""
    per_node = stack.gpu.per_node
    if gpus < 0:
        raise UserError(f"--gpus {gpus}: accepted: 0..{per_node}")
    if gpus > per_node:
        have = (
            f"the {per_node} GPUs per node of stack {stack.stack}"
            if per_node
            else f"stack {stack.stack}, which has no GPU nodes"
        )
        raise UserError(f"--gpus {gpus}: more than {have}; accepted: 0..{per_node}")
    if hours <= 0:
        raise UserError(f"--hours: {hours}; accepted: a number of hours > 0")
    if not stack.images.interactive:
        raise UserError(
            f"stack {stack.stack} exports no images.interactive; accepted: a stack "
            "whose images are built (`pulumi up` builds them)"
        )
    root = stack.shared_fs.mount_path.rstrip("/") or "/"
    session_dir = f"{root.rstrip('/')}/sessions/{name}"
    env = [
        {"name": E.NODE.name, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": E.SHARED_ROOT.name, "value": root},
        {"name": E.STACK.name, "value": stack.stack},
        {"name": E.RUN_DIR.name, "value": session_dir},
        {"name": E.METRICS_PORT.name, "value": str(mf.METRICS_BASE_PORT)},
        {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {
            "name": "JUPYTER_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": token_secret(name), "key": TOKEN_KEY}},
        },
    ]
    # The shared root is the team's own subtree (the PVC's root): the session sees no more.
    script = (
        f'mkdir -p "${E.RUN_DIR.name}"\n'
        f"exec jupyter lab --ip=127.0.0.1 --port={JUPYTER_PORT} --no-browser "
        '--IdentityProvider.token="$JUPYTER_TOKEN" --ServerApp.password= '
        f"--ServerApp.root_dir={root}\n"
    )
    pod_sc, container_sc = mf.security_contexts(stack.shared_fs.uid, stack.shared_fs.gid)
    # No managed-by (job) label: the jobs' NetworkPolicies must not admit a session. Kueue
    # admits it like a job (its pod integration: the queue label) before it takes GPUs.
    labels = {SESSION_LABEL: name, mf.QUEUE_LABEL: stack.queue}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": stack.namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            # Above batch: Kueue admits it first and may preempt batch work for it, never
            # the reverse (the PriorityClasses the platform makes, infra/labels.py).
            "priorityClassName": SESSION_PRIORITY,
            "activeDeadlineSeconds": int(hours * 3600),
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "securityContext": pod_sc,
            "containers": [
                {
                    "name": CONTAINER,
                    "image": stack.images.interactive,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/bin/sh", "-c", script],
                    "workingDir": root,
                    "env": env,
                    "ports": [{"name": "jupyter", "containerPort": JUPYTER_PORT, "protocol": "TCP"}],
                    "resources": mf.resources(cpu, memory, gpus, stack),
                    "securityContext": container_sc,
                    "volumeMounts": [
                        {"name": "shared", "mountPath": root},
                        {"name": "dshm", "mountPath": "/dev/shm"},
                    ],
                }
            ],
            "volumes": [
                {"name": "shared", "persistentVolumeClaim": {"claimName": stack.shared_fs.pvc}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": mf.shm_size(memory)}},
            ],
            **mf.gpu_placement(gpus, stack),
            **mf.pull_secrets(stack),
        },
    }


def token_secret(name: str) -> str:
    """The session's token Secret: named so the platform's admission policy lets the pod read it."""
    return f"{JOB_SECRET_PREFIX}{name.removeprefix('alchemist-')}-token"


def how_to_reach(stack: StackOutput, name: str, token: str | None = None) -> str:
    """The commands that reach the session; the token only when the session was just made
    (it is printed once)."""
    ns = stack.namespace
    url = f"http://127.0.0.1:{JUPYTER_PORT}/lab" + (f"?token={token}" if token else "")
    creds = (stack.auth.kubeconfig_command if stack.auth else None) or "the stack's kubeconfig output"
    return "\n".join(
        [
            f"  JupyterLab  kubectl -n {ns} port-forward pod/{name} {JUPYTER_PORT}:{JUPYTER_PORT}",
            f"              then open {url}"
            + ("" if token else "  (token: printed when the session was started)"),
            f"  shell       kubectl -n {ns} exec -it {name} -- bash",
            f"  stop        alchemist interactive --stack {stack.stack} --stop",
            f"  (kubectl reaches the cluster with {creds})",
        ]
    )


class Sessions:
    """Start, find and stop the user's session pod on a stack."""

    def __init__(self, out: StackOutput, connector: Connector | None = None):
        self.out = out
        if connector is None:
            from alchemist_jobs.kubernetes.client import connect

            connector = connect
        self._connector = connector
        self._cluster: Cluster | None = None
        self.token: str | None = None  # set when start() makes a new session

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = self._connector(self.out)
        return self._cluster

    def get(self, name: str) -> dict | None:
        return self.cluster.get("core", "read_namespaced_pod", name=name, namespace=self.out.namespace)

    def start(self, pod: dict) -> tuple[dict, bool]:
        """Create the session pod unless it runs already; (pod, created)."""
        name = pod["metadata"]["name"]
        existing = self.get(name)
        if existing is not None and (existing.get("status") or {}).get("phase") in ("Pending", "Running"):
            return existing, False
        if existing is not None:  # a finished session: make room for the new one
            self.stop(name)
            self._wait_gone(name)
        self.token = secrets.token_urlsafe(32)
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": token_secret(name),
                "namespace": self.out.namespace,
                "labels": {SESSION_LABEL: name},
            },
            "stringData": {TOKEN_KEY: self.token},
        }
        self.cluster.call("core", "create_namespaced_secret", namespace=self.out.namespace, body=secret)
        try:
            return self.cluster.call(
                "core", "create_namespaced_pod", namespace=self.out.namespace, body=pod
            ), True
        except BaseException:
            self._delete_secret(name)
            raise

    def _wait_gone(self, name: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while self.get(name) is not None:
            if time.monotonic() > deadline:
                raise ClusterError(f"session {name}: the old pod is still terminating")
            time.sleep(1.0)

    def wait_running(self, name: str, say=print, timeout: float = START_TIMEOUT_S) -> dict:
        """Until the pod runs; reports what it waits for; one line if it cannot start."""
        deadline, last = time.monotonic() + timeout, ""
        while True:
            pod = self.get(name)
            if pod is None:
                raise ClusterError(f"session {name}: the pod disappeared while starting")
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Running":
                return pod
            if phase in ("Failed", "Succeeded"):
                raise ClusterError(f"session {name}: ended while starting ({failure_reason(pod)})")
            reason = pending_reason(pod)
            if reason != last:
                say(f"  pending: {reason}")
                last = reason
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"session {name}: not running after {timeout:.0f} s "
                    f"({reason}); `alchemist interactive --stack "
                    f"{self.out.stack} --stop` removes it"
                )
            time.sleep(POLL_S)

    def _delete_secret(self, name: str) -> None:
        try:
            self.cluster.call(
                "core", "delete_namespaced_secret", name=token_secret(name), namespace=self.out.namespace
            )
        except NotFound:
            pass

    def stop(self, name: str) -> bool:
        self._delete_secret(name)
        try:
            self.cluster.call("core", "delete_namespaced_pod", name=name, namespace=self.out.namespace)
            return True
        except NotFound:
            return False


def describe_pod(pod: dict) -> str:
    return mf.to_yaml([pod])


__all__ = ["session_name", "session_pod", "how_to_reach", "Sessions", "describe_pod"]
