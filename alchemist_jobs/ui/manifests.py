"""The in-cluster dashboard of a cluster stack, as pure manifest builders: a ServiceAccount
bound to the namespace's submitter Role (never cluster-admin), the stack's facts in a
ConfigMap (no kubeconfig: the pod uses its ServiceAccount), a Deployment running
`alchemist ui --in-cluster` and a Service to port-forward to. infra/ applies them."""

from __future__ import annotations

import json
from typing import Any

from alchemist_jobs.contract import StackOutput

NAME = "alchemist-dashboard"
SUBMITTER_ROLE = "alchemist-job-submitter"  # infra/team_namespace.py submitter_role()
PORT = 8740
STACK_FILE_DIR = "/etc/alchemist"
LABELS = {
    "app.kubernetes.io/name": NAME,
    "app.kubernetes.io/part-of": "alchemist",
    "app.kubernetes.io/component": "dashboard",
}


def public_output(out: StackOutput) -> dict[str, Any]:
    """The stack output without its credentials: what the pod may hold in a ConfigMap."""
    data = out.model_dump(
        mode="json", exclude={"kubeconfig": True, "auth": True, "teams": {"__all__": {"kubeconfig"}}}
    )
    return data


def build(out: StackOutput, image: str | None = None) -> list[dict[str, Any]]:
    """ServiceAccount, RoleBinding, ConfigMap, Deployment and Service in the stack's job
    namespace. `image` defaults to the stack's training image (it holds `alchemist[ui]`)."""
    ns = out.namespace
    meta = lambda name: {"name": name, "namespace": ns, "labels": dict(LABELS)}  # noqa: E731
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": meta(NAME),
            "automountServiceAccountToken": True,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta(NAME),
            # The same Role the namespace's people get: the dashboard can do what a submitter
            # can, in this namespace only.
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SUBMITTER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": ns}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta(f"{NAME}-stack"),
            "data": {"stack.json": json.dumps(public_output(out), indent=1, sort_keys=True)},
        },
        deployment(out, image or out.images.train),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta(NAME),
            "spec": {
                "type": "ClusterIP",
                "selector": dict(LABELS),
                "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
            },
        },
    ]


def command(out: StackOutput) -> list[str]:
    # Bound to the pod's loopback: only `kubectl port-forward` reaches it, so who may use the
    # dashboard is who may port-forward in this namespace (the submitter Role), by RBAC.
    return [
        "alchemist",
        "ui",
        "--in-cluster",
        "--stack",
        out.stack,
        "--outputs",
        f"{out.stack}={STACK_FILE_DIR}/stack.json",
        "--host",
        "127.0.0.1",
        "--port",
        str(PORT),
        "--spec-dir",
        "/tmp",
    ]


def deployment(out: StackOutput, image: str) -> dict[str, Any]:
    probe = {
        "exec": {
            "command": [
                "python3",
                "-c",
                f"import urllib.request as u; u.urlopen('http://127.0.0.1:{PORT}/', timeout=5)",
            ]
        },
        "periodSeconds": 20,
        "timeoutSeconds": 10,
        "failureThreshold": 3,
    }
    uid = out.shared_fs.uid
    container = {
        "name": "dashboard",
        "image": image,
        "command": command(out),
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "env": [{"name": "HOME", "value": "/tmp"}, {"name": "PYTHONUNBUFFERED", "value": "1"}],
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        },
        "readinessProbe": {**probe, "initialDelaySeconds": 5},
        "livenessProbe": {**probe, "initialDelaySeconds": 30},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "stack", "mountPath": STACK_FILE_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": out.namespace, "labels": dict(LABELS)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(LABELS)},
            "template": {
                "metadata": {"labels": dict(LABELS)},
                "spec": {
                    "serviceAccountName": NAME,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": uid,
                        "runAsGroup": out.shared_fs.gid,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": [
                        {"name": "stack", "configMap": {"name": f"{NAME}-stack"}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
                    ],
                },
            },
        },
    }
