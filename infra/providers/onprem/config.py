"""The on-prem provider's stack config: the `alchemist:onprem` section (k3s over SSH on a list of
hosts) and the checks across its keys."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from infra.config import NAMESPACE, ConfigModel, DnsLabel, Size, StackConfig, StackConfigError
from infra.providers.onprem.versions import K3S_VERSIONS, k3s_installer

SECTION = "onprem"


class OnpremHost(ConfigModel):
    """One machine k3s is installed on over SSH."""

    name: DnsLabel = Field(description="node name, a DNS label")
    address: str = Field(min_length=1, description="IP address or DNS name reachable over SSH")
    role: Literal["server", "agent"] = Field(description="'server' or 'agent'")
    gpus: Size = Field(0, description="GPUs on this host; > 0 makes it a GPU agent")
    host_key: str | None = Field(
        None,
        pattern=r"^(ssh-ed25519|ecdsa-sha2-nistp(256|384|521)|ssh-rsa) [A-Za-z0-9+/]+={0,3}$",
        description="the host's public SSH key, such as 'ssh-ed25519 AAAA...' (ssh-keyscan -t ed25519 HOST)",
    )


class OnpremConfig(ConfigModel):
    """k3s over SSH on a list of hosts; GPU hosts join as agents with the NVIDIA runtime."""

    ssh_user: str = Field(min_length=1, description="the SSH user (needs passwordless sudo)")
    ssh_port: Annotated[int, Field(ge=1, le=65535)] = 22
    hosts: list[OnpremHost] = Field(min_length=1, description="a list of {name, address, role, gpus}")
    api_address: str | None = Field(None, description="address clients use for the API server")
    gpu_driver: Literal["host", "operator"] = Field(
        "host", description="'host' (driver preinstalled) or 'operator' (GPU Operator installs it)"
    )
    k3s_installer_sha256: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{64}$",
        alias="k3sInstallerSha256",
        description="the sha256 of k3s's install.sh at the pinned release, 64 lowercase hex digits",
    )


def onprem_config(cfg: StackConfig) -> OnpremConfig:
    """The stack's `alchemist:onprem` section (config.parse has refused a stack of this provider without one)."""
    section = cfg.section
    assert isinstance(section, OnpremConfig), "provider onprem without an onprem section"
    return section


def check(cfg: StackConfig) -> None:
    """The installer the deployer reviewed, a server among the hosts, each host's own name, address and key."""
    if not isinstance(cfg.section, OnpremConfig):
        return
    onprem = cfg.section
    if onprem.k3s_installer_sha256 is None:
        # The deployer states which installer they read; a shipped stack cannot say it for them.
        url = k3s_installer(K3S_VERSIONS[cfg.kubernetes_version])
        raise StackConfigError(f"{NAMESPACE}:{SECTION}.k3sInstallerSha256", None,
                               f"the sha256 of the k3s installer you reviewed, as `curl -sfL {url} | sha256sum` "
                               f"prints it, set with `pulumi config set --path '{NAMESPACE}:{SECTION}.k3sInstallerSha256' "
                               "<digest>`", missing=True)  # fmt: skip
    key = f"{NAMESPACE}:{SECTION}.hosts"
    if not any(h.role == "server" for h in onprem.hosts):
        raise StackConfigError(key, [h.name for h in onprem.hosts], "at least one host with role 'server'")
    seen: set[str] = set()
    for i, h in enumerate(onprem.hosts):
        if h.gpus and h.role != "agent":
            raise StackConfigError(f"{key}[{i}].role", h.role, "'agent' for a GPU host (gpus > 0)")
        if h.name in seen or h.address in seen:
            raise StackConfigError(f"{key}[{i}]", h.name, "a name and address no other host has")
        if h.host_key is None:
            # Without it the first connection trusts whoever answers, and gets the k3s token.
            raise StackConfigError(f"{key}[{i}].hostKey", None,
                                   "the host's public SSH key, such as the line `ssh-keyscan -t ed25519 "
                                   f"{h.address}` prints after the address", missing=True)  # fmt: skip
        seen.update((h.name, h.address))
