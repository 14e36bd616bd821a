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
    "gpu-operator": ChartPin("gpu-operator", "v25.3.2", "https://helm.ngc.nvidia.com/nvidia"),
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
    "aws-fsx-csi-driver": ChartPin(
        "aws-fsx-csi-driver", "1.7.0", "https://kubernetes-sigs.github.io/aws-fsx-csi-driver"
    ),
    "cluster-autoscaler": ChartPin(
        "cluster-autoscaler", "9.46.6", "https://kubernetes.github.io/autoscaler"
    ),
}

# Dashboards in monitoring/ are generated with grafana-foundation-sdk for Grafana 11.6, so
# kube-prometheus-stack's Grafana is pinned to that minor instead of the chart's default.
GRAFANA_IMAGE_TAG = "11.6.3"

# Kubernetes minors every provider and kubernetes-validate support, with the build each
# provider installs for them.
KUBERNETES_VERSIONS = ("1.30", "1.31", "1.32", "1.33")
KIND_VERSION = "v0.29.0"
KIND_NODE_IMAGES = {
    "1.30": "kindest/node:v1.30.13",
    "1.31": "kindest/node:v1.31.9",
    "1.32": "kindest/node:v1.32.5",
    "1.33": "kindest/node:v1.33.1",
}
K3S_VERSIONS = {
    "1.30": "v1.30.13+k3s1",
    "1.31": "v1.31.9+k3s1",
    "1.32": "v1.32.5+k3s1",
    "1.33": "v1.33.1+k3s1",
}
NVIDIA_CONTAINER_TOOLKIT_VERSION = "1.17.8-1"

# The registry kind pulls from on a laptop (the documented kind local-registry recipe).
LOCAL_REGISTRY_IMAGE = "registry:2.8.3"

# Base image of the training and interactive images (a build argument; override to use a
# CUDA base): torch's CUDA wheels bring their own CUDA libraries, so a slim Python suffices.
PYTHON_BASE_IMAGE = "python:3.11-slim-bookworm"
