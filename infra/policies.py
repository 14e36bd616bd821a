"""Guard rails as plain functions over resources (type, name, inputs): used by the tests and by the policy pack.

Each policy's `check` takes one resource as the engine sees it (camelCase inputs) and returns
the violations it finds, as sentences. `infra/policy/` wraps the same functions as a Pulumi
policy pack for users with the CLI (`pulumi up --policy-pack infra/policy`). This module
imports only the standard library, so the pack's own virtualenv needs nothing else.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Set on a resource (tag) only when the stack config says `allowOpenEndpoints: true`.
OPEN_ENDPOINTS_TAG = "alchemist.io/open-endpoints"
# Job pods carry this label (alchemist_jobs.contract.MANAGED_BY_LABEL; a test keeps them equal).
JOB_LABEL = ("app.kubernetes.io/managed-by", "alchemist")
TEAM_LABEL = "alchemist.io/team"
ALLOWED_POD_SECURITY = ("restricted", "baseline")
WORLD = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
GUARDED_PORTS = {22: "SSH", 443: "API", 6443: "API"}


@dataclass(frozen=True)
class Resource:
    """One resource as a policy sees it."""

    type: str
    name: str
    props: Mapping[str, Any]


@dataclass(frozen=True)
class Policy:
    name: str
    description: str
    check: Callable[[Resource], list[str]]


def _get(obj: Any, *path: str, default: Any = None) -> Any:
    for key in path:
        if not isinstance(obj, Mapping) or key not in obj:
            return default
        obj = obj[key]
    return obj


def _is_world(cidr: Any) -> bool:
    try:
        return ipaddress.ip_network(str(cidr), strict=False) in WORLD
    except ValueError:
        return False


def _open_allowed(props: Mapping[str, Any]) -> bool:
    tags = props.get("tags") or {}
    return isinstance(tags, Mapping) and OPEN_ENDPOINTS_TAG in tags


def _is_gpu_instance(instance_type: Any) -> bool:
    family = str(instance_type).split(".")[0]
    return len(family) >= 2 and family[0] in "gp" and family[1].isdigit()


# --- storage encrypted at rest ----------------------------------------------------------


def check_storage_encrypted(r: Resource) -> list[str]:
    p = r.props
    if (
        r.type in ("aws:efs/fileSystem:FileSystem", "aws:ebs/volume:Volume")
        and p.get("encrypted") is not True
    ):
        return [f"{r.name}: {r.type.split(':')[-1]} must set encrypted: true"]
    if r.type == "aws:ecr/repository:Repository":
        for enc in p.get("encryptionConfigurations") or []:
            if _get(enc, "encryptionType") not in (None, "AES256", "KMS", "KMS_DSSE"):
                return [f"{r.name}: ECR repository encryption must be AES256 or KMS"]
    if r.type == "eks:index:Cluster":
        classes = p.get("storageClasses")
        if isinstance(classes, Mapping):
            bad = [n for n, sc in classes.items() if _get(sc, "encrypted") is not True]
            if bad:
                return [f"{r.name}: EBS storage classes {', '.join(sorted(bad))} must set encrypted: true"]
    if r.type == "kubernetes:storage.k8s.io/v1:StorageClass" and p.get("provisioner") in (
        "ebs.csi.aws.com", "kubernetes.io/aws-ebs"
    ):  # fmt: skip
        if str(_get(p, "parameters", "encrypted", default="")).lower() != "true":
            return [f'{r.name}: EBS StorageClass must set parameters.encrypted: "true"']
    if r.type == "aws:ec2/launchTemplate:LaunchTemplate":
        for bdm in p.get("blockDeviceMappings") or []:
            ebs = _get(bdm, "ebs") or {}
            if str(ebs.get("encrypted", "")).lower() != "true":
                return [f"{r.name}: launch template volumes must be encrypted"]
    return []


# --- IMDSv2 on GPU nodes ------------------------------------------------------------------


def _gpu_node_group(p: Mapping[str, Any]) -> bool:
    ami = str(p.get("amiType") or "")
    return (
        p.get("gpu") is True
        or "NVIDIA" in ami
        or "GPU" in ami
        or any(_is_gpu_instance(t) for t in (p.get("instanceTypes") or []))
        or _is_gpu_instance(p.get("instanceType") or "")
    )


def check_imdsv2_on_gpu_nodes(r: Resource) -> list[str]:
    p = r.props
    if r.type in ("eks:index:ManagedNodeGroup", "eks:index:NodeGroupV2", "eks:index:NodeGroup"):
        if _gpu_node_group(p) and p.get("launchTemplate") is None and p.get("enableIMDSv2") is not True:
            return [f"{r.name}: GPU node group must set enableIMDSv2: true (instance metadata v2 only)"]
    if r.type == "aws:eks/nodeGroup:NodeGroup" and _gpu_node_group(p) and p.get("launchTemplate") is None:
        return [f"{r.name}: GPU node group needs a launch template with metadata httpTokens: required"]
    if r.type in ("aws:ec2/launchTemplate:LaunchTemplate", "aws:ec2/instance:Instance"):
        gpu = _is_gpu_instance(p.get("instanceType") or "") or _get(p, "tags", "alchemist.io/pool") == "gpu"
        if gpu and _get(p, "metadataOptions", "httpTokens") != "required":
            return [f"{r.name}: GPU instances must set metadataOptions.httpTokens: required"]
    return []


# --- no SSH or API endpoint open to the world ------------------------------------------


def _rule_opens(rule: Mapping[str, Any]) -> list[str]:
    """The guarded services an ingress rule opens to 0.0.0.0/0 or ::/0."""
    cidrs = [*(rule.get("cidrBlocks") or []), *(rule.get("ipv6CidrBlocks") or [])]
    cidrs += [c for c in (rule.get("cidrIpv4"), rule.get("cidrIpv6")) if c]
    if not any(_is_world(c) for c in cidrs):
        return []
    protocol = str(rule.get("protocol", rule.get("ipProtocol", "tcp")))
    lo, hi = rule.get("fromPort", 0), rule.get("toPort", 65535)
    if protocol in ("-1", "all"):
        lo, hi = 0, 65535
    if protocol not in ("tcp", "6", "-1", "all"):
        return []
    return sorted({svc for port, svc in GUARDED_PORTS.items() if int(lo or 0) <= port <= int(hi or 65535)})


def check_no_open_endpoints(r: Resource) -> list[str]:
    p = r.props
    if _open_allowed(p):
        return []
    if r.type == "eks:index:Cluster" or r.type == "aws:eks/cluster:Cluster":
        vpc = p.get("vpcConfig") if r.type == "aws:eks/cluster:Cluster" else p
        if _get(vpc, "endpointPublicAccess", default=True) is not False:
            cidrs = _get(vpc, "publicAccessCidrs") or []
            if not cidrs or any(_is_world(c) for c in cidrs):
                return [f"{r.name}: public API endpoint open to 0.0.0.0/0; list publicAccessCidrs or set "
                        "alchemist:allowOpenEndpoints: true"]  # fmt: skip
    if r.type == "aws:ec2/securityGroup:SecurityGroup":
        opened = sorted({s for rule in p.get("ingress") or [] for s in _rule_opens(rule)})
        if opened:
            return [f"{r.name}: security group opens {' and '.join(opened)} to 0.0.0.0/0"]
    if r.type in (
        "aws:ec2/securityGroupRule:SecurityGroupRule",
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
    ):
        if r.type.endswith("SecurityGroupRule") and p.get("type") != "ingress":
            return []
        opened = _rule_opens(p)
        if opened:
            return [f"{r.name}: ingress rule opens {' and '.join(opened)} to 0.0.0.0/0"]
    if r.type in ("eks:index:ManagedNodeGroup", "aws:eks/nodeGroup:NodeGroup"):
        remote = p.get("remoteAccess")
        if isinstance(remote, Mapping) and not remote.get("sourceSecurityGroupIds"):
            return [f"{r.name}: node SSH (remoteAccess) without sourceSecurityGroupIds is open to 0.0.0.0/0"]
    return []


# --- Pod Security on team namespaces ------------------------------------------------------


def check_team_pod_security(r: Resource) -> list[str]:
    if r.type != "kubernetes:core/v1:Namespace":
        return []
    labels = _get(r.props, "metadata", "labels") or {}
    if TEAM_LABEL not in labels:
        return []
    level = labels.get("pod-security.kubernetes.io/enforce")
    if level not in ALLOWED_POD_SECURITY:
        name = _get(r.props, "metadata", "name", default=r.name)
        return [f"{name}: team namespace must enforce Pod Security restricted or baseline, not {level!r}"]
    return []


# --- no privileged job pods ---------------------------------------------------------------

WORKLOAD_TYPES = {
    "kubernetes:core/v1:Pod": ("spec",),
    "kubernetes:batch/v1:Job": ("spec", "template"),
    "kubernetes:batch/v1:CronJob": ("spec", "jobTemplate", "spec", "template"),
    "kubernetes:apps/v1:Deployment": ("spec", "template"),
    "kubernetes:apps/v1:StatefulSet": ("spec", "template"),
    "kubernetes:apps/v1:DaemonSet": ("spec", "template"),
    "kubernetes:apps/v1:ReplicaSet": ("spec", "template"),
}


def check_no_privileged_job_pods(r: Resource) -> list[str]:
    path = WORKLOAD_TYPES.get(r.type)
    if path is None:
        return []
    template = _get(r.props, *path) if r.type != "kubernetes:core/v1:Pod" else r.props
    labels = _get(template, "metadata", "labels") or _get(r.props, "metadata", "labels") or {}
    if labels.get(JOB_LABEL[0]) != JOB_LABEL[1]:
        return []
    spec = _get(template, "spec") or {}
    bad = [
        c.get("name", "?")
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        if _get(c, "securityContext", "privileged") is True
    ]
    return [f"{r.name}: job pod containers {', '.join(bad)} must not be privileged"] if bad else []


POLICIES: tuple[Policy, ...] = (
    Policy("storage-encrypted", "Storage is encrypted at rest (EFS, EBS, ECR, storage classes).",
           check_storage_encrypted),
    Policy("imdsv2-on-gpu-nodes", "GPU nodes require instance metadata v2 (IMDSv2).", check_imdsv2_on_gpu_nodes),
    Policy("no-open-endpoints", "No SSH or API endpoint is open to 0.0.0.0/0 unless the stack config allows it.",
           check_no_open_endpoints),
    Policy("team-pod-security", "Every team namespace enforces restricted or baseline Pod Security.",
           check_team_pod_security),
    Policy("no-privileged-job-pods", "Job pods (managed-by: alchemist) never run privileged containers.",
           check_no_privileged_job_pods),
)  # fmt: skip


def violations(resources: Iterable[Resource], policies: Iterable[Policy] = POLICIES) -> list[tuple[str, str]]:
    """(policy name, message) for every violation of every policy over the resources."""
    policies = list(policies)
    return [(p.name, msg) for r in resources for p in policies for msg in p.check(r)]
