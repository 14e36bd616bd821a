"""What the on-prem provider pins: the k3s release per Kubernetes minor, its installer, the NVIDIA container toolkit."""

from __future__ import annotations

from urllib.parse import quote

# Releases of github.com/k3s-io/k3s (docs.k3s.io release notes, v1.34.X and v1.35.X) for the
# minors of infra/versions.py KUBERNETES_VERSIONS (k3s's last 1.31 release was in 2025-11).
K3S_VERSIONS = {
    "1.32": "v1.32.5+k3s1",
    "1.33": "v1.33.1+k3s1",
    "1.34": "v1.34.3+k3s1",
    "1.35": "v1.35.0+k3s1",
}


def k3s_installer(version: str) -> str:
    """The install script of exactly this k3s release (not whatever get.k3s.io serves today)."""
    return f"https://raw.githubusercontent.com/k3s-io/k3s/{quote(version)}/install.sh"


# The NVIDIA container toolkit the GPU hosts get (so k3s finds the nvidia runtime).
NVIDIA_CONTAINER_TOOLKIT_VERSION = "1.17.8-1"
