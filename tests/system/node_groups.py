"""The nodes a rendered platform gives pods, and whether a pod fits one, as upstream decides it.

- AWS: each EKS managed node group the program registers, as the cluster autoscaler sees a
  node it would add: `buildNodeFromTemplate` of kubernetes/autoscaler
  cluster-autoscaler/cloudprovider/aws/aws_manager.go at tag cluster-autoscaler-1.35.0 (the app
  version of the pinned chart 9.59.0; Apache-2.0). Capacity: pods 110, cpu, memory and
  nvidia.com/gpu of the instance type (ec2_instance_types.go at that tag, vendored in
  tests/fixtures/autoscaler/), plus a resource per `k8s.io/cluster-autoscaler/node-template/
  resources/<name>` tag of the ASG or of the managed node group (DescribeNodegroup tags);
  allocatable = capacity. Labels: the generic ones (`buildGenericLabels`), the ASG's
  `node-template/label/` and `eks:` tags, then the node group's own (aws_wrapper.go
  `getManagedNodegroupInfo`: diskSize, amiType, capacityType, k8sVersion, nodegroup name and
  its labels). Taints: the ASG's `node-template/taint/` tags plus the node group's
  (`taintEksTranslator`). The ASG tags are the ones EKS puts on a managed node group's Auto
  Scaling group (`eks:cluster-name`, `eks:nodegroup-name`, the autoscaler's discovery tags;
  AWS EKS user guide, "Managed node groups": the Auto Scaling group "is tagged" so that the
  autoscaler discovers it): the program sets none of its own.
- AWS, a node once it runs: the same labels and taints, allocatable as the AL2023 EKS AMIs'
  node agent sets the kubelet (awslabs/amazon-eks-ami nodeadm at tag v20260724, MIT-0:
  kubelet/eni_max_pods.go `calculateStandardMaxPods`, kubelet/config.go
  `getCPUMillicoresToReserve`, `getMemoryMebibytesToReserve` = 11 x maxPods + 255 MiB, eviction
  at memory.available 100Mi; instance data vendored in tests/fixtures/autoscaler/). A pod of a
  group at zero must fit both: the template to start a node, the node to run on it. The
  kernel's own share of memory is not subtracted (it varies by kernel), nor DaemonSet pods.
- On-prem (k3s): each host of the stack config as the rendered join command makes it
  (`--node-label`, `--node-taint`), with its `gpus` as nvidia.com/gpu; the config gives no CPU
  or memory figure, so those are not judged there.
- kind: each node of the rendered kind config, labels as configured; capacity is the laptop's.
- `existing`: only what the platform itself puts on the cluster's nodes. The GPU Operator
  chart deploys Node Feature Discovery, which labels a node with an NVIDIA PCI device
  (`feature.node.kubernetes.io/pci-<vendor>.present` under the chart's `deviceLabelFields:
  [vendor]`), and the operator then labels that node `nvidia.com/gpu.present: "true"`
  (NVIDIA/gpu-operator v25.10.1 controllers/state_manager.go `labelGPUNodes`, vendored in
  tests/fixtures/chart_names/); its device plugin advertises the GPUs (`gpusPerNode`). Any
  other label, taint, CPU or memory is the cluster's own, unknown here: a GPU node and a node
  without GPUs, each with only those labels.

Fit: kube-scheduler's filters NodeResourcesFit (requests of resources the node advertises or
the pod asks for, k8s.io/component-helpers PodRequests), TaintToleration (NoSchedule and
NoExecute), NodeAffinity (node selector, required affinity) and the pod count.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kueue_model import pod_requests, quantity, required_affinity_matches, tolerates

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "autoscaler"
INSTANCE_TYPES = json.loads((FIXTURES / "ec2_instance_types-1.35.0.json").read_text())["instance_types"]
EKS_INSTANCE_INFO = json.loads((FIXTURES / "eks_instance_info-v20260724.json").read_text())["instance_info"]
GPU_OPERATOR_LABELS = json.loads((FIXTURES.parent / "chart_names" / "gpu-operator-v25.10.1-node-labels.json").read_text())
RESOURCE_TAG = "k8s.io/cluster-autoscaler/node-template/resources/"
LABEL_TAG = "k8s.io/cluster-autoscaler/node-template/label/"
TAINT_TAG = "k8s.io/cluster-autoscaler/node-template/taint/"
EKS_TAINT_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute",
                     "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


@dataclass
class NodeGroup:
    name: str
    min_size: int
    labels: dict[str, str]
    taints: list[dict[str, str]]
    allocatable: dict[str, Any]  # resource -> quantity; a resource absent here is not advertised
    unknown: set[str] = field(default_factory=set)  # resources whose amount the platform does not know


def _asg_labels(tags: dict[str, str]) -> dict[str, str]:
    """aws_manager.go extractLabelsFromAsg."""
    out = {}
    for k, v in tags.items():
        parts = k.split(LABEL_TAG)
        if len(parts) <= 1:
            parts = k.split("eks:")
        if len(parts) > 1 and parts[1]:
            out[parts[1]] = v
    return out


def _asg_taints(tags: dict[str, str]) -> list[dict[str, str]]:
    """aws_manager.go extractTaintsFromAsg."""
    out = []
    for k, v in tags.items():
        if re.fullmatch(r"(.*):(?:NoSchedule|NoExecute|PreferNoSchedule)", v) and TAINT_TAG in k:
            value, effect = v.split(":", 1)
            out.append({"key": k.split(TAINT_TAG)[1], "value": value, "effect": effect})
    return out


def _tag_resources(tags: dict[str, str]) -> dict[str, Any]:
    """aws_manager.go extractAllocatableResourcesFromAsg / extractAllocatableResourcesFromTags."""
    out = {}
    for k, v in tags.items():
        parts = k.split(RESOURCE_TAG)
        if len(parts) > 1 and parts[1]:
            try:
                out[parts[1]] = quantity(v)
            except ValueError:
                continue
    return out


def eks_template_node(mng: dict[str, Any], cluster_name: str, region: str, zone: str,
                      kubernetes_version: str) -> NodeGroup:
    """buildNodeFromTemplate for an EKS managed node group (inputs of pulumi_eks ManagedNodeGroup)."""
    nodegroup_name = mng.get("nodeGroupName") or mng["_name"]
    # The ASG's type: the first of the node group's instance types (getInstanceTypeForAsg
    # takes the first override of the mixed-instances policy EKS writes).
    itype = mng["instanceTypes"][0]
    t = INSTANCE_TYPES[itype]
    capacity: dict[str, Any] = {"pods": 110, "cpu": t["vcpu"], "nvidia.com/gpu": t["gpu"],
                                "memory": t["memory_mb"] * 1024 * 1024}
    # What EKS tags a managed node group's Auto Scaling group with.
    asg_tags = {"eks:cluster-name": cluster_name, "eks:nodegroup-name": nodegroup_name,
                "k8s.io/cluster-autoscaler/enabled": "true", f"k8s.io/cluster-autoscaler/{cluster_name}": "owned"}
    capacity.update(_tag_resources(asg_tags))
    labels = {"kubernetes.io/arch": t["architecture"], "kubernetes.io/os": "linux",
              "node.kubernetes.io/instance-type": itype, "topology.kubernetes.io/region": region,
              "topology.kubernetes.io/zone": zone, "topology.ebs.csi.aws.com/zone": zone,
              "kubernetes.io/hostname": f"{nodegroup_name}-asg-template"}
    labels.update(_asg_labels(asg_tags))
    taints = _asg_taints(asg_tags)
    if labels.get("nodegroup-name") and labels.get("cluster-name"):  # an EKS managed node group
        mng_labels = {"eks.amazonaws.com/nodegroup": nodegroup_name, "k8sVersion": kubernetes_version}
        if mng.get("amiType"):
            mng_labels["amiType"] = mng["amiType"]
        if mng.get("capacityType"):
            mng_labels["eks.amazonaws.com/capacityType"] = mng["capacityType"]
        if mng.get("diskSize"):
            mng_labels["diskSize"] = str(mng["diskSize"])
        mng_labels.update(mng.get("labels") or {})
        labels.update(mng_labels)  # joinNodeLabelsChoosingUserValuesOverAPIValues: the API's win
        for taint in mng.get("taints") or []:
            if taint.get("key") is not None and taint.get("value") is not None:
                taints.append({"key": taint["key"], "value": taint["value"],
                               "effect": EKS_TAINT_EFFECTS[taint["effect"]]})
        capacity.update(_tag_resources(mng.get("tags") or {}))
    return NodeGroup(nodegroup_name, int(mng["scalingConfig"]["minSize"]), labels, taints,
                     {k: quantity(v) for k, v in capacity.items()})


def eks_nodes(mng: dict[str, Any], template: NodeGroup, efa: int) -> NodeGroup:
    """The group's nodes once running: the template's labels and taints, the real allocatable
    of its smallest instance type."""
    smallest = min(mng["instanceTypes"], key=lambda t: (INSTANCE_TYPES[t]["vcpu"], INSTANCE_TYPES[t]["memory_mb"]))
    gpus = INSTANCE_TYPES[smallest]["gpu"]
    return NodeGroup(template.name, template.min_size, template.labels, template.taints,
                     eks_node_allocatable(smallest, gpus, efa))


def eks_node_allocatable(instance_type: str, gpus: int, efa: int) -> dict[str, Any]:
    """A running AL2023 EKS node's allocatable (nodeadm: capacity less kube-reserved and the
    hard eviction threshold; the device plugins advertise the GPUs and EFA devices)."""
    t, info = INSTANCE_TYPES[instance_type], EKS_INSTANCE_INFO[instance_type]
    max_pods = info["default_max_enis"] * (info["ipv4_addresses_per_interface"] - 1) + 2
    total = t["vcpu"] * 1000
    reserved_cpu = 0  # getCPUMillicoresToReserve: 6% of the first core, 1% of the second, 0.5% up to 4, 0.25% above
    for start, end, pct in ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, total, 25)):
        if total > start:
            reserved_cpu += (min(total, end) - start) * pct // 10000
    memory_mib = t["memory_mb"] - (11 * max_pods + 255) - 100
    out = {"pods": max_pods, "cpu": quantity(f"{total - reserved_cpu}m"), "memory": quantity(f"{memory_mib}Mi")}
    if gpus:
        out["nvidia.com/gpu"] = quantity(gpus)
    if efa:
        out["vpc.amazonaws.com/efa"] = quantity(efa)
    return out


def k3s_nodes(create_scripts: list[str], hosts: list[dict[str, Any]]) -> list[NodeGroup]:
    """Each on-prem host as its k3s install command registers it (labels and taints from the
    `--node-label k=v` and `--node-taint k=v:Effect` flags; `--node-name` names it)."""
    out = []
    for script in create_scripts:
        words = shlex.split(script.replace("\\\n", " "), comments=False, posix=True)
        if "--node-name" not in words:
            continue
        name = words[words.index("--node-name") + 1]
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
        taints = []
        for i, w in enumerate(words[:-1]):
            if w == "--node-label":
                k, v = words[i + 1].split("=", 1)
                labels[k] = v
            elif w == "--node-taint":
                kv, effect = words[i + 1].rsplit(":", 1)
                k, v = kv.split("=", 1)
                taints.append({"key": k, "value": v, "effect": effect})
        host = next(h for h in hosts if h["name"] == name)
        gpus = int(host.get("gpus", 0))
        alloc = {"pods": 110, **({"nvidia.com/gpu": gpus} if gpus else {})}
        out.append(NodeGroup(name, 1, labels, taints, {k: quantity(v) for k, v in alloc.items()},
                             unknown={"cpu", "memory"}))
    return out


def kind_nodes(config_yaml: str) -> list[NodeGroup]:
    """The nodes of a rendered kind config (its kubeadm `node-labels`; no GPUs, no taints on
    workers; the control plane keeps its NoSchedule taint)."""
    cfg = yaml.safe_load(config_yaml)
    out = []
    for i, node in enumerate(cfg["nodes"]):
        labels = {"kubernetes.io/os": "linux", "kubernetes.io/hostname": f"kind-{node['role']}-{i}"}
        for patch in node.get("kubeadmConfigPatches") or []:
            doc = yaml.safe_load(patch)
            extra = ((doc.get("nodeRegistration") or {}).get("kubeletExtraArgs") or {})
            for kv in filter(None, str(extra.get("node-labels", "")).split(",")):
                k, v = kv.split("=", 1)
                labels[k] = v
        taints = ([{"key": "node-role.kubernetes.io/control-plane", "value": "", "effect": "NoSchedule"}]
                  if node["role"] == "control-plane" else [])
        out.append(NodeGroup(labels["kubernetes.io/hostname"], 1, labels, taints,
                             {"pods": quantity(110)}, unknown={"cpu", "memory"}))
    return out


def existing_nodes(gpus_per_node: int, operator_values: dict[str, Any]) -> list[NodeGroup]:
    """An `existing` cluster's nodes as the platform's GPU Operator leaves them.

    `operator_values` are the GPU Operator chart's values as rendered (ours over its defaults):
    NFD must be on and label by vendor, or no node gets the operator's label.
    """
    generic = {"kubernetes.io/os": "linux"}
    cpu = NodeGroup("existing-cpu", 1, {**generic, "kubernetes.io/hostname": "existing-cpu"}, [],
                    {"pods": quantity(110)}, unknown={"cpu", "memory"})
    if not gpus_per_node:
        return [cpu]
    nvidia = {k: v for k, v in GPU_OPERATOR_LABELS["nfd_gpu_labels"].items() if k.endswith("-10de.present")}
    nfd_label = "feature.node.kubernetes.io/pci-10de.present"
    assert operator_values["nfd.enabled"], "NFD off: nothing labels the GPU nodes"
    assert operator_values["node-feature-discovery.worker.config.sources.pci.deviceLabelFields"] == ["vendor"]
    assert nfd_label in nvidia
    gpu_labels = {**generic, "kubernetes.io/hostname": "existing-gpu", nfd_label: "true",
                  **GPU_OPERATOR_LABELS["common_gpu_label"]}
    gpu = NodeGroup("existing-gpu", 1, gpu_labels, [], {"pods": quantity(110), "nvidia.com/gpu": quantity(gpus_per_node)},
                    unknown={"cpu", "memory"})
    return [cpu, gpu]


def why_not(spec: dict[str, Any], group: NodeGroup) -> str | None:
    """None when the pod fits a node of the group, else the first failing filter, as
    kube-scheduler (and the autoscaler's simulation of it) would say."""
    for taint in group.taints:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not tolerates(spec.get("tolerations") or [], taint):
            return f"untolerated taint {taint['key']}={taint.get('value', '')}:{taint['effect']}"
    if not required_affinity_matches(spec, group.labels):
        return "node(s) didn't match Pod's node affinity/selector"
    requests = pod_requests(spec)
    requests["pods"] = 1
    for res, want in requests.items():
        if res in group.unknown or not want:
            continue
        have = group.allocatable.get(res, 0)
        if want > have:
            return f"Insufficient {res} ({want} > {have})"
    return None
