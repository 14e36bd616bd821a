"""How two stacks' platforms differ, beyond the keys documented here as meant to differ.

Works on two renders (infra/render.py output). The platform and monitoring layers are every
resource under the `Platform` and `Monitoring` components, plus the job-facing part of the
stack output `alchemist`; each is compared input by input.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

LAYERS = ("alchemist:infra:Platform", "alchemist:infra:Monitoring")
OUTPUT_KEY = ("stack output", "alchemist")


@dataclass(frozen=True)
class Allowed:
    """A key that may differ between stacks, and why."""

    type: str  # resource type, or "stack output"
    name: str  # resource name pattern (`*` matches anything)
    path: str  # input path pattern (`*` matches anything)
    reason: str


# The documented provider-specific keys. Everything else in the platform and monitoring
# layers must be identical on every stack.
ALLOWED: tuple[Allowed, ...] = (
    Allowed("kubernetes:helm.sh/v4:Chart", "platform-gpu-operator", "values.driver.enabled",
            "a provider's node image or hosts bring the driver; elsewhere the operator installs it"),
    Allowed("kubernetes:helm.sh/v4:Chart", "platform-gpu-operator", "values.toolkit.enabled",
            "the container runtime is configured by the AMI or at cluster creation, or by the operator"),
    Allowed("kubernetes:kueue.x-k8s.io/v1beta1:ClusterQueue", "*", "spec.resourceGroups[*].flavors[*].resources[*].nominalQuota",
            "team quotas are sized to each stack's nodes"),
    Allowed("kubernetes:core/v1:ResourceQuota", "*", "spec.hard*", "team quotas are sized to each stack's nodes"),
    Allowed("kubernetes:apps/v1:StatefulSet", "monitoring-tensorboard-*", "spec.template.spec.containers[*].image",
            "the same image, pushed to each stack's own registry"),
    Allowed("kubernetes:networking.k8s.io/v1:NetworkPolicy", "platform-team-*-netpol-object-store", "*",
            "only where the stack has an object store, opening its addresses and port (a provider's own store: the endpoints it puts it behind)"),
    *(Allowed("kubernetes:helm.sh/v4:Chart", "monitoring-kube-prometheus-stack",
              f"values.{component}.enabled",
              "monitors only of the control-plane components the provider exposes (a managed "
              "control plane keeps etcd, the scheduler and the controller manager out of reach, or "
              "one process runs them, kube-proxy "
              "too): each provider's hidden_control_plane (infra/providers/registry.py)")
      for component in ("kubeEtcd", "kubeScheduler", "kubeControllerManager", "kubeProxy")),
    Allowed(*OUTPUT_KEY, "stack", "each stack's name"),
    Allowed(*OUTPUT_KEY, "provider", "the stack's provider (infra/providers/)"),
    Allowed(*OUTPUT_KEY, "kubeconfig", "each cluster's credentials"),
    Allowed(*OUTPUT_KEY, "teams[*].kubeconfig", "each team's own credential, where the provider gives one"),
    Allowed(*OUTPUT_KEY, "teams[*].object_store_prefix", "each team's part of the object store, where there is one"),
    Allowed(*OUTPUT_KEY, "auth*", "how jobs reach each cluster: its name, region, address and CA"),
    Allowed(*OUTPUT_KEY, "shared_fs.kind", "a provider's own file system, NFS or hostPath behind the same PVC and path"),
    Allowed(*OUTPUT_KEY, "images*", "image references in each stack's registry"),
    Allowed(*OUTPUT_KEY, "gpu.per_node", "GPUs per node of each stack's hardware"),
    Allowed(*OUTPUT_KEY, "object_store*", "each stack's own bucket (a provider's own store), its S3-compatible endpoint, or none"),
    Allowed(*OUTPUT_KEY, "gpu.fabric*", "the network fabric of each stack's GPU nodes, where they have one"),
)  # fmt: skip


def _pattern(glob: str) -> re.Pattern[str]:
    return re.compile("^" + ".*".join(re.escape(part) for part in glob.split("*")) + "$")


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def flatten(value: Any, path: str = "") -> dict[str, Any]:
    """{"a": {"b": [1]}} -> {"a.b[0]": 1}; keys with dots or slashes are quoted."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{path}.{_key(k)}" if path else _key(k)))
        return out
    if isinstance(value, list) and value:
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{path}[{i}]"))
        return out
    return {path: value}


def in_layer(r: dict[str, Any], by_urn: dict[str, dict[str, Any]]) -> bool:
    """Whether the resource, or any component above it (Platform's own components), is a layer."""
    seen = set()
    at: dict[str, Any] | None = r
    while at is not None and at["urn"] not in seen:
        if at["type"] in LAYERS or at["types"][0] in LAYERS:
            return True
        seen.add(at["urn"])
        at = by_urn.get(at.get("parent") or "")
    return False


def layers(render: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(type, name) -> flattened inputs, for the platform and monitoring layers and the output."""
    by_urn = {r["urn"]: r for r in render["resources"]}
    out = {(r["type"], r["name"]): flatten(r["inputs"]) for r in render["resources"] if in_layer(r, by_urn)}
    out[OUTPUT_KEY] = flatten(render.get("outputs", {}).get("alchemist", {}))
    return out


@dataclass
class Difference:
    type: str
    name: str
    path: str  # "" when the whole resource is only on one side
    a: Any
    b: Any
    allowed_because: str | None = None

    def line(self, a_name: str, b_name: str) -> str:
        if not self.path:
            side = a_name if self.a is not None else b_name
            return f"{'-' if self.a is not None else '+'} {self.type} {self.name}: only in {side}"
        return f"~ {self.type} {self.name}: {self.path}: {json.dumps(self.a)} -> {json.dumps(self.b)}"


@dataclass
class Report:
    differences: list[Difference] = field(default_factory=list)  # not allowed
    allowed: list[Difference] = field(default_factory=list)


def _allowed(type_: str, name: str, path: str) -> str | None:
    for a in ALLOWED:
        if a.type == type_ and _pattern(a.name).match(name) and _pattern(a.path).match(path):
            return a.reason
    return None


def compare(a: dict[str, Any], b: dict[str, Any]) -> Report:
    """Every difference between two renders' platform layers, split into allowed and not."""
    la, lb = layers(a), layers(b)
    report = Report()
    for key in sorted(set(la) | set(lb)):
        type_, name = key
        if key not in la or key not in lb:  # a resource one stack has: allowed only with path "*"
            reason = _allowed(type_, name, "")
            diff = Difference(type_, name, "", la.get(key) and True, lb.get(key) and True, reason)
            (report.allowed if reason else report.differences).append(diff)
            continue
        fa, fb = la[key], lb[key]
        for path in sorted(set(fa) | set(fb)):
            va, vb = fa.get(path), fb.get(path)
            if va == vb:
                continue
            reason = _allowed(type_, name, path)
            diff = Difference(type_, name, path, va, vb, reason)
            (report.allowed if reason else report.differences).append(diff)
    return report
