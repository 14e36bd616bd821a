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
    """GPU Operator values: only `driver.enabled` and `toolkit.enabled` vary between stacks."""
    return {
        # helm.v4.Chart skips Helm hooks; the chart's pre-upgrade CRD hook is off, and Pulumi
        # applies the CRDs in the chart's crds/ directory itself on every update.
        "operator": {"upgradeCRD": False},
        "driver": {"enabled": driver},
        "toolkit": {"enabled": toolkit},
        "daemonsets": {"tolerations": GPU_TOLERATIONS},
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
