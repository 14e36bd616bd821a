"""Talking to a stack's cluster: the `kubernetes` client with the stack's credentials (auth.py),
and one JSON-in, JSON-out call helper.

Every call goes through `Cluster.call`, which asks the client for the raw response
(`_preload_content=False`) and decodes the JSON itself: the backend handles the objects
exactly as the API server sends them (the same dicts `manifests` builds), and API errors
become one line. Secrets (kubeconfig, token) never appear in errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from alchemist_jobs.contract import StackOutput
from alchemist_jobs.errors import UserError
from alchemist_jobs.kubernetes.auth import credentials

CONNECT_TIMEOUT_S = 15
READ_TIMEOUT_S = 60
FOLLOW_READ_TIMEOUT_S = 600


class ClusterError(UserError):
    """The cluster refused or could not be reached: one line, exit 1 (not bad input)."""

    exit_code = 1


class NotFound(Exception):
    pass


class Cluster:
    """The API groups the backend uses (`core`, `batch`, `custom` for JobSets and Kueue
    Workloads, `networking`), bound to the stack's namespace."""

    def __init__(
        self, core: Any, batch: Any, stack: str, namespace: str, custom: Any = None, networking: Any = None
    ):
        self.core, self.batch, self.stack, self.namespace = core, batch, stack, namespace
        self.apis = {"core": core, "batch": batch, "custom": custom, "networking": networking}

    def raw(self, api: str, method: str, **kw: Any) -> Any:
        """Call `<api>.<method>(**kw)` and return the raw (streamable) response."""
        from kubernetes.client.exceptions import ApiException

        fn = getattr(self.apis[api], method)
        # Every request has a deadline (a hung API server must not hang the CLI); a followed
        # log may stay quiet for long, and its reader reattaches when the read times out.
        kw.setdefault(
            "_request_timeout",
            (CONNECT_TIMEOUT_S, FOLLOW_READ_TIMEOUT_S if kw.get("follow") else READ_TIMEOUT_S),
        )
        try:
            return fn(_preload_content=False, **kw)
        except ApiException as e:
            # A missing object is an answer for reads and deletes; for a create or a list it
            # means the namespace itself is missing: an error to report.
            if e.status == 404 and method.startswith(
                ("read_", "delete_", "patch_", "connect_", "get_namespaced_custom_object")
            ):
                raise NotFound(method) from None
            raise ClusterError(f"stack {self.stack}: {method} was refused: {_api_reason(e)}") from None
        except Exception as e:  # urllib3 / socket errors: the cluster is not reachable
            if type(e).__module__.startswith(("urllib3", "socket", "ssl")) or isinstance(e, OSError):
                raise ClusterError(
                    f"stack {self.stack}: cannot reach the cluster ({type(e).__name__})"
                ) from None
            raise

    def call(self, api: str, method: str, **kw: Any) -> dict:
        resp = self.raw(api, method, **kw)
        data = resp.data
        return json.loads(data) if data else {}

    def get(self, api: str, method: str, **kw: Any) -> dict | None:
        """Like call, but None when the object does not exist."""
        try:
            return self.call(api, method, **kw)
        except NotFound:
            return None


def _api_reason(e: Any) -> str:
    """The API server's own message (a Status object), never request headers or bodies."""
    try:
        status = json.loads(e.body)
        return f"{e.status} {status.get('reason', '')}: {status.get('message', '')}".strip()
    except (TypeError, ValueError):
        return f"{e.status} {e.reason}"


def connect(out: StackOutput) -> Cluster:
    """A client for the stack's cluster. Imports `kubernetes` (and boto3 where the stack's auth presigns a request) only now."""
    try:
        from kubernetes import client
    except ImportError:
        raise UserError(
            f"stack {out.stack}: the Kubernetes backend needs the `kubernetes` "
            "package; accepted: pip install 'alchemist[cluster]'"
        ) from None
    api = client.ApiClient(credentials(out))
    return Cluster(
        client.CoreV1Api(api),
        client.BatchV1Api(api),
        out.stack,
        out.namespace,
        custom=client.CustomObjectsApi(api),
        networking=client.NetworkingV1Api(api),
    )


Connector = Callable[[StackOutput], Cluster]
