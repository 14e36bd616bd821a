"""Every pinned version the program deploys: Helm charts, Kubernetes builds, images, tools."""

from __future__ import annotations

from dataclasses import dataclass


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
}
# A provider's own charts (its cluster's add-ons, its file systems' CSI drivers) and the
# Kubernetes builds it installs per minor are pinned in the versions.py of its package
# (infra/providers/<name>/versions.py): one place per pin.

# Dashboards in monitoring/ are generated with grafana-foundation-sdk for Grafana 11.6, so
# kube-prometheus-stack's Grafana is pinned to that minor instead of the chart's default.
GRAFANA_IMAGE_TAG = "11.6.3"

# Kubernetes minors every provider and kubernetes-validate support. Each provider's versions.py
# names the build it installs for each (a node image, a release) and where it found it; a minor
# is left out here when a provider no longer offers it for long or has no current build of it
# (1.31: see the providers' versions.py).
KUBERNETES_VERSIONS = ("1.32", "1.33", "1.34", "1.35")

# Base image of the training and interactive images (a build argument; override to use a
# CUDA base): torch's CUDA wheels bring their own CUDA libraries, so a slim Python suffices.
PYTHON_BASE_IMAGE = "python:3.11-slim-bookworm"
