"""Provider `onprem`: k3s installed over SSH on the deployer's hosts (infra/providers/onprem/cluster.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infra.providers import Provider
from infra.providers.onprem import config
from infra.providers.registry import DeployTimeValue

if TYPE_CHECKING:
    from infra.cluster_facts import ClusterFacts
    from infra.config import StackConfig


class OnpremProvider(Provider):
    name = "onprem"
    shared_fs_kinds = ("nfs",)
    reads_ssh_key = True
    section = config.SECTION
    config_model = config.OnpremConfig
    # k3s runs them (and kube-proxy) inside its own process, with no pods or ports the chart's
    # Services could select
    hidden_control_plane = ("kubeEtcd", "kubeScheduler", "kubeControllerManager", "kubeProxy")
    deploy_time = (
        DeployTimeValue(
            "k3sInstallerSha256",
            "0" * 64,
            "pulumi config set --path 'alchemist:onprem.k3sInstallerSha256' <sha256 of install.sh>",
        ),
    )

    def describe(self, config: dict[str, Any]) -> str:
        hosts = (config.get("alchemist:onprem") or {}).get("hosts") or []
        return f"{len(hosts)} hosts, {sum(int(h.get('gpus', 0)) for h in hosts)} GPUs"

    def check_config(self, cfg: StackConfig) -> None:
        config.check(cfg)

    def cluster(self, stack: str, cfg: StackConfig) -> ClusterFacts:
        from infra.providers.onprem.cluster import K3sCluster, K3sClusterArgs

        return K3sCluster("cluster", K3sClusterArgs(stack=stack, cfg=cfg)).facts


PROVIDER = OnpremProvider()
