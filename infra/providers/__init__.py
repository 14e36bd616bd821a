"""Providers: what each `alchemist:provider` builds and hands the rest of the program.

A provider is one object of a `Provider` subclass. The shipped ones are the modules of this
package, each defining `PROVIDER` (found by module name); another is added with `register`.
The program asks the provider for the cluster's facts and for its own pieces of the images,
shared file system, object store and the jobs' credential; it never branches on the name.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.cluster_facts import ClusterFacts
    from infra.config import StackConfig
    from infra.object_store_network import StoreEgress


class Provider:
    """One kind of stack. The class attributes are what the stack config may hold with it."""

    name: str = ""
    shared_fs_kinds: tuple[str, ...] = ()  # the sharedFs kinds it can give every pod
    section_required: bool = True  # it needs an `alchemist:<name>` section
    reads_kubeconfig: bool = False  # alchemist:kubeconfig (the deployer's)
    reads_ssh_key: bool = False  # alchemist:sshPrivateKey
    own_registry: str | None = None  # where it pushes images it hosts itself; None: images.registry
    iam: bool = False  # team IAM principals; an object store it creates, reached through IAM

    def cluster(self, stack: str, cfg: StackConfig) -> ClusterFacts:
        """Create the cluster component (named "cluster") and return its facts."""
        raise NotImplementedError

    def images_args(self, facts: ClusterFacts) -> dict[str, Any]:
        """Extra ImagesArgs fields: what pushing to its registry needs."""
        return {}

    def shared_fs_args(self, facts: ClusterFacts) -> dict[str, Any]:
        """Extra SharedFileSystemArgs fields: what its file system backends need."""
        return {}

    def object_store_args(self, facts: ClusterFacts) -> dict[str, Any]:
        """Extra ObjectStoreArgs fields: what an object store it creates needs."""
        return {}

    def object_store_network(self, cfg: StackConfig, facts: ClusterFacts) -> StoreEgress | None:
        """Create what puts its object store on known addresses and return them; None: the
        config's S3-compatible endpoint, if any (infra/object_store_network.py store_egress)."""
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


_registered: dict[str, Provider] = {}


def register(provider: Provider) -> None:
    """Add a provider that is not a module of this package."""
    _registered[provider.name] = provider


def names() -> list[str]:
    """Every provider's name, sorted: this package's modules and the registered ones."""
    shipped = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
    return sorted(shipped | set(_registered))


def get(name: str) -> Provider:
    """The provider called `name` (a KeyError for an unknown one)."""
    if name not in _registered:
        if name not in names():
            raise KeyError(name)
        provider = importlib.import_module(f"{__name__}.{name}").PROVIDER
        _registered[provider.name] = provider
    return _registered[name]
