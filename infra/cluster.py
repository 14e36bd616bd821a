"""The one place that picks the stack's cluster component; what it hands on is in cluster_facts."""

from __future__ import annotations

from infra.cluster_facts import (  # noqa: F401  (re-exported: the rest of the program imports them here)
    EFA_RESOURCE, GPU_NODE_LABELS, GPU_RESOURCE, GPU_TAINT, GPU_TOLERATIONS, KIND_SHARED_PATH,
    SYSTEM_NODE_LABELS, AwsNetwork, ClusterArgs, ClusterFacts, EksFacts, Registry)
from infra.config import StackConfig


def make_cluster(stack: str, cfg: StackConfig) -> ClusterFacts:
    """Create the stack's cluster component and return its facts."""
    if cfg.provider == "kind":
        from infra.cluster_kind import KindCluster, KindClusterArgs

        return KindCluster("cluster", KindClusterArgs(stack=stack, cfg=cfg)).facts
    if cfg.provider == "onprem":
        from infra.cluster_onprem import K3sCluster, K3sClusterArgs

        return K3sCluster("cluster", K3sClusterArgs(stack=stack, cfg=cfg)).facts
    if cfg.provider == "existing":
        from infra.cluster_onprem import ExistingCluster, ExistingClusterArgs

        return ExistingCluster("cluster", ExistingClusterArgs(stack=stack, cfg=cfg)).facts
    from infra.cluster_aws import EksCluster, EksClusterArgs

    return EksCluster("cluster", EksClusterArgs(stack=stack, cfg=cfg)).facts
