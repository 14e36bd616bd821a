"""The hook through which job pods get datasets on cluster stacks: what to add to a pod, and a local source uploaded first.

The Kubernetes backend applies `pod_patch(spec, stack)` to each job pod (it owns the pod
template; this module only says what datasets need):

    env            ALCHEMIST_DATA_CACHE (where the cache volume is mounted), and the
                   object store's AWS_ENDPOINT_URL / AWS_REGION for boto3
    env_from       the Secret OBJECT_STORE_SECRET (optional) where the store takes keys
    volumes        the node cache volume `dataset-cache`
    volume_mounts  it, at CACHE_MOUNT
    service_account  JOB_SERVICE_ACCOUNT where the stack has an object store (where the store is
                   the provider's own, its cloud identity is what lets the pod read the bucket)

The cache volume is a hostPath (`host_path`, shared by every job on the node) where the
namespace's Pod Security admits one, else an emptyDir (shared by the pod's workers only):
Pod Security `baseline` and `restricted` refuse hostPath volumes.

Before rendering, `upload_local_source` turns a local-directory `data.source` into the
object-store URI it was pushed to (content-addressed under `runs-data/`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alchemist_jobs import environment as E
from alchemist_jobs.contract import JOB_SERVICE_ACCOUNT, OBJECT_STORE_SECRET
from alchemist_jobs.data import push, s3
from alchemist_jobs.data.source import S3Uri
from alchemist_jobs.data.stage import listing_identity, local_listing
from alchemist_jobs.errors import UserError

if TYPE_CHECKING:
    from alchemist_jobs.contract import StackOutput
    from alchemist_jobs.spec import JobSpec

CACHE_VOLUME = "dataset-cache"
CACHE_MOUNT = "/alchemist-cache"
HOST_CACHE_DIR = "/var/cache/alchemist/datasets"  # on GPU nodes, where host_path is admitted
RUN_UPLOADS = "runs-data/"


def pod_patch(
    spec: JobSpec, stack: StackOutput, host_path: str | None = None, cache_limit: str | None = None
) -> dict[str, Any]:
    """What a job pod needs for `spec.data` on `stack` (empty lists where it needs nothing)."""
    patch: dict[str, Any] = {
        "env": [],
        "env_from": [],
        "volumes": [],
        "volume_mounts": [],
        "service_account": None,
    }
    store = stack.object_store
    if store is not None:
        patch["service_account"] = JOB_SERVICE_ACCOUNT
        patch["env"].append({"name": "AWS_REGION", "value": store.region})
        if store.endpoint is not None:
            patch["env"].append({"name": "AWS_ENDPOINT_URL", "value": store.endpoint})
            patch["env_from"].append({"secretRef": {"name": OBJECT_STORE_SECRET, "optional": True}})
    if spec.data.source is None or spec.data.cache != "node":
        return patch  # `shared` and `none` stage on the shared file system
    volume: dict[str, Any] = {"name": CACHE_VOLUME}
    if host_path is not None:
        volume["hostPath"] = {"path": host_path, "type": "DirectoryOrCreate"}
    else:
        volume["emptyDir"] = {"sizeLimit": cache_limit} if cache_limit else {}
    patch["volumes"].append(volume)
    patch["volume_mounts"].append({"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT})
    patch["env"].append({"name": E.DATA_CACHE.name, "value": CACHE_MOUNT})
    return patch


def plan_local_source(spec: JobSpec, stack: StackOutput) -> tuple[JobSpec, tuple[Path, Any] | None]:
    """Pure: the spec pointing where a local-directory `data.source` will be pushed (content-
    addressed under `runs-data/`), and (directory, URI) to push at submit; the spec unchanged
    and None when the source is not a local directory."""
    source = spec.data.source
    if source is None or source.startswith("s3://"):
        return spec, None
    if stack.object_store is None:
        raise UserError(
            f"data.source: {source!r} is a local directory, and stack {stack.stack} "
            "has no object store to upload it to; accepted: s3://BUCKET/PREFIX, data.path "
            "on the shared file system, or a stack with `objectStore` (docs/datasets.md)"
        )

    root = Path(source)
    identity = listing_identity(root, local_listing(root))  # by content, not names and times
    digest = hashlib.sha256(identity.encode()).hexdigest()[:32]
    # under the team's prefix: the team's own identity reaches no other key (contract ObjectStore.prefix)
    uri = S3Uri(stack.object_store.bucket, f"{stack.object_store.prefix}{RUN_UPLOADS}{digest}/")
    resolved = spec.model_copy(deep=True)
    resolved.data.source = str(uri)
    return resolved, (root, uri)


def push_planned(stack: StackOutput, todo: tuple[Path, Any]) -> None:
    """Send what plan_local_source planned (resumable: a resubmit sends what is missing)."""
    push.push(s3.client(stack.object_store), *todo)


def upload_local_source(spec: JobSpec, stack: StackOutput) -> JobSpec:
    """The spec with a local-directory `data.source` pushed to the stack's object store and
    replaced by its URI; unchanged when the source is not a local directory."""
    resolved, todo = plan_local_source(spec, stack)
    if todo is not None:
        push_planned(stack, todo)
    return resolved
