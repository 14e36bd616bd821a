"""The providers' registry by name and the config rules each provider sets.

`infra/config.py` checks a stack config against these rules, so this module imports nothing
of the program's (the provider's methods, in `infra/providers/__init__.py`, take the parsed
config and the cluster's facts; reading the rules from there would make an import loop).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class DeployTimeValue:
    """A key of the provider's own section that only a stack's deployer can give (the network
    they deploy from, the installer they reviewed): a shipped stack leaves it out, `pulumi up`
    demands it, and a replica's check or a read-only comparison takes `stand_in` for it
    (infra/stack_tools.py)."""

    key: str  # in the provider's own section, `alchemist:<section>`
    stand_in: Any
    how: str  # the command its deployer sets it with
    needed: Callable[[dict[str, Any]], bool] = lambda section: True  # given the section


class ProviderRules:
    """What the stack config may hold with one provider: its class attributes."""

    name: str = ""
    shared_fs_kinds: tuple[str, ...] = ()  # the sharedFs kinds it can give every pod
    section_required: bool = True  # it needs its `alchemist:<section>` section
    reads_kubeconfig: bool = False  # alchemist:kubeconfig (the deployer's)
    reads_ssh_key: bool = False  # alchemist:sshPrivateKey
    own_registry: str | None = None  # where it pushes images it hosts itself; None: images.registry
    iam: bool = False  # team IAM principals; an object store it creates, reached through IAM
    # kube-prometheus-stack's control-plane components its clusters never expose (no monitors,
    # no `...Down` alerts for them: infra/monitoring.py)
    hidden_control_plane: tuple[str, ...] = ()
    deploy_time: tuple[DeployTimeValue, ...] = ()  # what only a stack's deployer gives
    # Its own section of the stack config, `alchemist:<section>`, and the pydantic model that
    # section is parsed with (infra/providers/<name>/config.py); none: it reads no section.
    section: str | None = None
    config_model: Any = None
    # The models of the sharedFs kinds it adds to nfs and hostpath (a `kind` Literal each)
    shared_fs_models: tuple[Any, ...] = ()
    # What a team's `principals` must match with it (a regular expression), and the line an
    # error shows for one that does not; None: it has no principals of its own (`iam`)
    principal_pattern: str | None = None
    principals_accepted: str = ""
    # The extended resource its GPU nodes' network-fabric devices are advertised as (a device
    # of a node a pod already holds, which Kueue leaves out of quotas: infra/queueing.py)
    fabric_resource: str | None = None

    def check_config(self, cfg: Any) -> None:
        """Its rules across its section's keys (and the rest of the parsed config) that the
        section's model cannot state alone: raises infra.config.StackConfigError."""

    def policy_checks(self) -> dict[str, tuple[Callable[[Any], list[str]], ...]]:
        """Its checks of infra/policies.py's policies over its own resource types, by policy name:
        each takes a `Resource` and returns the violations as sentences (standard library only:
        the policy pack's virtualenv has nothing else)."""
        return {}

    def describe(self, config: dict[str, Any]) -> str:
        """`alchemist stack list`'s WHERE AND WHAT of a stack of this provider, from its
        `alchemist:*` config as the stack file holds it (unchecked: a missing key reads `?`)."""
        return ""


_PACKAGE = "infra.providers"
_registered: dict[str, ProviderRules] = {}


def register(provider: ProviderRules) -> None:
    """Add a provider that is not a package of `infra/providers/`."""
    _registered[provider.name] = provider


def names() -> list[str]:
    """Every provider's name, sorted: the packages of `infra/providers/` and the registered ones."""
    here = [str(Path(__file__).parent)]
    shipped = {m.name for m in pkgutil.iter_modules(here) if m.ispkg and not m.name.startswith("_")}
    return sorted(shipped | set(_registered))


def rules(name: str) -> ProviderRules:
    """The provider called `name` (a KeyError for an unknown one)."""
    if name not in _registered:
        if name not in names():
            raise KeyError(name)
        provider = importlib.import_module(f"{_PACKAGE}.{name}").PROVIDER
        _registered[provider.name] = provider
    return _registered[name]
