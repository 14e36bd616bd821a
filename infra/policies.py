"""Guard rails as plain functions over resources (type, name, inputs): used by the tests and by the policy pack.

Each policy's `check` takes one resource as the engine sees it (camelCase inputs) and returns
the violations it finds, as sentences. `infra/policy/` wraps the same functions as a Pulumi
policy pack for users with the CLI (`pulumi up --policy-pack infra/policy`). A policy about a
provider's own resources (its file systems' encryption, its nodes' metadata service, its
firewalls) is that provider's check (`Provider.policy_checks`, in its package); this module and
those checks import only the standard library, so the pack's own virtualenv needs nothing else.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from infra.providers.registry import names, rules

# Set on a resource (tag) only when the stack config says `allowOpenEndpoints: true`.
OPEN_ENDPOINTS_TAG = "alchemist.io/open-endpoints"
# Job pods carry this label (alchemist_jobs.contract.MANAGED_BY_LABEL; a test keeps them equal).
JOB_LABEL = ("app.kubernetes.io/managed-by", "alchemist")
TEAM_LABEL = "alchemist.io/team"
ALLOWED_POD_SECURITY = ("restricted", "baseline")
WORLD = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
GUARDED_PORTS = {22: "SSH", 443: "API", 6443: "API"}


@dataclass(frozen=True)
class Resource:
    """One resource as a policy sees it."""

    type: str
    name: str
    props: Mapping[str, Any]


@dataclass(frozen=True)
class Policy:
    name: str
    description: str
    check: Callable[[Resource], list[str]]


def get(obj: Any, *path: str, default: Any = None) -> Any:
    """The value at `path` in nested mappings, or `default`."""
    for key in path:
        if not isinstance(obj, Mapping) or key not in obj:
            return default
        obj = obj[key]
    return obj


def is_world(cidr: Any) -> bool:
    try:
        return ipaddress.ip_network(str(cidr), strict=False) in WORLD
    except ValueError:
        return False


def open_allowed(props: Mapping[str, Any]) -> bool:
    """The stack config allows this resource's endpoints open (its OPEN_ENDPOINTS_TAG)."""
    tags = props.get("tags") or {}
    return isinstance(tags, Mapping) and OPEN_ENDPOINTS_TAG in tags


# --- what each provider checks: its own resources' part of a policy -------------------------


def provider_checks(policy: str) -> list[Callable[[Resource], list[str]]]:
    """Every provider's checks of `policy` over its own resource types (`Provider.policy_checks`)."""
    return [c for name in names() for c in rules(name).policy_checks().get(policy, ())]


def _by_providers(policy: str) -> Callable[[Resource], list[str]]:
    def check(r: Resource) -> list[str]:
        return [message for c in provider_checks(policy) for message in c(r)]

    return check


check_storage_encrypted = _by_providers("storage-encrypted")
check_imdsv2_on_gpu_nodes = _by_providers("imdsv2-on-gpu-nodes")


def check_no_open_endpoints(r: Resource) -> list[str]:
    return [] if open_allowed(r.props) else _by_providers("no-open-endpoints")(r)


# --- Pod Security on team namespaces ------------------------------------------------------


def check_team_pod_security(r: Resource) -> list[str]:
    if r.type != "kubernetes:core/v1:Namespace":
        return []
    labels = get(r.props, "metadata", "labels") or {}
    if TEAM_LABEL not in labels:
        return []
    level = labels.get("pod-security.kubernetes.io/enforce")
    if level not in ALLOWED_POD_SECURITY:
        name = get(r.props, "metadata", "name", default=r.name)
        return [f"{name}: team namespace must enforce Pod Security restricted or baseline, not {level!r}"]
    return []


# --- no privileged job pods ---------------------------------------------------------------

WORKLOAD_TYPES = {
    "kubernetes:core/v1:Pod": ("spec",),
    "kubernetes:batch/v1:Job": ("spec", "template"),
    "kubernetes:batch/v1:CronJob": ("spec", "jobTemplate", "spec", "template"),
    "kubernetes:apps/v1:Deployment": ("spec", "template"),
    "kubernetes:apps/v1:StatefulSet": ("spec", "template"),
    "kubernetes:apps/v1:DaemonSet": ("spec", "template"),
    "kubernetes:apps/v1:ReplicaSet": ("spec", "template"),
}


def check_no_privileged_job_pods(r: Resource) -> list[str]:
    path = WORKLOAD_TYPES.get(r.type)
    if path is None:
        return []
    template = get(r.props, *path) if r.type != "kubernetes:core/v1:Pod" else r.props
    labels = get(template, "metadata", "labels") or get(r.props, "metadata", "labels") or {}
    if labels.get(JOB_LABEL[0]) != JOB_LABEL[1]:
        return []
    spec = get(template, "spec") or {}
    bad = [
        c.get("name", "?")
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        if get(c, "securityContext", "privileged") is True
    ]
    return [f"{r.name}: job pod containers {', '.join(bad)} must not be privileged"] if bad else []


POLICIES: tuple[Policy, ...] = (
    Policy("storage-encrypted", "Storage is encrypted at rest (file systems, volumes, registries, storage classes).",
           check_storage_encrypted),
    Policy("imdsv2-on-gpu-nodes", "GPU nodes answer instance-metadata requests only with a session token (v2).",
           check_imdsv2_on_gpu_nodes),
    Policy("no-open-endpoints", "No SSH or API endpoint is open to 0.0.0.0/0 unless the stack config allows it.",
           check_no_open_endpoints),
    Policy("team-pod-security", "Every team namespace enforces restricted or baseline Pod Security.",
           check_team_pod_security),
    Policy("no-privileged-job-pods", "Job pods (managed-by: alchemist) never run privileged containers.",
           check_no_privileged_job_pods),
)  # fmt: skip


def violations(resources: Iterable[Resource], policies: Iterable[Policy] = POLICIES) -> list[tuple[str, str]]:
    """(policy name, message) for every violation of every policy over the resources."""
    policies = list(policies)
    return [(p.name, msg) for r in resources for p in policies for msg in p.check(r)]
