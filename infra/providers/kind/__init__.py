"""Provider `kind`: a kind cluster on the deployer's Docker with a local registry (infra/providers/kind/cluster.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infra.providers import Provider
from infra.providers.kind.config import KindConfig

if TYPE_CHECKING:
    from infra.cluster_facts import ClusterFacts
    from infra.config import StackConfig


class KindProvider(Provider):
    name = "kind"
    shared_fs_kinds = ("hostpath",)
    section = "kind"
    config_model = KindConfig
    section_required = False  # every `alchemist:kind` key has a default
    own_registry = "kind's local registry"

    def describe(self, config: dict[str, Any]) -> str:
        return "kind on the local Docker"

    def cluster(self, stack: str, cfg: StackConfig) -> ClusterFacts:
        from infra.providers.kind.cluster import KindCluster, KindClusterArgs

        return KindCluster("cluster", KindClusterArgs(stack=stack, cfg=cfg)).facts


PROVIDER = KindProvider()
