"""`alchemist ui --in-cluster`: the stack's public output (the platform's ConfigMap) joined
with the pod's own ServiceAccount credentials, named by path and never copied."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from alchemist_jobs.errors import UserError

# Where Kubernetes mounts a pod's ServiceAccount credentials.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def in_cluster_kubeconfig(sa_dir: Path = SERVICE_ACCOUNT_DIR) -> str:
    """A kubeconfig that names the pod's ServiceAccount token and CA files (their paths, not
    their contents) and the API server's in-cluster address."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host or not (sa_dir / "token").is_file():
        raise UserError(
            "--in-cluster: no Kubernetes service account here (KUBERNETES_SERVICE_"
            f"HOST unset or {sa_dir}/token missing); accepted: run inside a pod, or "
            "drop --in-cluster and pass the stack's --outputs"
        )
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "in-cluster",
            "clusters": [
                {
                    "name": "in-cluster",
                    "cluster": {"server": server, "certificate-authority": str(sa_dir / "ca.crt")},
                }
            ],
            "users": [{"name": "sa", "user": {"tokenFile": str(sa_dir / "token")}}],
            "contexts": [{"name": "in-cluster", "context": {"cluster": "in-cluster", "user": "sa"}}],
        }
    )


def in_cluster_output(stack: str, path: Path | None) -> Any:
    """The stack's public output (the platform's ConfigMap) with the pod's own credentials."""
    from alchemist_jobs.contract import StackOutput

    if path is None:
        raise UserError(
            f"--in-cluster --stack {stack}: needs --outputs {stack}=FILE (the "
            "stack output without its kubeconfig)"
        )
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"--outputs {path}: cannot read it as JSON ({type(e).__name__})") from None
    if not isinstance(data, dict):
        raise UserError(f"--outputs {path}: accepted: a JSON object (a stack output)")
    data = {k: v for k, v in data.items() if k not in ("kubeconfig", "auth")}
    data["kubeconfig"] = in_cluster_kubeconfig()
    return StackOutput.parse(data, str(path))
