"""Whether a job's pods fit the nodes they would get, together: beside each other and beside the
DaemonSet pods the platform runs on every node, as the cluster autoscaler packs new nodes.

node_groups.why_not judges one pod against an empty node. A node is never empty: before a job
lands, each node runs a pod of every DaemonSet that tolerates it, and the job's own pods share
the nodes they land on. Modelled here:

- DaemonSet pods of the charts the platform installs, at their pinned versions, with the
  requests each chart gives its containers: our values over the chart's defaults (vendored in
  tests/fixtures/chart_values/, read at the release tag named in each file); a container
  whose limit is set and request is not requests its limit (API defaulting):
  * kube-prometheus-stack 75.15.1's node exporter (subchart prometheus-node-exporter 4.47.3:
    `resources: {}`, tolerations `NoSchedule: Exists`): every node, no requests;
  * GPU Operator v25.10.1's Node Feature Discovery worker (subchart v0.18.2; the parent's
    values.yaml gives `node-feature-discovery.worker.resources.requests` 5m / 64Mi, tolerations
    of the control plane's and `nvidia.com/gpu` taints): every node it tolerates;
  * the operator's operands on GPU nodes (device plugin, GPU feature discovery, DCGM exporter,
    validator, and the driver, the container toolkit and the MIG manager where enabled): their
    ClusterPolicy `<operand>.resources` from the chart's values, `{}` by default, and the
    DaemonSet manifests the operator fills in carry no resources of their own
    (NVIDIA/gpu-operator v25.10.1 assets/state-*/0500_daemonset.yaml,
    assets/gpu-feature-discovery/0500_daemonset.yaml,
    assets/state-dcgm-exporter/0800_daemonset.yaml, assets/state-mig-manager/0600_daemonset.yaml):
    each a pod, no requests; tolerations `daemonsets.tolerations`;
  * the shared file system's CSI node plugin: csi-driver-nfs v4.11.0 (`node.resources` of
    its nfs, liveness-probe and node-driver-registrar containers: 10m / 20Mi each, tolerations
    `Exists`), aws-efs-csi-driver 3.2.1 (`node.resources`, `sidecars.*.resources`: `{}`,
    tolerations `Exists`); aws-fsx-csi-driver 1.17.0's values are not vendored: its node pod
    counts as a pod with no requests.
  Not modelled: DaemonSets the provider runs itself (EKS's aws-node, kube-proxy; k3s's
  svclb), which the stack config does not show.
- Packing, as cluster-autoscaler-1.35.0 estimates a scale-up of a node group
  (cluster-autoscaler/estimator/decreasing_pod_orderer.go: pods ordered by
  cpu/allocatable + memory/allocatable of the template node, largest first;
  binpacking_estimator.go `Estimate`: each pod on a node already added for this estimate where
  it fits, else on a new node of the template with its DaemonSet pods) and as the scheduler
  then places pending pods on the nodes that run (any node where NodeResourcesFit passes).
  A node group whose CPU or memory the stack config does not give (on-prem, kind, `existing`)
  is judged on what it gives: pods, GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chart_data import chart_data, chart_name, flatten
from kueue_model import pod_requests, quantity, tolerates
from node_groups import NodeGroup, why_not

GPU = "nvidia.com/gpu"
# The GPU Operator's operands on a GPU node: (ClusterPolicy key, its chart values key that turns
# it on or None when always on). gpu-operator v25.10.1 deployments/gpu-operator/values.yaml.
GPU_OPERANDS = [("driver", "driver.enabled"), ("toolkit", "toolkit.enabled"),
                ("devicePlugin", "devicePlugin.enabled"), ("gfd", "gfd.enabled"),
                ("dcgmExporter", "dcgmExporter.enabled"), ("migManager", "migManager.enabled"),
                ("validator", None)]


@dataclass
class DaemonPod:
    """One DaemonSet's pod: its name, requests, tolerations, and whether it runs on GPU nodes only."""

    name: str
    requests: dict[str, Any]
    tolerations: list[dict[str, Any]]
    gpu_only: bool = False

    def runs_on(self, group: NodeGroup) -> bool:
        if self.gpu_only and not group.allocatable.get(GPU):
            return False
        return all(tolerates(self.tolerations, t) for t in group.taints
                   if t["effect"] in ("NoSchedule", "NoExecute"))


@dataclass
class Chart:
    """A chart the rendered platform installs: our values over its vendored defaults."""

    chart: str
    version: str
    values: dict[str, Any]

    def value(self, path: str) -> Any:
        ours, data = flatten(self.values), chart_data(self.chart, self.version)["values"]
        return ours.get(path, data.get(path))

    def requests(self, path: str) -> dict[str, Any]:
        """`<path>.limits` then `<path>.requests` of a container's resources (a limit stands in for
        an unset request)."""
        ours, data = flatten(self.values), chart_data(self.chart, self.version)["values"]
        out: dict[str, Any] = {}
        for part in ("limits", "requests"):
            for source in (data, ours):
                for k, v in source.items():
                    if k.startswith(f"{path}.{part}."):
                        out[k.rsplit(".", 1)[1]] = quantity(v)
        return out


def installed_charts(render: dict[str, Any]) -> dict[str, Chart]:
    """Every chart of a rendered stack (helm.v4.Chart and helm.v3.Release), by chart name."""
    out = {}
    for r in render["resources"]:
        inputs = r.get("inputs") or {}
        if r["type"] in ("kubernetes:helm.sh/v4:Chart", "kubernetes:helm.sh/v3:Release"):
            name = chart_name(str(inputs.get("chart")))
            out[name] = Chart(name, str(inputs.get("version")), inputs.get("values") or {})
    return out


def _sum(*parts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in parts:
        for k, v in p.items():
            out[k] = out.get(k, 0) + v
    return out


def daemon_pods(render: dict[str, Any]) -> list[DaemonPod]:
    """The DaemonSet pods the platform's charts put on nodes (module docstring)."""
    charts = installed_charts(render)
    out = []
    if (kps := charts.get("kube-prometheus-stack")) and kps.value("nodeExporter.enabled"):
        sub = Chart("prometheus-node-exporter", "4.47.3", kps.values.get("prometheus-node-exporter") or {})
        assert kps.version == "75.15.1", "vendor the node exporter subchart of this kube-prometheus-stack"
        out.append(DaemonPod("node-exporter", sub.requests("resources"), sub.value("tolerations") or []))
    if op := charts.get("gpu-operator"):
        nfd = "node-feature-discovery.worker."
        if op.value("nfd.enabled"):
            out.append(DaemonPod("nfd-worker", op.requests(nfd + "resources"), op.value(nfd + "tolerations") or []))
        for key, switch in GPU_OPERANDS:
            if switch is None or op.value(switch):
                out.append(DaemonPod(f"gpu-operator-{key}", op.requests(f"{key}.resources"),
                                     op.value("daemonsets.tolerations") or [], gpu_only=True))
    if nfs := charts.get("csi-driver-nfs"):
        out.append(DaemonPod("csi-nfs-node", _sum(*(nfs.requests(f"node.resources.{c}") for c in
                                                  ("nfs", "livenessProbe", "nodeDriverRegistrar"))),
                             nfs.value("node.tolerations") or []))
    if efs := charts.get("aws-efs-csi-driver"):
        out.append(DaemonPod("efs-csi-node", _sum(efs.requests("node.resources"),
                                                  efs.requests("sidecars.livenessProbe.resources"),
                                                  efs.requests("sidecars.nodeDriverRegistrar.resources")),
                             efs.value("node.tolerations") or []))
    if "aws-fsx-csi-driver" in charts:
        out.append(DaemonPod("fsx-csi-node", {}, [{"operator": "Exists"}]))
    return out


@dataclass
class Node:
    """A node of a group with what is placed on it."""

    group: NodeGroup
    pods: list[str] = field(default_factory=list)
    used: dict[str, Any] = field(default_factory=dict)

    def fits(self, spec: dict[str, Any]) -> bool:
        if why_not(spec, self.group) is not None:
            return False
        want = {**pod_requests(spec), "pods": 1}
        return all(res in self.group.unknown or not v
                   or self.used.get(res, 0) + v <= self.group.allocatable.get(res, 0)
                   for res, v in want.items())

    def place(self, name: str, spec: dict[str, Any]) -> None:
        self.pods.append(name)
        self.used = _sum(self.used, {**pod_requests(spec), "pods": 1})


def new_node(group: NodeGroup, daemons: list[DaemonPod]) -> Node:
    node = Node(group)
    for d in daemons:
        if d.runs_on(group):
            node.place(f"daemonset/{d.name}", {"containers": [{"resources": {"requests": dict(d.requests)}}]})
    return node


def _score(spec: dict[str, Any], group: NodeGroup) -> float:
    """decreasing_pod_orderer.go calculatePodScore (containers' cpu and memory requests)."""
    score = 0.0
    for res in ("cpu", "memory"):
        want = sum(quantity(((c.get("resources") or {}).get("requests") or {}).get(res, 0))
                   for c in spec.get("containers", []))
        have = group.allocatable.get(res, 0)
        if have and res not in group.unknown:
            score += float(want) / float(have)
    return score


def pack(pods: list[tuple[str, dict[str, Any]]], groups: list[NodeGroup], daemons: list[DaemonPod],
         max_nodes: dict[str, int] | None = None) -> tuple[list[Node], list[str]]:
    """(the nodes the job's pods land on, the pods that fit none). Pods are taken largest first
    (scored against the first group's node); each goes to a node already holding the job's pods
    where it fits, else to a new node of the first group that takes it (at most
    `max_nodes[group]` nodes of a group where given: a host of an on-prem stack is one node)."""
    order = sorted(pods, key=lambda p: -_score(p[1], groups[0]))
    nodes: list[Node] = []
    left = []
    for name, spec in order:
        node = next((n for n in nodes if n.fits(spec)), None)
        if node is None:
            for g in groups:
                cap = (max_nodes or {}).get(g.name)
                if cap is not None and sum(n.group is g for n in nodes) >= cap:
                    continue
                candidate = new_node(g, daemons)
                if candidate.fits(spec):
                    node = candidate
                    nodes.append(node)
                    break
        if node is None:
            left.append(name)
        else:
            node.place(name, spec)
    return nodes, left
