"""Provider `existing`: a cluster someone else runs, reached with the deployer's kubeconfig."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infra.providers import Provider
from infra.providers.existing.config import ExistingConfig

if TYPE_CHECKING:
    from infra.cluster_facts import ClusterFacts
    from infra.config import StackConfig


class ExistingProvider(Provider):
    name = "existing"
    shared_fs_kinds = ("nfs",)
    reads_kubeconfig = True
    section = "existing"
    config_model = ExistingConfig

    def describe(self, config: dict[str, Any]) -> str:
        return "an existing cluster (kubeconfig secret)"

    def cluster(self, stack: str, cfg: StackConfig) -> ClusterFacts:
        from infra.providers.onprem.cluster import ExistingCluster, ExistingClusterArgs

        return ExistingCluster("cluster", ExistingClusterArgs(stack=stack, cfg=cfg)).facts

    def jobs_access(
        self, cfg: StackConfig, facts: ClusterFacts, platform: Any, on_cluster: Any
    ) -> dict[str, Any]:
        """Each team's own ServiceAccount token, never the deployer's kubeconfig."""
        import pulumi

        from infra.team_credential import TeamCredential, TeamCredentialArgs, credential_name

        assert cfg.kubeconfig is not None  # checked by config.parse
        deployer = pulumi.Output.secret(cfg.kubeconfig.get_secret_value())
        own = {t.name: TeamCredential(credential_name(t.name, first=i == 0), TeamCredentialArgs(
            team=t.name, deployer_kubeconfig=deployer, depends_on=[platform.teams[t.name]]),
            opts=on_cluster).kubeconfig for i, t in enumerate(cfg.teams)}  # fmt: skip
        return {"kubeconfig": own[cfg.default_team.name], "team_kubeconfigs": own}


PROVIDER = ExistingProvider()
