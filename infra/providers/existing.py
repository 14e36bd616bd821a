"""Provider `existing`: a cluster someone else runs, reached with the deployer's kubeconfig."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infra.providers import Provider

if TYPE_CHECKING:
    from infra.cluster_facts import ClusterFacts
    from infra.config import StackConfig


class ExistingProvider(Provider):
    name = "existing"
    shared_fs_kinds = ("nfs",)
    reads_kubeconfig = True

    def cluster(self, stack: str, cfg: StackConfig) -> ClusterFacts:
        from infra.cluster_onprem import ExistingCluster, ExistingClusterArgs

        return ExistingCluster("cluster", ExistingClusterArgs(stack=stack, cfg=cfg)).facts

    def jobs_access(self, cfg: StackConfig, facts: ClusterFacts, platform: Any, on_cluster: Any) -> dict[str, Any]:
        """A team ServiceAccount's token, never the deployer's kubeconfig."""
        import pulumi

        from infra.team_credential import TeamCredential, TeamCredentialArgs

        assert cfg.kubeconfig is not None  # checked by config.parse
        team = cfg.default_team.name
        return {"kubeconfig": TeamCredential("team-credential", TeamCredentialArgs(
            team=team, deployer_kubeconfig=pulumi.Output.secret(cfg.kubeconfig.get_secret_value()),
            depends_on=[platform.teams[team]]), opts=on_cluster).kubeconfig}  # fmt: skip


PROVIDER = ExistingProvider()
