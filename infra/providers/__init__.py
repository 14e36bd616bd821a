"""Providers: what each `alchemist:provider` builds and hands the rest of the program.

A provider is one object of a `Provider` subclass. The shipped ones are the packages of this
package, each defining `PROVIDER` in its `__init__.py` (found by package name) and holding its
own pieces (cluster component, backends) beside it; another is added with `register`.
The program asks the provider for the cluster's facts and for its own pieces of the images,
shared file system, object store and the jobs' credential; it never branches on the name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infra.providers.registry import ProviderRules, names, register, rules

if TYPE_CHECKING:
    from infra.cluster_facts import ClusterFacts
    from infra.config import StackConfig
    from infra.object_store import ObjectStoreBackend
    from infra.object_store_network import StoreEgress
    from infra.render_mocks import RenderMocks
    from infra.shared_fs import SharedFsBackend


__all__ = ["Provider", "get", "names", "register"]


class Provider(ProviderRules):
    """One kind of stack. The class attributes (`ProviderRules`) are what the stack config may
    hold with it; the methods build its pieces."""

    def cluster(self, stack: str, cfg: StackConfig) -> ClusterFacts:
        """Create the cluster component (named "cluster") and return its facts."""
        raise NotImplementedError

    def shared_fs_backend(self, facts: ClusterFacts) -> SharedFsBackend | None:
        """Its own file systems (the sharedFs kinds beyond nfs and hostpath), if it has any."""
        return None

    def object_store_backend(self, facts: ClusterFacts) -> ObjectStoreBackend | None:
        """Its own object store, if it creates one (else the config's S3-compatible service, if any)."""
        return None

    def object_store_network(self, cfg: StackConfig, facts: ClusterFacts) -> StoreEgress | None:
        """Create what puts its object store on known addresses and return them; None: the
        config's S3-compatible endpoint, if any (infra/object_store_network.py store_egress)."""
        return None

    def render_mocks(self) -> RenderMocks | None:
        """Its cloud's stand-in under infra/render.py's mocks, if its pieces need one."""
        return None

    def network_fabric(self, facts: ClusterFacts) -> dict[str, Any] | None:
        """The stack output's `gpu.fabric` (alchemist_jobs.contract.Fabric): the GPU nodes'
        fast network for NCCL, described in the provider's own words; None: they have none."""
        return None

    def jobs_access(
        self, cfg: StackConfig, facts: ClusterFacts, platform: Any, on_cluster: Any
    ) -> dict[str, Any]:
        """The stack output's fields jobs reach the cluster with (`kubeconfig` is made a secret):
        the default team's, and under `team_kubeconfigs` each team's own where it has one."""
        access: dict[str, Any] = {"kubeconfig": facts.kubeconfig}
        if facts.team_kubeconfigs:
            access["team_kubeconfigs"] = dict(facts.team_kubeconfigs)
        return access


def get(name: str) -> Provider:
    """The provider called `name` (a KeyError for an unknown one)."""
    provider = rules(name)
    assert isinstance(provider, Provider), f"{name}: a Provider, not only its rules"
    return provider
