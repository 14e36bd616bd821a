"""The stack output `alchemist`: the one contract the job library reads (alchemist_jobs.contract.StackOutput)."""

from __future__ import annotations

from typing import Any

import pulumi

from infra.cluster import GPU_NODE_LABELS, GPU_RESOURCE, GPU_TOLERATIONS, ClusterFacts
from infra.config import StackConfig
from infra.labels import MOUNT_PATH, SCRAPE_LABELS, SHARED_PVC


def build_output(stack: str, cfg: StackConfig, facts: ClusterFacts, images: dict[str, pulumi.Input[str]],
                 monitoring_urls: dict[str, str], object_store: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """Everything a job needs to run on this stack; the kubeconfig only as a secret."""
    team = cfg.default_team
    out: dict[str, Any] = {
        "stack": stack,
        "provider": cfg.provider,
        "namespace": team.name,
        "queue": team.name,  # the team's LocalQueue has the namespace's name
        "shared_fs": {"kind": cfg.shared_fs.kind, "pvc": SHARED_PVC, "mount_path": MOUNT_PATH},
        "images": {"train": images["train"], "interactive": images["interactive"]},
        "gpu": {
            "resource": GPU_RESOURCE,
            "node_selector": dict(GPU_NODE_LABELS),
            "tolerations": [dict(t) for t in GPU_TOLERATIONS],
            "per_node": facts.gpus_per_node,
        },
        "monitoring": {**monitoring_urls, "pod_monitor_labels": dict(SCRAPE_LABELS)},
    }
    if facts.kubeconfig is not None:
        out["kubeconfig"] = pulumi.Output.secret(facts.kubeconfig)
    if facts.eks is not None:
        out["eks"] = dict(facts.eks)
    if object_store is not None:
        out["object_store"] = dict(object_store)
    return out
