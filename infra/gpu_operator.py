"""The NVIDIA GPU Operator: device plugin, DCGM exporter, and (where the nodes lack them) driver and container toolkit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from infra.cluster import GPU_TOLERATIONS
from infra.labels import GPU_OPERATOR_NAMESPACE, PROMETHEUS_SELECTOR
from infra.versions import CHARTS


def gpu_operator_values(driver: bool, toolkit: bool) -> dict[str, Any]:
    """GPU Operator values: only `driver.enabled` and `toolkit.enabled` vary between stacks.

    Sources, at the pinned v25.10.1: the chart (deployments/gpu-operator of NVIDIA/gpu-operator),
    the operator's code (controllers/object_controls.go) and NVIDIA's release notes
    (gpu-operator/release-notes.rst of NVIDIA/cloud-native-docs).
    """
    return {
        # helm.v4.Chart skips Helm hooks (pulumi-kubernetes#3284); the chart's pre-upgrade hook
        # (templates/upgrade_crd.yaml, on by default) is off, and Pulumi applies the CRDs that
        # hook would apply (ClusterPolicy, NVIDIADriver, NFD's) from the chart's crds/
        # directories itself on every update.
        "operator": {"upgradeCRD": False},
        # CDI stays off, as under v25.3 (its default there). v25.10.0 turned it on by default
        # (release notes 25.10.0): the device plugin then hands GPUs to the container runtime as
        # CDI devices (DEVICE_LIST_STRATEGY "cdi-annotations,cdi-cri": transformDevicePluginCtrForCDI),
        # relying on CDI support in the node's runtime, which the operator configures only where
        # it manages the toolkit (transformToolkitCtrForCDI). Where a provider says the toolkit is
        # the node's (ClusterFacts.toolkit_by_operator false), its GPU nodes run containerd with
        # `nvidia` as the default runtime (each provider's cluster module says how: its node image,
        # or the runtime it installs). With CDI off the device plugin keeps its `envvar` strategy
        # (assets/state-device-plugin/0500_daemonset.yaml) and that runtime injects the GPUs
        # named in NVIDIA_VISIBLE_DEVICES, the path those nodes are set up for; an
        # operator-managed toolkit (`existing` clusters) keeps `nvidia` as the default runtime,
        # as under v25.3.
        "cdi": {"enabled": False},
        # The driver, where the operator installs it (ClusterFacts.gpu_driver_by_operator), is the
        # release's default: 580.105.08 at v25.10.1 (was 570.148.08 at v25.3.2). Elsewhere the
        # node image or the host brings its own; the validator then checks the host's.
        # One ClusterPolicy drives every GPU node (the chart's driver.nvidiaDriverCRD.enabled,
        # for per-OS driver settings, stays false): a stack's GPU nodes share one OS and driver source.
        "driver": {"enabled": driver},
        "toolkit": {"enabled": toolkit},
        "daemonsets": {"tolerations": GPU_TOLERATIONS},
        # No custom metrics ConfigMap: the exporter's default collectors (dcp-metrics-included.csv
        # of the DCGM exporter the release deploys) hold every DCGM metric the dashboards read.
        "dcgmExporter": {
            "enabled": True,
            "serviceMonitor": {
                "enabled": True,
                "interval": "15s",
                "honorLabels": False,
                # kube-prometheus-stack's Prometheus selects ServiceMonitors by this label.
                "additionalLabels": dict(PROMETHEUS_SELECTOR),
            },
        },
    }


@dataclass
class GpuOperatorArgs:
    driver_by_operator: bool  # false where the AMI or the hosts bring the driver
    toolkit_by_operator: bool  # false where the container runtime is already configured
    depends_on: list[Any] = field(default_factory=list)  # its namespace, at least


class GpuOperator(pulumi.ComponentResource):
    """The GPU Operator chart in the `gpu-operator` namespace."""

    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("alchemist:infra:GpuOperator", name, None, opts)
        pin = CHARTS["gpu-operator"]
        self.chart = kubernetes.helm.v4.Chart(
            f"{name}-operator",
            chart=pin.chart,
            version=pin.version,
            repository_opts={"repo": pin.repo},
            namespace=GPU_OPERATOR_NAMESPACE,
            values=gpu_operator_values(args.driver_by_operator, args.toolkit_by_operator),
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.depends_on),
        )
        self.register_outputs({"chart": pin.version})
