"""Every pinned version the program deploys: Helm charts, Kubernetes builds, images, tools."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True)
class ChartPin:
    """A Helm chart at an exact version. `repo` is None for OCI charts (the URL is the chart)."""

    chart: str
    version: str
    repo: str | None = None


# Changing a version here changes every stack at once; `alchemist stack diff` stays quiet
# because all stacks read the same pin.
CHARTS: dict[str, ChartPin] = {
    # Tag v25.10.1 of NVIDIA/gpu-operator (commit 8460187), the newest v25.10 release. NVIDIA
    # validated it on Kubernetes 1.30 to 1.35, so on every minor of KUBERNETES_VERSIONS
    # ("Kubernetes v1.35 support was added in v25.10.1 and later": gpu-operator/platform-support.rst
    # of NVIDIA/cloud-native-docs, vendored in tests/fixtures/gpu_operator/platform-support.json);
    # v25.3.2 was validated on 1.29 to 1.33 only. v25.10 is also the one major NVIDIA supports
    # upgrading v25.3 to ("Upgrades are only supported within a major release or to the next major
    # release", gpu-operator/life-cycle-policy.rst). NVIDIA ended 25.10.x support when 26.7 came
    # out: the next step from here is v26.3.x (validated on 1.32 to 1.36); v26.7.0 is validated
    # from 1.33 on most operating systems, and KUBERNETES_VERSIONS still offers 1.32.
    "gpu-operator": ChartPin("gpu-operator", "v25.10.1", "https://helm.ngc.nvidia.com/nvidia"),
    "kueue": ChartPin("oci://registry.k8s.io/kueue/charts/kueue", "0.13.4"),
    # JobSet recreates a job's whole pod group on any pod failure (its failurePolicy); Kueue
    # admits JobSets through its jobset integration.
    "jobset": ChartPin("oci://registry.k8s.io/jobset/charts/jobset", "0.12.0"),
    "kube-prometheus-stack": ChartPin(
        "kube-prometheus-stack", "75.15.1", "https://prometheus-community.github.io/helm-charts"
    ),
    "csi-driver-nfs": ChartPin(
        "csi-driver-nfs",
        "v4.11.0",
        "https://raw.githubusercontent.com/kubernetes-csi/csi-driver-nfs/master/charts",
    ),
    # Installed with helm.v3.Release: the chart relies on Helm hooks, which helm.v4.Chart skips.
    "aws-efs-csi-driver": ChartPin(
        "aws-efs-csi-driver", "3.2.1", "https://kubernetes-sigs.github.io/aws-efs-csi-driver"
    ),
    # Read at tag helm-chart-aws-fsx-csi-driver-1.17.0 of kubernetes-sigs/aws-fsx-csi-driver
    # (appVersion 1.9.0); no template there is a Helm hook, so helm.v4.Chart installs all of it.
    "aws-fsx-csi-driver": ChartPin(
        "aws-fsx-csi-driver", "1.17.0", "https://kubernetes-sigs.github.io/aws-fsx-csi-driver"
    ),
}
# The cluster layer's other charts follow the cluster's Kubernetes minor or the EKS add-on
# they serve: the versions.py of that provider's package (cluster-autoscaler per minor, a device plugin).

# Dashboards in monitoring/ are generated with grafana-foundation-sdk for Grafana 11.6, so
# kube-prometheus-stack's Grafana is pinned to that minor instead of the chart's default.
GRAFANA_IMAGE_TAG = "11.6.3"

# Kubernetes minors every provider and kubernetes-validate support, with the build each
# provider installs for them. kind: the images kind v0.31.0 pre-built (its release notes list
# 1.31 to 1.35; 1.30 has none). k3s: releases of github.com/k3s-io/k3s (docs.k3s.io release
# notes, v1.34.X and v1.35.X). 1.31 is left out: EKS offers it until 2026-11-26 only (the end of
# its extended support, in that provider's versions.py), and k3s's last 1.31 release was in 2025-11.
KUBERNETES_VERSIONS = ("1.32", "1.33", "1.34", "1.35")
KIND_VERSION = "v0.31.0"
KIND_NODE_IMAGES = {
    "1.32": "kindest/node:v1.32.11",
    "1.33": "kindest/node:v1.33.7",
    "1.34": "kindest/node:v1.34.3",
    "1.35": "kindest/node:v1.35.0",
}
K3S_VERSIONS = {
    "1.32": "v1.32.5+k3s1",
    "1.33": "v1.33.1+k3s1",
    "1.34": "v1.34.3+k3s1",
    "1.35": "v1.35.0+k3s1",
}


def k3s_installer(version: str) -> str:
    """The install script of exactly this k3s release (not whatever get.k3s.io serves today)."""
    return f"https://raw.githubusercontent.com/k3s-io/k3s/{quote(version)}/install.sh"


NVIDIA_CONTAINER_TOOLKIT_VERSION = "1.17.8-1"

# The registry kind pulls from on a laptop (the documented kind local-registry recipe).
LOCAL_REGISTRY_IMAGE = "registry:2.8.3"

# Base image of the training and interactive images (a build argument; override to use a
# CUDA base): torch's CUDA wheels bring their own CUDA libraries, so a slim Python suffices.
PYTHON_BASE_IMAGE = "python:3.11-slim-bookworm"
