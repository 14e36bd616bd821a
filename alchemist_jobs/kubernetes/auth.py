"""How the CLI authenticates to a stack's cluster: `credentials(out)`, whatever the stack output carries.

Each way is keyed by the stack-output field that carries it (alchemist_jobs.contract) and
fills a `kubernetes` client Configuration: `kubeconfig` (a secret kubeconfig) here, `eks`
(a boto3-made token) in eks_auth. A provider whose jobs reach its clusters another way adds
its field to the contract and its method here; the first whose field the output has is used.
"""

from __future__ import annotations

import atexit
import importlib
import os
import tempfile
from collections.abc import Callable
from typing import Any

from alchemist_jobs.contract import StackOutput
from alchemist_jobs.errors import UserError

Method = Callable[[StackOutput, Any], None]  # (stack output, Configuration to fill)


def private_file(content: bytes, suffix: str) -> str:
    """A file only this user can read, removed when the process exits."""
    fd, path = tempfile.mkstemp(prefix="alchemist-", suffix=suffix)
    with os.fdopen(fd, "wb") as f:
        f.write(content)
    atexit.register(lambda: os.path.exists(path) and os.unlink(path))
    return path


def from_kubeconfig(out: StackOutput, cfg: Any) -> None:
    """The kubeconfig's current context: server, CA and the user's credential."""
    import yaml
    from kubernetes import config

    try:
        kubeconfig = yaml.safe_load(out.kubeconfig.get_secret_value())
        config.load_kube_config_from_dict(kubeconfig, client_configuration=cfg, persist_config=False)
    except Exception as e:  # the message could quote the file: name the type only
        raise UserError(
            f"stack {out.stack}: its kubeconfig cannot be used "
            f"({type(e).__name__}); accepted: a kubeconfig with a current "
            "context (re-run `pulumi up` for the stack)"
        ) from None


# field -> method, or "module:function" imported on first use (boto3 only on EKS stacks)
_METHODS: dict[str, Method | str] = {
    "kubeconfig": from_kubeconfig,
    "eks": "alchemist_jobs.kubernetes.eks_auth:configure",
}


def credentials(out: StackOutput) -> Any:
    """A `kubernetes.client.Configuration` that reaches the stack's cluster."""
    from kubernetes import client

    for field, method in _METHODS.items():
        if getattr(out, field, None) is None:
            continue
        if isinstance(method, str):
            module, _, name = method.partition(":")
            method = getattr(importlib.import_module(module), name)
        cfg = client.Configuration()
        method(out, cfg)
        return cfg
    raise UserError(
        f"stack {out.stack}: its output has none of {', '.join(_METHODS)}; "
        "one of them is needed to reach the cluster"
    )
