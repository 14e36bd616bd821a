"""How the CLI authenticates to a stack's cluster: `credentials(out)`, whatever the stack output carries.

A `kubeconfig` (secret) is used as it is. Otherwise the output's `auth` (alchemist_jobs.contract
ClusterAuth, written by the provider's package) names a `method`, and the function this table
gives for it fills a `kubernetes` client Configuration with a token it makes itself:
`presigned-request` in presigned_token (a cloud API request the provider describes, presigned
with boto3, imported on first use). A provider whose jobs reach its clusters another way adds
its method here and writes that name in its output.
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


def _remove(path: str) -> None:
    if os.path.exists(path):
        os.unlink(path)


def private_file(content: bytes, suffix: str) -> str:
    """A file only this user can read, removed when the process exits."""
    fd, path = tempfile.mkstemp(prefix="alchemist-", suffix=suffix)
    with os.fdopen(fd, "wb") as f:
        f.write(content)
    atexit.register(_remove, path)
    return path


def from_kubeconfig(out: StackOutput, cfg: Any) -> None:
    """The kubeconfig's current context: server, CA and the user's credential."""
    import yaml
    from kubernetes import config

    assert out.kubeconfig is not None  # credentials() picks this method only then
    try:
        kubeconfig = yaml.safe_load(out.kubeconfig.get_secret_value())
        config.load_kube_config_from_dict(kubeconfig, client_configuration=cfg, persist_config=False)
    except Exception as e:  # the message could quote the file: name the type only
        raise UserError(
            f"stack {out.stack}: its kubeconfig cannot be used "
            f"({type(e).__name__}); accepted: a kubeconfig with a current "
            "context (re-run `pulumi up` for the stack)"
        ) from None


# auth.method -> "module:function" filling a Configuration, imported on first use (boto3 only
# where a stack needs it)
METHODS: dict[str, str] = {
    "presigned-request": "alchemist_jobs.kubernetes.presigned_token:configure",
}


def credentials(out: StackOutput) -> Any:
    """A `kubernetes.client.Configuration` that reaches the stack's cluster."""
    from kubernetes import client

    method: Method
    if out.kubeconfig is not None:
        method = from_kubeconfig
    elif out.auth is not None:
        if out.auth.method not in METHODS:
            known = ", ".join(repr(m) for m in METHODS)
            raise UserError(
                f"stack {out.stack}: auth.method = {out.auth.method!r} is not known to this alchemist; "
                f"accepted: {known} (or a kubeconfig; run `pulumi up -s {out.stack}` to refresh an output "
                "written by another version)"
            )
        module, _, name = METHODS[out.auth.method].partition(":")
        method = getattr(importlib.import_module(module), name)
    else:
        raise UserError(
            f"stack {out.stack}: its output has neither kubeconfig nor auth; "
            "one of them is needed to reach the cluster"
        )
    cfg = client.Configuration()
    method(out, cfg)
    return cfg
