"""What the AWS provider pins: its file systems' CSI driver charts, and per Kubernetes minor the EKS cluster's cluster-autoscaler chart, the EFA device plugin, and EKS's support dates.

The cluster autoscaler supports only the Kubernetes minor it was built for ("We recommend using
Cluster Autoscaler with the Kubernetes control plane version for which it was meant",
kubernetes/autoscaler cluster-autoscaler/README.md), so its chart follows the cluster's
minor. Each chart version below is the newest whose `appVersion` is that minor, read from
`charts/cluster-autoscaler/Chart.yaml` at the tag `cluster-autoscaler-chart-<version>` of
https://github.com/kubernetes/autoscaler (Apache-2.0).
"""

from __future__ import annotations

from infra.versions import ChartPin

# The CSI drivers of the shared file systems this provider adds (infra/providers/aws/shared_fs.py).
# Installed with helm.v3.Release: the chart relies on Helm hooks, which helm.v4.Chart skips.
EFS_CSI_CHART = ChartPin(
    "aws-efs-csi-driver", "3.2.1", "https://kubernetes-sigs.github.io/aws-efs-csi-driver"
)
# Read at tag helm-chart-aws-fsx-csi-driver-1.17.0 of kubernetes-sigs/aws-fsx-csi-driver
# (appVersion 1.9.0); no template there is a Helm hook, so helm.v4.Chart installs all of it.
FSX_CSI_CHART = ChartPin(
    "aws-fsx-csi-driver", "1.17.0", "https://kubernetes-sigs.github.io/aws-fsx-csi-driver"
)
# The charts above by key (infra/versions.py CHARTS holds the charts every stack installs).
CHARTS: dict[str, ChartPin] = {"aws-efs-csi-driver": EFS_CSI_CHART, "aws-fsx-csi-driver": FSX_CSI_CHART}

AUTOSCALER_REPO = "https://kubernetes.github.io/autoscaler"
# Kubernetes minor -> (chart version, the chart's appVersion)
AUTOSCALER_CHARTS: dict[str, tuple[str, str]] = {
    "1.30": ("9.37.0", "1.30.0"),
    "1.31": ("9.44.0", "1.31.0"),
    "1.32": ("9.46.6", "1.32.0"),
    "1.33": ("9.51.0", "1.33.0"),
    # from 9.52.0 the chart lives at cluster-autoscaler/charts/cluster-autoscaler/Chart.yaml
    "1.34": ("9.53.0", "1.34.2"),
    "1.35": ("9.59.0", "1.35.0"),
}


def autoscaler_chart(kubernetes_minor: str) -> ChartPin:
    """The cluster-autoscaler chart built for this Kubernetes minor."""
    version, _app = AUTOSCALER_CHARTS[kubernetes_minor]
    return ChartPin("cluster-autoscaler", version, AUTOSCALER_REPO)


# The EFA device plugin (advertises `vpc.amazonaws.com/efa` on EFA nodes), from aws/eks-charts
# stable/aws-efa-k8s-device-plugin (Apache-2.0), Chart.yaml at commit bfe91c4: version v0.5.30,
# appVersion v0.5.20. Its one template is a DaemonSet (no Helm hooks: helm.v4.Chart is enough);
# its values' supportedInstanceLabels restrict it to EFA instance types.
EFA_DEVICE_PLUGIN_CHART = ChartPin("aws-efa-k8s-device-plugin", "v0.5.30", "https://aws.github.io/eks-charts")

# End of EKS standard support per Kubernetes minor (why infra/versions.py KUBERNETES_VERSIONS
# leaves 1.31 out: EKS offers it until 2026-11-26 only, the end of its extended support) (AWS EKS user guide, "Understand the
# Kubernetes version lifecycle on EKS", release calendar, read 2026-12-01): after it a cluster
# runs on paid extended support ($0.60 instead of $0.10 per cluster-hour) for 12 months,
# then is upgraded by AWS.
EKS_STANDARD_SUPPORT_END = {
    "1.30": "2025-07-23",
    "1.31": "2025-11-26",
    "1.32": "2026-03-23",
    "1.33": "2026-07-29",
    "1.34": "2026-12-02",
    "1.35": "2027-03-27",
}


def eks_extended_support_end(kubernetes_minor: str) -> str:
    """The day EKS stops offering this minor: extended support lasts "the next 12 months" after
    standard support (same user guide page); then no cluster of it is created, old ones are upgraded."""
    year, month_day = EKS_STANDARD_SUPPORT_END[kubernetes_minor].split("-", 1)
    return f"{int(year) + 1}-{month_day}"


def eks_support_warning(kubernetes_minor: str, today: str, supported: tuple[str, ...]) -> str | None:
    """A line for `pulumi up` when this minor is past EKS standard support on `today` (ISO date)."""
    end = EKS_STANDARD_SUPPORT_END.get(kubernetes_minor)
    if end is None or today <= end:
        return None
    current = [m for m in supported if EKS_STANDARD_SUPPORT_END.get(m, "9999") > today]
    advice = (f"choose {' or '.join(current)} (alchemist:kubernetesVersion)" if current else
              "no minor the program supports (infra/versions.py KUBERNETES_VERSIONS) is in standard support")  # fmt: skip
    return f"EKS {kubernetes_minor}: standard support ended {end}; the cluster runs on paid extended support; {advice}."
