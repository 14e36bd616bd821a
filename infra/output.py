"""The stack output `alchemist`: the one contract the job library reads (alchemist_jobs.contract.StackOutput)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from infra.cluster import GPU_RESOURCE, GPU_TOLERATIONS, ClusterFacts
from infra.config import StackConfig
from infra.labels import MOUNT_PATH, SCRAPE_LABELS, SHARED_PVC
from infra.object_store import team_prefix
from infra.providers import get

TEAM_KUBECONFIGS = "team_kubeconfigs"  # jobs_access's key: team -> its own kubeconfig (secret)


def build_output(stack: str, cfg: StackConfig, facts: ClusterFacts, images: Mapping[str, pulumi.Input[str]],
                 monitoring_urls: dict[str, str], pull_secret: str | None = None,
                 object_store: dict[str, Any] | None = None,
                 access: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """Everything a job needs to run on this stack; `access` is how jobs reach the cluster
    (the provider's jobs_access), its kubeconfigs only as secrets. The top-level namespace,
    queue, identity, prefix and kubeconfig are the default team's; `teams` has every team's."""
    access = dict(access or {})
    own = access.pop(TEAM_KUBECONFIGS, None) or {}
    team = cfg.default_team
    uid, gid = cfg.identity(team.name)
    fabric = get(cfg.provider).network_fabric(facts)  # the GPU nodes' network, in its words
    out: dict[str, Any] = {
        "stack": stack,
        "provider": cfg.provider,
        "namespace": team.name,
        "queue": team.name,  # the team's LocalQueue has the namespace's name
        # The PVC is the team's own subtree, owned by this identity; job pods run as it.
        "shared_fs": {
            "kind": cfg.shared_fs.kind,
            "pvc": SHARED_PVC,
            "mount_path": MOUNT_PATH,
            "uid": uid,
            "gid": gid,
        },
        "images": {
            "train": images["train"],
            "interactive": images["interactive"],
            **({"pull_secret": pull_secret} if pull_secret else {}),
        },
        "gpu": {
            "resource": GPU_RESOURCE,
            "node_selector": dict(facts.gpu_node_labels),
            "tolerations": [dict(t) for t in GPU_TOLERATIONS],
            "per_node": facts.gpus_per_node,
            **({"fabric": fabric} if fabric else {}),
        },
        "monitoring": {**monitoring_urls, "pod_monitor_labels": dict(SCRAPE_LABELS)},
    }
    for key, value in access.items():  # the jobs' own credential, never an admin's
        if value is not None:
            out[key] = pulumi.Output.secret(value) if key == "kubeconfig" else value
    if object_store is not None:
        out["object_store"] = dict(object_store)
    out["team"] = team.name
    out["teams"] = [team_entry(cfg, t.name, object_store is not None, own.get(t.name)) for t in cfg.teams]
    return out


def team_entry(
    cfg: StackConfig, team: str, has_store: bool, kubeconfig: pulumi.Input[str] | None
) -> dict[str, Any]:
    """One team as the contract's `Team`: its LocalQueue has its namespace's name."""
    uid, gid = cfg.identity(team)
    entry: dict[str, Any] = {"name": team, "namespace": team, "queue": team, "uid": uid, "gid": gid}
    if has_store:
        entry["object_store_prefix"] = team_prefix(team)
    if kubeconfig is not None:
        entry["kubeconfig"] = pulumi.Output.secret(kubeconfig)
    return entry
